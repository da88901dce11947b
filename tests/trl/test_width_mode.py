"""PairGRPOConfig.width / PairGRPOTrainer.set_width / AuditCallback(switch_width=True): small-
group GRPO inside the trainer (whole completions, no prefixes) where the prefixes do not pay."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

from pair_helpers import RecordingReward, make_config, make_trainer, scored_batch

from pairht.trl.audit_mode import AuditCallback

G = 6


def test_width_names_and_rules_are_checked_at_construction(tmp_path):
    assert make_config(tmp_path).width == "prefixes"
    cfg = make_config(tmp_path, width="whole", whole_group_size=3)
    assert (cfg.width, cfg.whole_group_size) == ("whole", 3.0)
    with pytest.raises(ValueError, match=r"width must be one of \('auto', 'prefixes', 'whole', "
                                         r"'subset'\) \(from pairht.trl\.config\.WIDTHS\)"):
        make_config(tmp_path, width="grpo")
    with pytest.raises(ValueError, match="set whole_group_size"):
        make_config(tmp_path, width="whole")
    for bad in (1.5, 7):
        with pytest.raises(ValueError, match=r"whole_group_size must lie in \[2, "
                                             r"num_generations=6\]"):
            make_config(tmp_path, width="whole", whole_group_size=bad)
    with pytest.raises(TypeError, match="whole_group_size must be a real number"):
        make_config(tmp_path, width="whole", whole_group_size="3")
    with pytest.raises(ValueError, match="allocator must stay 'pair'"):
        make_config(tmp_path, width="whole", whole_group_size=3, allocator="uniform")
    # width "subset": prefixes for prefix_group_size candidates
    cfg = make_config(tmp_path, width="subset", prefix_group_size=4, allocator="pair_dr")
    assert (cfg.width, cfg.prefix_group_size, cfg.whole_group_size) == ("subset", 4, None)
    with pytest.raises(ValueError, match="set prefix_group_size"):
        make_config(tmp_path, width="subset")
    for bad in (1, 7):
        with pytest.raises(ValueError, match=r"prefix_group_size must be an int in \[2, 6\]; "
                                             rf"got prefix_group_size={bad}"):
            make_config(tmp_path, width="subset", prefix_group_size=bad)
    with pytest.raises(TypeError, match="prefix_group_size must be an int or None"):
        make_config(tmp_path, width="subset", prefix_group_size=4.0)
    with pytest.raises(ValueError, match=r"allocator must stay 'pair'.*width='subset'"):
        make_config(tmp_path, width="subset", prefix_group_size=4, allocator="uniform")


def test_whole_width_generates_a_uniform_subset_to_the_end_and_no_prefixes(tmp_path):
    """width="whole", G' = 3 of 6: every group completes exactly 3 rows (pi = 1/2, rho the
    SRSWOR joint 3*2/(6*5)), whole (no prefix phase), the others carry one EOS and reach no
    verifier; the pair-HT advantages are the pair average over the completed rows,
    A_i = (1 / (G' (G' - 1))) sum_{j completed} (r_i - r_j); the heads get no labels."""
    reward = RecordingReward()
    trainer = make_trainer(tmp_path, reward=reward, double=True, width="whole",
                           whole_group_size=3)
    out = scored_batch(trainer, 2)
    draw = trainer.last_draw
    assert draw.mask.shape == (2, G) and draw.mask.sum(axis=1).tolist() == [3, 3]
    np.testing.assert_allclose(draw.pi, 0.5, rtol=0, atol=1e-12)
    off = ~np.eye(G, dtype=bool)
    np.testing.assert_allclose(draw.joint[:, off], 3 * 2 / (6 * 5), rtol=1e-12)
    assert draw.prefix_len.sum() == 0 and draw.features is None
    sel = draw.mask.reshape(-1)
    completions = out["completion_ids"]  # dropped to the selected rows (exact mode)
    assert completions.shape[0] == int(sel.sum())
    assert len(reward.seen) == 6  # only the completed rows were verified
    assert draw.suffix_len.reshape(-1)[sel].tolist() == [len(ids) for ids in reward.seen]
    r = draw.rewards
    for b in range(2):
        J = draw.mask[b]
        want = np.where(J, (J.sum() * r[b] - np.nansum(np.where(J, r[b], 0.0))) / (3 * 2), 0)
        np.testing.assert_allclose(draw.advantages[b], want, rtol=0, atol=1e-12)
    assert trainer._pending_labels is None
    t = draw.generated_tokens()
    assert t.prefix == 0 and t.suffix == int(draw.suffix_len.sum())


def test_whole_width_with_a_fractional_size_mixes_its_neighbours_and_trains(tmp_path):
    trainer = make_trainer(tmp_path, width="whole", whole_group_size=2.5, max_steps=2)
    trainer.train()
    sizes = np.concatenate([d["mask"].sum(axis=1) for d in trainer.draw_history])
    assert set(sizes.tolist()) <= {2, 3}
    np.testing.assert_allclose(trainer.draw_history[0]["pi"], 2.5 / G, rtol=1e-12)
    logs = [e for e in trainer.state.log_history if "pair/prefix_tokens" in e]
    assert len(logs) == 2 and all(e["pair/prefix_tokens"] == 0 for e in logs)
    assert all(e["pair/whole_group_size"] == 2.5 for e in logs)
    assert trainer.head_trainer.n_labels == 0


def test_set_width_switches_from_the_next_batch_and_is_checked(tmp_path):
    trainer = make_trainer(tmp_path)
    scored_batch(trainer, 2)
    assert trainer.last_draw.prefix_len.sum() > 0  # PAIR: prefixes for all
    trainer.set_width("whole", 4)
    scored_batch(trainer, 2, seed=1)
    assert trainer.last_draw.prefix_len.sum() == 0
    assert trainer.last_draw.mask.sum(axis=1).tolist() == [4, 4]
    trainer.set_width("prefixes")
    scored_batch(trainer, 2, seed=2)
    assert trainer.last_draw.prefix_len.sum() > 0
    with pytest.raises(ValueError, match="whole_group_size must lie in"):
        trainer.set_width("whole", 9)
    with pytest.raises(ValueError, match="width must be one of"):
        trainer.set_width("half")


def test_audit_callback_switches_the_width_to_its_verdict(tmp_path):
    """switch_width=True: after each audit the trainer trains on with the verdict's width
    (small-group GRPO: width "whole" with G' clipped to [2, G]; PAIR: "prefixes")."""
    with pytest.raises(ValueError, match="needs advise=True"):
        AuditCallback(steps=[1], advise=False, switch_width=True)
    cb = AuditCallback(steps=[1], n_prompts=3, output_dir=str(tmp_path / "audit"),
                       switch_width=True)
    trainer = make_trainer(tmp_path, callbacks=[cb], max_steps=2)
    trainer.train()
    (_, adv), = cb.advice
    a = trainer.pair_args
    # the toy's prefixes are half its responses: they do not pay (2.6x GRPO's MSE here)
    assert adv.choice == "grpo_small" and adv.ratio > 1
    assert a.width == "whole"
    assert a.whole_group_size == pytest.approx(min(max(adv.group_size, 2.0), G))
    assert trainer.last_draw.prefix_len.sum() == 0  # step 2 ran small-group GRPO
    # a PAIR verdict switches back, to the verdict's prefix rule
    cb._decision = ("prefixes", None, "pair_batch")
    cb._switch()
    assert (a.width, a.allocator) == ("prefixes", "pair_batch")
    cb._decision = ("whole", 3.0, None)  # GRPO keeps the rule for when the prefixes come back
    cb._switch()
    assert (a.width, a.whole_group_size, a.allocator) == ("whole", 3.0, "pair_batch")
    with pytest.raises(ValueError, match="allocator must be a prefix rule"):
        trainer.set_width("prefixes", None, "uniform")
    assert a.allocator == "pair_batch"  # a refused switch changes nothing
    # a verdict for the strata rule brings its own design, and back to PAIR's program its
    assert a.design == "conditional_poisson"
    trainer.set_width("prefixes", None, "pair_strata")
    assert (a.allocator, a.design) == ("pair_strata", None)
    trainer.set_width("prefixes", None, "pair")
    assert (a.allocator, a.design) == ("pair", "conditional_poisson")
    trainer.set_width("prefixes", None, "pair_dr")  # the difference estimator's own design
    assert (a.allocator, a.design) == ("pair_dr", None)
    a.weighting, a.w_max = "clipped", 10.0
    with pytest.raises(ValueError, match="difference estimator"):
        trainer.set_width("prefixes", None, "pair_dr")
    # ... so the callback does not ask the audit about it under that weighting
    from pairht.step import PREFIX_RULES
    from pairht.trl.config import switchable_rules

    assert switchable_rules("exact") == (*PREFIX_RULES, "pair_dr_narrow")
    assert switchable_rules("clipped") == tuple(r for r in PREFIX_RULES if r != "pair_dr")
    # a narrower-width verdict: width "subset" at the audit's width, its inner rule
    a.weighting, a.w_max = "exact", None
    cb._decision = ("subset", None, "pair_dr", 4)
    cb._switch()
    assert (a.width, a.prefix_group_size, a.allocator) == ("subset", 4, "pair_dr")
    scored_batch(trainer, 2, seed=3)
    assert trainer.last_draw.subset.shape == (2, 4)
    with pytest.raises(ValueError, match="prefix_group_size must be an int in"):
        trainer.set_width("subset", None, "pair", 7)
    assert (a.width, a.prefix_group_size, a.allocator) == ("subset", 4, "pair_dr")


def test_audit_callback_turns_a_narrower_width_verdict_into_width_subset(tmp_path):
    """A verdict for pair_dr_narrow (the audit's width w) becomes set_width("subset", ...,
    allocator="pair_dr", prefix_group_size=w)."""
    from pairht.audit import WidthAdvice

    cb = AuditCallback(steps=[1], n_prompts=3, output_dir=str(tmp_path / "audit"),
                       switch_width=True)
    trainer = make_trainer(tmp_path, callbacks=[cb])
    adv = WidthAdvice(choice="pair_dr_narrow", ratio=0.5, low=0.4, high=0.6, group_size=3.5,
                      generated=0.6, option="pair_dr_narrow", prefix_width=5)
    import pairht.audit

    original = pairht.audit.width_advice
    pairht.audit.width_advice = lambda *args, **kw: adv
    try:
        cb._advise(1, population=None)
    finally:
        pairht.audit.width_advice = original
    assert cb._decision == ("subset", None, "pair_dr", 5)
    cb._switch()
    a = trainer.pair_args
    assert (a.width, a.prefix_group_size, a.allocator, a.design) == ("subset", 5, "pair_dr", None)


def _subset_trainer(tmp_path, allocator, reward=None):
    # budget 0.2 at width 4 of 6 leaves pi|S < 1 for some candidates; spread heads vary pi
    trainer = make_trainer(tmp_path, reward=reward, double=True, width="subset",
                           prefix_group_size=4, allocator=allocator, budget_ratio=0.2,
                           head_kind="mlp")
    gen = torch.Generator().manual_seed(0)
    for head in (trainer.head_trainer.heads.success, trainer.head_trainer.heads.cost):
        with torch.no_grad():
            head[-1].weight.copy_(2.0 * torch.randn(head[-1].weight.shape, generator=gen,
                                                    dtype=head[-1].weight.dtype))
        # predicted suffixes long beside the prefixes, so the matched budget stays below 1
        trainer.head_trainer.heads.cost_scale.fill_(100.0)
    return trainer


@pytest.mark.parametrize("allocator", ["pair_dr", "pair"])
def test_subset_width_prefixes_a_uniform_subset_and_estimates_its_pair_average(tmp_path,
                                                                              allocator):
    """width="subset", w = 4 of 6: exactly w rows per group get prefixes (the others are
    never generated nor scored); the rule plans on the subsets' block at the budget ratio
    that spends full width's tokens; the draw logs the two-phase pi*, rho*; the advantages
    are the rule's estimate of the subset's pair average; the heads learn from the subsets
    as groups of w."""
    from pairht import pair_advantages
    from pairht.estimators.difference import difference_advantages, prediction_baselines
    from pairht.step import subset_budget_ratio
    from pairht.step.subset import take

    reward = RecordingReward()
    trainer = _subset_trainer(tmp_path, allocator, reward)
    B, w = 3, 4
    out = scored_batch(trainer, B)
    draw = trainer.last_draw
    S = draw.subset
    assert S.shape == (B, w) and np.all(np.diff(S, axis=1) > 0)
    inside = np.zeros((B, G), bool)
    inside[np.arange(B)[:, None], S] = True
    assert np.all(draw.prefix_len[inside] >= 1) and np.all(draw.prefix_len[~inside] == 0)
    assert not np.any(draw.mask & ~inside)  # only subset rows are completed
    assert len(reward.seen) == int(draw.mask.sum())  # only they reached the verifier
    assert out["completion_ids"].shape[0] == int(draw.mask.sum())  # the rest dropped
    # the budget: b_w from the subsets' prefix tokens and predicted suffix tokens, pooled
    done, c_hat = take(draw.prefix_done, S), take(draw.c_hat, S)
    unfinished = np.where(done, 0.0, c_hat)
    b_w = min(1.0, subset_budget_ratio(float(draw.prefix_len.sum()), float(unfinished.sum()),
                                       0.2, w / G))
    assert 0.2 < b_w < 1.0
    np.testing.assert_allclose(draw.budget, b_w * unfinished.sum(axis=1), rtol=1e-12)
    # the two-phase design around the rule's own
    inner = draw.inner_joint
    pi_S = np.diagonal(inner, axis1=1, axis2=2)
    assert np.any(pi_S < 1.0) and (draw.mask.sum(axis=1) >= 2).any()
    np.testing.assert_allclose(take(draw.pi, S), w / G * pi_S, rtol=1e-15)
    assert np.all(draw.pi[~inside] == 0)
    joint_S = draw.joint[np.arange(B)[:, None, None], S[:, :, None], S[:, None, :]]
    off = ~np.eye(w, dtype=bool)
    np.testing.assert_allclose(joint_S[:, off], w * (w - 1) / (G * (G - 1)) * inner[:, off],
                               rtol=1e-15)
    # advantages: the rule's estimate on the block, computed here independently
    r_S, J_S = take(draw.rewards, S), take(draw.mask, S)
    if allocator == "pair_dr":
        base = prediction_baselines(take(draw.p_hat, S), r_S, done)
        want = difference_advantages(r_S, J_S, inner, base)
    else:
        want = pair_advantages(np.nan_to_num(r_S), J_S, inner)
    np.testing.assert_allclose(take(draw.advantages, S), want, rtol=1e-12, atol=1e-14)
    assert np.all(draw.advantages[~inside] == 0)
    labels = trainer._pending_labels
    assert labels["group_size"] == w and labels["mask"].sum() == draw.mask.sum()
    np.testing.assert_allclose(labels["pi"][labels["mask"]], pi_S.reshape(-1)[labels["mask"]])


def test_subset_width_trains_and_logs_its_width(tmp_path):
    trainer = make_trainer(tmp_path, width="subset", prefix_group_size=4, allocator="pair_dr",
                           max_steps=2)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "pair/prefix_tokens" in e]
    assert len(logs) == 2 and all(e["pair/prefix_group_size"] == 4 for e in logs)
    assert all(0 < e["pair/token_fraction"] <= 1 for e in logs)
    assert all(len(d["subset"][0]) == 4 for d in trainer.draw_history)
    assert trainer.head_trainer.n_labels > 0
