"""PairGRPOTrainer end to end on CPU: checkpoint/resume of the design, reward failures, metrics."""

from __future__ import annotations

import os

import numpy as np
import pytest
from pair_helpers import make_trainer, scored_batch

from pairht.trl.config import RewardFailureWarning, RewardFunctionError
from pairht.trl.trainer import PAIR_STATE_FILE


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


def _flaky_reward(prompts, completions, completion_ids, **kwargs):
    # Crashes on any batch holding an odd-length completion; 1 for every other row.
    if any(len(ids) % 2 for ids in completion_ids):
        raise RuntimeError("verifier crashed")
    return [1.0] * len(completion_ids)


def _broken_reward(prompts, completions, completion_ids, **kwargs):
    raise KeyError("answer")


def test_reward_exceptions_are_zero_reward_counted_and_warned_only_when_opted_in(tmp_path,
                                                                                caplog):
    # the masked full batch: its rows are indexed by (prompt, candidate) below
    trainer = make_trainer(tmp_path, reward=_flaky_reward, per_device_train_batch_size=12,
                           drop_unselected_rows=False, reward_failure="zero")
    with pytest.warns(RewardFailureWarning, match=r"step 1: \d+ reward function call\(s\) "
                                                  r"raised and were scored 0"):
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
    shown = [r for r in caplog.records if "_flaky_reward raised" in r.getMessage()]
    assert len(shown) == 1 and shown[0].exc_info is not None
    # ... and a later step with failures warns again: the warning is per step, not once
    failing = make_trainer(tmp_path / "b", reward=_broken_reward, per_device_train_batch_size=12,
                           reward_failure="zero")
    for seed in (0, 1):
        with pytest.warns(RewardFailureWarning, match="reward_failure='zero'"):
            scored_batch(failing, 2, seed=seed)
    assert failing._metrics["train"]["pair/reward_failures"] == [
        float(d["mask"].sum()) for d in failing.draw_history]


def test_a_reward_exception_stops_training_by_default_naming_the_function_and_prompt(tmp_path):
    # a 0 for a crashed verifier is a wrong reward: the default raises, as TRL does
    trainer = make_trainer(tmp_path, reward=_flaky_reward, per_device_train_batch_size=12,
                           drop_unselected_rows=False)
    assert trainer.args.reward_failure == "raise"
    with pytest.raises(RewardFunctionError,
                       match=r"reward function '_flaky_reward' raised on prompt [01] "
                             r"\(candidate \d of 6, batch row \d+\): "
                             r"RuntimeError\('verifier crashed'\)") as info:
        scored_batch(trainer, 2)
    assert isinstance(info.value.__cause__, RuntimeError)  # the function's own exception
    assert "reward_failure='zero'" in str(info.value)  # and the opt-in is named


def test_the_failing_prompt_is_the_one_whose_completion_raised(tmp_path):
    # the row named must be the row that raised: a reward that fails on one known prompt
    def picky_reward(prompts, completions, completion_ids, **kwargs):
        if any(p == bad for p in prompts):
            raise ValueError("unparseable")
        return [1.0] * len(prompts)

    trainer = make_trainer(tmp_path, reward=picky_reward, per_device_train_batch_size=12,
                           drop_unselected_rows=False, budget_ratio=1.0)
    bad = trainer.train_dataset[1]["prompt"]  # prompt 1 of the batch of 2
    assert bad != trainer.train_dataset[0]["prompt"]
    with pytest.raises(RewardFunctionError, match=r"'picky_reward' raised on prompt 1 "):
        scored_batch(trainer, 2)


def test_the_guard_names_the_completion_without_a_batch_map_and_a_batch_only_failure():
    from pairht.trl.rewards import GuardedReward as _GuardedReward

    def batch_shy(prompts, completions, completion_ids, **kwargs):
        if len(prompts) > 1:  # fails only on a batch: every completion scores alone
            raise MemoryError("batch too large")
        return [2.0 if prompts[0] == "q1" else 1.0]

    def second_bad(prompts, completions, completion_ids, **kwargs):
        if "q1" in prompts:
            raise ZeroDivisionError("0")
        return [1.0] * len(prompts)

    call = dict(prompts=["q0", "q1", "q2"], completions=["a"] * 3, completion_ids=[[1]] * 3)
    with pytest.raises(RewardFunctionError, match=r"'batch_shy' raised on a batch of 3 "
                                                  r"completions, though each scores alone"):
        _GuardedReward(batch_shy, {"reward_failures": 0})(**call)
    with pytest.raises(RewardFunctionError, match=r"'second_bad' raised on completion 1 of the "
                                                  r"3 it was called with: ZeroDivisionError"):
        _GuardedReward(second_bad, {"reward_failures": 0})(**call)
    # "zero" keeps the values that exist and zeroes only the row that raises
    stats = {"reward_failures": 0}
    assert _GuardedReward(batch_shy, stats, "zero")(**call) == [1.0, 2.0, 1.0]
    assert _GuardedReward(second_bad, stats, "zero")(**call) == [1.0, 0.0, 1.0]
    assert stats["reward_failures"] == 1


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
