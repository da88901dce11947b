"""PairGRPOTrainer end to end on CPU: checkpoint/resume of the design, reward failures, metrics."""

from __future__ import annotations

import os

import numpy as np
import pytest
from pair_helpers import make_trainer, scored_batch

from pairht_trl.trainer import PAIR_STATE_FILE


def _train(tmp_path, **overrides):
    trainer = make_trainer(
        tmp_path,
        per_device_train_batch_size=12,  # 2 prompts x G = 6 per step
        n_prompts=8,
        save_strategy="steps",
        save_steps=1,
        **overrides,
    )
    return trainer


def test_resume_reproduces_the_next_design_draw(tmp_path):
    full = _train(tmp_path / "full", max_steps=3)
    full.train()
    assert len(full.draw_history) == 3
    ckpt = tmp_path / "full" / "checkpoint-2"
    assert (ckpt / PAIR_STATE_FILE).exists()
    resumed = _train(tmp_path / "resumed", max_steps=3)
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert len(resumed.draw_history) == 1
    want, got = full.draw_history[2], resumed.draw_history[0]
    np.testing.assert_array_equal(got["mask"], want["mask"])
    np.testing.assert_array_equal(got["pi"], want["pi"])
    assert full.design_rng.bit_generator.state == resumed.design_rng.bit_generator.state
    # The draw depends on the restored state: a fresh generator would not have given it.
    fresh = _train(tmp_path / "fresh", max_steps=1)
    assert fresh.design_rng.bit_generator.state != full.design_rng.bit_generator.state


def test_reward_exceptions_are_zero_reward_and_counted(tmp_path, caplog):
    def flaky_reward(prompts, completions, completion_ids, **kwargs):
        # Crashes on any batch holding an odd-length completion; 1 for every other row.
        if any(len(ids) % 2 for ids in completion_ids):
            raise RuntimeError("verifier crashed")
        return [1.0] * len(completion_ids)

    # the masked full batch: its rows are indexed by (prompt, candidate) below
    trainer = make_trainer(tmp_path, reward=flaky_reward, per_device_train_batch_size=12,
                           drop_unselected_rows=False)
    out = scored_batch(trainer, 2)
    draw = trainer.last_draw
    lengths = out["completion_mask"].sum(-1).numpy().reshape(draw.mask.shape)
    odd = draw.mask & (lengths % 2 == 1)
    even = draw.mask & (lengths % 2 == 0)
    assert odd.any() and even.any()  # the fixture exercises both outcomes
    np.testing.assert_array_equal(draw.rewards[odd], 0.0)
    np.testing.assert_array_equal(draw.rewards[even], 1.0)
    assert trainer._metrics["train"]["pair/reward_failures"][-1] == odd.sum()
    assert trainer._metrics["train"]["pair/verifier_calls"][-1] == draw.mask.sum()
    # the first failure's traceback is shown once, so a buggy reward function is visible
    shown = [r for r in caplog.records if "flaky_reward raised" in r.getMessage()]
    assert len(shown) == 1 and shown[0].exc_info is not None


def test_training_logs_pair_metrics(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=2, per_device_train_batch_size=12)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "pair/suffix_tokens" in entry]
    assert len(logs) == 2
    for key in (
        "pair/prefix_tokens", "pair/suffix_fraction", "pair/token_fraction", "pair/completed",
        "pair/observed_edges", "pair/max_weight", "pair/ess", "pair/solver_residual",
        "pair/solver_fallbacks", "pair/verifier_calls", "pair/cost_ratio",
    ):
        assert key in logs[0], key
    # Heads were refreshed after the first policy update and report their diagnostics.
    assert "pair/heads/loss_p" in logs[1] or "pair/heads/loss_p" in logs[0]
    # The verifier saw exactly the completed rows.
    total = sum(float(d["mask"].sum()) for d in trainer.draw_history)
    assert sum(entry["pair/verifier_calls"] for entry in logs) == total
    assert trainer.head_trainer.n_labels == total


def test_checkpoint_without_pair_state_is_refused(tmp_path):
    trainer = _train(tmp_path / "a", max_steps=1)
    trainer.train()
    ckpt = tmp_path / "a" / "checkpoint-1"
    os.remove(ckpt / PAIR_STATE_FILE)
    other = _train(tmp_path / "b", max_steps=2)
    with pytest.raises(ValueError, match=PAIR_STATE_FILE):
        other.train(resume_from_checkpoint=str(ckpt))


def test_anchor_pair_completes_two_per_group_with_exact_joint(tmp_path):
    from pairht.designs import Bernoulli
    from pairht.designs.anchored import AnchoredPair

    trainer = make_trainer(tmp_path, per_device_train_batch_size=12, anchor_pair=True,
                           budget_ratio=0.1, pi_min=0.1)
    scored_batch(trainer, 2)
    draw = trainer.last_draw
    assert np.all(draw.mask.sum(-1) >= 2)
    for b in range(2):
        design = AnchoredPair(Bernoulli(draw.pi_alloc[b]))
        np.testing.assert_allclose(draw.joint[b], design.joint(), rtol=0, atol=1e-15)
        np.testing.assert_allclose(draw.pi[b], design.pi, rtol=0, atol=1e-15)


def test_practical_mode_standardises_pair_advantages_per_group(tmp_path):
    import pairht

    trainer = make_trainer(tmp_path, per_device_train_batch_size=12, mode="practical",
                           weighting="clipped", w_max=3.0, budget_ratio=0.7)
    out = scored_batch(trainer, 2)
    draw = trainer.last_draw
    r = np.nan_to_num(draw.rewards)
    raw = pairht.pair_advantages(r, draw.mask, draw.joint, weighting="clipped", w_max=3.0)
    std = np.array([np.std(r[b][draw.mask[b]], ddof=1) if draw.mask[b].sum() > 1 else 0.0
                    for b in range(2)])
    want = raw / (std[:, None] + 1e-4)
    assert np.abs(want).max() > 0
    # the update batch holds the selected rows only (drop_unselected_rows), in row order
    np.testing.assert_allclose(out["advantages"].numpy(), want[draw.mask], rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("design", ["conditional_poisson", "dependent_rounding"])
def test_fixed_size_designs_draw_their_size_with_consistent_joints(tmp_path, design):
    # Realised accounting: the size counts unfinished candidates (finished ones are kept on
    # top); budget_ratio = 1 makes every size up to the unfinished count affordable.
    trainer = make_trainer(tmp_path, per_device_train_batch_size=12, design=design,
                           design_size=3, budget_ratio=1.0)
    scored_batch(trainer, 2)
    draw = trainer.last_draw
    done = draw.prefix_done
    n = np.minimum(3, (~done).sum(-1)) + done.sum(-1)
    np.testing.assert_array_equal(draw.mask.sum(-1), n)
    np.testing.assert_allclose(draw.pi.sum(-1), n, atol=1e-9)
    # Any fixed-size-n design: sum_{j != i} rho_ij = (n - 1) pi_i, and every pair positive.
    off = draw.joint.sum(-1) - np.diagonal(draw.joint, axis1=-2, axis2=-1)
    np.testing.assert_allclose(off, (n - 1)[:, None] * draw.pi, atol=1e-9)
    assert np.all(draw.joint > 0)
