"""The paper's comparators (issue 16) train by name in PairGRPOTrainer: the trainer keeps a
per-prompt history of observed rewards (pairht.torch.history) and passes it to the step, so the
prompt-level rules (vip, hora, duet) plan from it; every rule logs the pair/* metrics."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("trl")

from pair_helpers import make_trainer

from pairht.torch.history import PromptHistory, group_keys, prompt_key

COMPARATORS = ("vip", "hora", "duet", "dppo", "pair_joint")


def test_history_update_is_the_hajek_rate_times_the_observed_count():
    """Against the formula written out by hand: weights 1/pi over the observed candidates."""
    h = PromptHistory()
    rewards = np.array([[1.0, 0.0, 1.0, np.nan], [np.nan, np.nan, np.nan, np.nan]])
    mask = ~np.isnan(rewards)
    pi = np.array([[1.0, 0.25, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5]])
    h.update([b"a", b"b"], rewards, mask, pi)
    rate = (1 / 1.0 + 1 / 0.5) / (1 / 1.0 + 1 / 0.25 + 1 / 0.5)  # = 3 / 7
    got = h.lookup([b"a", b"b"])
    assert got["trials"].tolist() == [3.0, 0.0]  # nothing observed: history unchanged
    assert got["successes"][0] == pytest.approx(3 * rate, rel=1e-15)
    raw = PromptHistory(weighting="raw")
    raw.update([b"a", b"b"], rewards, mask, pi)
    assert raw.lookup([b"a"])["successes"].tolist() == [2.0]
    # a second visit with decay: s <- gamma s + n rate, t <- gamma t + n
    d = PromptHistory(weighting="raw", decay=0.5)
    d.update([b"a"], rewards[:1], mask[:1], pi[:1])
    d.update([b"a"], np.array([[0.0, 0.0, 0.0, 0.0]]), np.ones((1, 4), bool), pi[:1])
    assert d.lookup([b"a"])["successes"].tolist() == [1.0]
    assert d.lookup([b"a"])["trials"].tolist() == [0.5 * 3 + 4]


def test_history_clips_rewards_and_refuses_bad_input():
    h = PromptHistory()
    h.update([b"a"], np.array([[2.0, -1.0]]), np.ones((1, 2), bool), np.ones((1, 2)))
    got = h.lookup([b"a"])
    assert got["successes"].tolist() == [1.0] and got["trials"].tolist() == [2.0]
    with pytest.raises(ValueError, match="pi must be > 0 wherever mask is True"):
        h.update([b"a"], np.array([[1.0, 0.0]]), np.ones((1, 2), bool), np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="rewards must be finite wherever mask"):
        h.update([b"a"], np.array([[np.nan, 0.0]]), np.ones((1, 2), bool), np.ones((1, 2)))
    with pytest.raises(ValueError, match="weighting must be one of"):
        PromptHistory(weighting="ht")
    with pytest.raises(ValueError, match=r"decay must be a float in \(0, 1\]"):
        PromptHistory(decay=0.0)


def test_history_state_round_trips():
    h = PromptHistory(decay=0.9)
    h.update([b"\x00\xff"], np.array([[1.0, 0.0]]), np.ones((1, 2), bool), np.ones((1, 2)))
    h2 = PromptHistory()
    h2.load_state_dict(h.state_dict())
    assert h2.decay == 0.9 and h2.weighting == "hajek"
    for k in ("successes", "trials"):
        assert np.array_equal(h2.lookup([b"\x00\xff"])[k], h.lookup([b"\x00\xff"])[k])


def test_group_keys_take_one_key_per_group_and_refuse_mixed_groups():
    rows = np.stack([prompt_key([1, 2, 3])] * 3 + [prompt_key([1, 2, 4])] * 3)
    keys = group_keys(rows, 3)
    assert len(keys) == 2 and keys[0] != keys[1]
    assert keys[0] == bytes(prompt_key([1, 2, 3]))
    with pytest.raises(ValueError, match="every group of 2 rows must repeat one prompt"):
        group_keys(rows[2:6], 2)  # rows 2, 3: different prompts


@pytest.mark.parametrize("name", COMPARATORS)
def test_comparator_trains_two_steps_and_logs_pair_metrics(tmp_path, name):
    # Two prompts, two per step: the second step revisits both, so vip/hora plan from a
    # non-empty history (without it they raise).
    trainer = make_trainer(tmp_path, allocator=name, max_steps=2, n_prompts=2)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "pair/suffix_tokens" in e]
    assert len(logs) == 2
    for key in ("pair/token_fraction", "pair/completed", "pair/ess", "pair/budget"):
        assert all(np.isfinite(e[key]) for e in logs), key
    hist = trainer.prompt_history
    assert len(hist) == 2
    masks = [d["mask"] for d in trainer.draw_history]
    assert len(masks) == 2
    # every observed reward, and only those, entered the history
    total = hist.lookup(hist.keys())["trials"].sum()
    assert total == sum(int(m.sum()) for m in masks)
    if name == "dppo":  # DPPO saves no generation: every candidate is completed
        assert all(m.all() for m in masks)



def test_the_second_plan_reads_the_hajek_update_of_the_first_draws_observed_rewards(
        tmp_path, monkeypatch):
    """What the step receives at step 2 is, per prompt, step 1's observed rewards weighted by
    1 / pi (recomputed here from the arrays the trainer handed to the store)."""
    import pairht.step.step_plan as step

    plans, updates = [], []
    real_plan, real_update = step.plan_continuations, PromptHistory.update

    def spy_plan(inputs, **kw):
        plans.append((list(trainer._history_keys), inputs.history))
        return real_plan(inputs, **kw)

    def spy_update(self, keys, rewards, mask, pi):
        updates.append((list(keys), rewards.copy(), mask.copy(), pi.copy()))
        return real_update(self, keys, rewards, mask, pi)

    monkeypatch.setattr(step, "plan_continuations", spy_plan)
    monkeypatch.setattr(PromptHistory, "update", spy_update)
    trainer = make_trainer(tmp_path, allocator="hora", max_steps=2, n_prompts=2)
    trainer.train()
    assert len(plans) == 2 and len(updates) == 2
    assert plans[0][1]["trials"].tolist() == [0.0, 0.0]  # nothing seen before the first plan
    keys, rewards, mask, pi = updates[0]
    r = np.clip(np.where(mask, rewards, 0.0), 0.0, 1.0)
    n = mask.sum(axis=1)
    rate = (mask * r / pi).sum(axis=1) / (mask / pi).sum(axis=1)
    expected = {k: (n[b] * rate[b], float(n[b])) for b, k in enumerate(keys)}
    keys2, hist2 = plans[1]
    assert sorted(keys2) == sorted(keys)  # both prompts revisited
    for b, k in enumerate(keys2):
        assert hist2["successes"][b] == pytest.approx(expected[k][0], rel=1e-12)
        assert hist2["trials"][b] == expected[k][1]


def test_dppo_prunes_completed_rows_out_of_the_update(tmp_path, monkeypatch):
    """DPPO (issue 16): every candidate is completed, then pruned with keep probabilities from
    the full-group advantages; the pruned design's exact pi and rho replace the plan's, and the
    pruned rows leave the update batch."""
    import torch

    import pairht
    import pairht.comparators as comparators

    calls = []
    real_keep = comparators.dppo_keep_probabilities

    def spy_keep(advantages, **kw):
        q, o = real_keep(advantages, **kw)
        calls.append((np.array(advantages, copy=True), q, o))
        return q, o

    monkeypatch.setattr(comparators, "dppo_keep_probabilities", spy_keep)
    trainer = make_trainer(tmp_path, allocator="dppo", max_steps=2, n_prompts=2, double=True)
    batches = []
    real_loss = trainer._compute_loss

    def recording(model, inputs):
        batches.append(dict(inputs))
        return real_loss(model, inputs)

    trainer._compute_loss = recording
    trainer.train()
    assert len(calls) == 2 and len(batches) == 2
    draw = trainer.last_draw
    adv_full, q, o = calls[-1]
    # the keep probabilities were computed from the full-group pair advantages (every row
    # completed: pi = rho = 1, the complete pair average)
    assert draw.generated_mask.all() and np.all(draw.generated_pi == 1.0)
    full = np.ones_like(draw.generated_mask)
    want = pairht.pair_advantages(draw.rewards, full, np.ones(full.shape + full.shape[-1:]))
    np.testing.assert_allclose(adv_full, want, rtol=0, atol=1e-12)
    assert (o < 1).any()  # the fixture prunes something
    # the draw's design IS the pruning design, and its mask the one DPPO kept
    pi, joint = comparators.dppo_design(q, o)
    assert np.array_equal(draw.pi, pi) and np.array_equal(draw.joint, joint)
    kept = trainer.draw_history[-1]["kept"]
    assert np.array_equal(draw.mask, kept)
    assert trainer.draw_history[-1]["mask"].all()  # what was generated: everything
    # pruned rows are out of the update batch; the kept rows carry the pair-HT advantages on K
    batch = batches[-1]
    assert batch["prompt_ids"].shape[0] == max(1, int(kept.sum()))
    adv = pairht.pair_advantages(draw.rewards, kept, joint)
    np.testing.assert_allclose(
        sorted(batch["advantages"].tolist()),
        sorted(adv[kept].tolist() if kept.any() else [0.0]), rtol=0, atol=1e-12,
    )
    assert torch.all(batch["completion_mask"].sum(-1) > 0) or not kept.any()
    # metrics: the kept fraction as drawn, generation accounting on every completed row
    logs = [e for e in trainer.state.log_history if "pair/dppo_kept_fraction" in e]
    assert len(logs) == 2
    assert logs[-1]["pair/dppo_kept_fraction"] == pytest.approx(kept.mean(), rel=1e-12)
    assert logs[-1]["pair/dppo_expected_kept_fraction"] == pytest.approx(pi.mean(), rel=1e-12)
    assert logs[-1]["pair/completed"] == pytest.approx(draw.generated_mask.shape[1], rel=0)
