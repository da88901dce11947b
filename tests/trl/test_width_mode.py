"""PairGRPOConfig.width / PairGRPOTrainer.set_width / AuditCallback(switch_width=True): small-
group GRPO inside the trainer (whole completions, no prefixes) where the prefixes do not pay."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("trl")

from pair_helpers import RecordingReward, make_config, make_trainer, scored_batch

from pairht_trl.audit_mode import AuditCallback

G = 6


def test_width_names_and_rules_are_checked_at_construction(tmp_path):
    assert make_config(tmp_path).width == "prefixes"
    cfg = make_config(tmp_path, width="whole", whole_group_size=3)
    assert (cfg.width, cfg.whole_group_size) == ("whole", 3.0)
    with pytest.raises(ValueError, match=r"width must be one of \('prefixes', 'whole'\) "
                                         r"\(from pairht_trl\.config\.WIDTHS\)"):
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
    from pairht_trl.config import switchable_rules

    assert switchable_rules("exact") == PREFIX_RULES
    assert switchable_rules("clipped") == tuple(r for r in PREFIX_RULES if r != "pair_dr")
