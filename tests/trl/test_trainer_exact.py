"""Exact mode: the trainer's update IS the pair Horvitz-Thompson estimator.

Everything runs in float64 on CPU (``model.double()``), so the trainer's loss gradient and the
estimator computed from per-sequence autograd scores agree to rounding: a few hundred float64
terms, hence the 1e-9 relative tolerance.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from pair_helpers import (
    RecordingReward,
    loss_gradient,
    make_trainer,
    scored_batch,
    sequence_scores,
    use_float64_logprobs,
)

import pairht

N_PROMPTS = 3
G = 6
RTOL = 1e-9


def _spread_heads(trainer, seed: int = 0) -> None:
    """Give the (real) prefix heads varied predictions so pi differs across candidates."""
    trainer.head_trainer.head = "mlp"  # the paper's MLP heads (default: linear probe, unfitted)
    gen = torch.Generator().manual_seed(seed)
    for head in (trainer.head_trainer.heads.success, trainer.head_trainer.heads.cost):
        last = head[-1]
        with torch.no_grad():
            noise = torch.randn(last.weight.shape, generator=gen, dtype=last.weight.dtype)
            last.weight.copy_(2.0 * noise)


def _exact_trainer(tmp_path, **overrides):
    # The masked full batch: these tests index its rows by (prompt, candidate). Dropping the
    # unselected rows gives the same step (tests/trl/test_drop_rows.py).
    overrides.setdefault("drop_unselected_rows", False)
    reward = RecordingReward()
    trainer = make_trainer(
        tmp_path,
        reward=reward,
        double=True,
        num_generations=G,
        per_device_train_batch_size=N_PROMPTS * G,
        **overrides,
    )
    _spread_heads(trainer)
    use_float64_logprobs(trainer)
    return trainer, reward


def _brute_force_pair_ht(rewards, scores, mask, joint):
    """(1/M) sum_{i<j} J_i J_j / rho_ij * (r_i - r_j)(s_i - s_j) / 2, one edge at a time."""
    g = rewards.shape[0]
    m = g * (g - 1) / 2
    out = np.zeros(scores.shape[1])
    for i, j in itertools.combinations(range(g), 2):
        if mask[i] and mask[j]:
            out += (rewards[i] - rewards[j]) * (scores[i] - scores[j]) / 2 / joint[i, j] / m
    return out


def test_exact_update_equals_pair_ht_gradient(tmp_path):
    trainer, _ = _exact_trainer(tmp_path)
    out = scored_batch(trainer, N_PROMPTS)
    draw = trainer.last_draw
    # The fixture must exercise the claim: unequal pi, unselected rows, observed edges.
    assert draw.pi.std() > 0.05
    assert (~draw.mask).any()
    assert (draw.mask.sum(-1) >= 2).any()
    block = trainer.model.model.norm.weight
    grad = loss_gradient(trainer, out, block)
    rows = np.flatnonzero(draw.mask.reshape(-1))
    scores = sequence_scores(trainer, out, block, rows).reshape(N_PROMPTS, G, -1)
    rewards = np.nan_to_num(draw.rewards, nan=0.0)
    g_hat = pairht.pair_ht_gradient(rewards, scores, draw.mask, draw.joint)  # (B, d)
    expected = trainer.update_scale * g_hat.mean(axis=0)
    assert np.linalg.norm(expected) > 1e-6
    np.testing.assert_allclose(grad, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())
    brute = np.mean(
        [_brute_force_pair_ht(rewards[b], scores[b], draw.mask[b], draw.joint[b])
         for b in range(N_PROMPTS)],
        axis=0,
    )
    np.testing.assert_allclose(grad, trainer.update_scale * brute, rtol=RTOL,
                               atol=RTOL * np.abs(expected).max())


def test_full_inclusion_equals_loo_gradient(tmp_path):
    # budget_ratio = 1 affords every suffix: pi = 1, rho = 1, and the pair-HT estimator is the
    # complete pair average, i.e. the leave-one-out (RLOO) gradient (Theorem 1).
    trainer, reward = _exact_trainer(tmp_path, budget_ratio=1.0)
    out = scored_batch(trainer, N_PROMPTS)
    draw = trainer.last_draw
    assert draw.mask.all() and np.all(draw.joint == 1.0)
    assert len(reward.seen) == N_PROMPTS * G
    block = trainer.model.model.norm.weight
    grad = loss_gradient(trainer, out, block)
    scores = sequence_scores(trainer, out, block, range(N_PROMPTS * G)).reshape(N_PROMPTS, G, -1)
    expected = trainer.update_scale * pairht.loo_gradient(draw.rewards, scores).mean(axis=0)
    assert np.linalg.norm(expected) > 1e-6
    np.testing.assert_allclose(grad, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


def test_unselected_rows_contribute_nothing(tmp_path):
    trainer, reward = _exact_trainer(tmp_path)
    out = scored_batch(trainer, N_PROMPTS)
    draw = trainer.last_draw
    mask = draw.mask.reshape(-1)
    assert (~mask).any() and mask.sum() >= 2
    # Masked out of the loss, zero advantage.
    assert torch.all(out["completion_mask"][torch.as_tensor(~mask)] == 0)
    assert torch.all(out["advantages"][torch.as_tensor(~mask)] == 0)
    # The verifier saw exactly the selected completions, once each.
    selected = [
        [int(t) for t, keep in zip(ids, m) if keep]
        for ids, m in zip(out["completion_ids"][torch.as_tensor(mask)].tolist(),
                          out["completion_mask"][torch.as_tensor(mask)].tolist())
    ]
    assert sorted(reward.seen) == sorted(selected)
    block = trainer.model.model.norm.weight
    grad = loss_gradient(trainer, out, block)
    # Scrambling the unselected rows' tokens leaves the gradient unchanged ...
    scrambled = dict(out)
    ids = out["completion_ids"].clone()
    gen = torch.Generator().manual_seed(1)
    ids[torch.as_tensor(~mask)] = torch.randint(4, 20, ids[torch.as_tensor(~mask)].shape,
                                                generator=gen)
    scrambled["completion_ids"] = ids
    np.testing.assert_array_equal(loss_gradient(trainer, scrambled, block), grad)
    # ... and dropping them entirely gives the same update up to dr_grpo's row normaliser.
    keep = torch.as_tensor(mask)
    sub = {k: (v[keep] if isinstance(v, torch.Tensor) and v.ndim >= 1 and v.shape[0] == len(mask)
               else v) for k, v in out.items()}
    sub_grad = loss_gradient(trainer, sub, block) * mask.sum() / len(mask)
    np.testing.assert_allclose(sub_grad, grad, rtol=RTOL, atol=RTOL * np.abs(grad).max())


@pytest.mark.parametrize("weighting,w_max", [("exact", None), ("clipped", 3.0), ("hajek", None)])
def test_torch_advantages_equal_core_pair_advantages(weighting, w_max):
    from pairht.designs import make_design
    from pairht.torch.advantages import design_edge_weights, pair_advantages_torch

    rng = np.random.default_rng(0)
    for g in (2, 3, 7):
        pi = rng.uniform(0.1, 1.0, size=(4, g))
        designs = [make_design("bernoulli", row) for row in pi]
        joint = np.stack([d.joint() for d in designs])
        mask = np.stack([d.sample(rng) for d in designs])
        rewards = np.where(mask, rng.integers(0, 2, size=(4, g)).astype(float), np.nan)
        W = design_edge_weights(mask, joint, weighting=weighting, w_max=w_max)
        got = pair_advantages_torch(torch.as_tensor(rewards), W, dtype=torch.float64).numpy()
        want = pairht.pair_advantages(np.nan_to_num(rewards), mask, joint,
                                      weighting=weighting, w_max=w_max)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got.sum(-1), 0.0, atol=1e-12)  # centred over endpoints
        assert np.all(got[~mask] == 0)


@pytest.mark.parametrize("allocator", ["pair", "pair_dr"])
def test_subset_width_update_is_the_rules_estimate_of_the_subsets_pair_average(tmp_path,
                                                                              allocator):
    """width="subset" (prefixes for w = 4 of 6): the update is update_scale times the mean
    over prompts of the rule's estimate on the subset, with the rule's own design rho|S:
    pair-HT edge by edge over the subset's C(w, 2) pairs, or the difference estimator; the
    pair-HT form equals pair-HT on all G candidates with the two-phase rho* the draw logs."""
    from pairht.estimators.difference import difference_advantages, prediction_baselines
    from pairht.step.subset import take

    trainer, _ = _exact_trainer(tmp_path, width="subset", prefix_group_size=4,
                                allocator=allocator, budget_ratio=0.2)
    trainer.head_trainer.heads.cost_scale.fill_(100.0)  # long predicted suffixes: b_w < 1
    out = scored_batch(trainer, N_PROMPTS)
    draw = trainer.last_draw
    S, inner = draw.subset, draw.inner_joint
    assert (~take(draw.mask, S)).any() and (draw.mask.sum(-1) >= 2).any()
    block = trainer.model.model.norm.weight
    grad = loss_gradient(trainer, out, block)
    rows = np.flatnonzero(draw.mask.reshape(-1))
    scores = sequence_scores(trainer, out, block, rows).reshape(N_PROMPTS, G, -1)
    rewards = np.nan_to_num(draw.rewards, nan=0.0)
    r_S, s_S, J_S = take(rewards, S), take(scores, S), take(draw.mask, S)
    if allocator == "pair":
        per_prompt = [_brute_force_pair_ht(r_S[b], s_S[b], J_S[b], inner[b])
                      for b in range(N_PROMPTS)]
        full = pairht.pair_ht_gradient(rewards, scores, draw.mask, draw.joint)
        np.testing.assert_allclose(full, per_prompt, rtol=RTOL,
                                   atol=RTOL * np.abs(per_prompt).max())
    else:
        base = prediction_baselines(take(draw.p_hat, S), take(draw.rewards, S),
                                    take(draw.prefix_done, S))
        A = difference_advantages(take(draw.rewards, S), J_S, inner, base)
        per_prompt = [A[b] @ s_S[b] for b in range(N_PROMPTS)]
    expected = trainer.update_scale * np.mean(per_prompt, axis=0)
    assert np.linalg.norm(expected) > 1e-6
    np.testing.assert_allclose(grad, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())
