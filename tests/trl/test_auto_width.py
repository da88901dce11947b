"""PAIR's default in the trainer: ``width="auto"`` audits, decides with the core's AutoWidth (the
audit row ``default``'s rule) and switches widths; audit tokens are counted."""

from __future__ import annotations

import numpy as np
import pytest
from pair_helpers import make_config, make_trainer

from pairht.audit import ROWS, WidthAdvice, decision_for
from pairht.trl.audit_mode import AutoWidthCallback


def _callback(trainer) -> AutoWidthCallback:
    (cb,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, AutoWidthCallback)]
    return cb


def test_the_bare_config_runs_the_default_row(tmp_path):
    from pairht.trl import PairGRPOConfig

    cfg = PairGRPOConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True,
                         num_generations=4, per_device_train_batch_size=4)
    assert cfg.width == "auto"
    trainer = make_trainer(tmp_path, width=None)
    assert trainer.pair_args.width == "whole"  # the safe option until the first audit
    auto = trainer.auto_width
    row = ROWS["default"]
    assert auto.options == row.options and auto.confidence == row.confidence
    assert (auto.budget_ratio, auto.pi_min) == (trainer.pair_args.budget_ratio,
                                               trainer.pair_args.pi_min)
    assert auto.audits.maxlen == trainer.pair_args.width_history


@pytest.mark.parametrize(("given", "width"), [
    ({"allocator": "vip"}, "prefixes"), ({"weighting": "clipped", "mode": "practical",
                                         "w_max": 5.0}, "prefixes"),
    ({"design": "bernoulli"}, "prefixes"), ({}, "auto"),
])
def test_a_named_rule_design_or_weighting_gets_prefixes(tmp_path, given, width):
    assert make_config(tmp_path, width=None, **given).width == width


def test_auto_refuses_what_it_would_override(tmp_path):
    with pytest.raises(ValueError, match=r"width='auto' .* got allocator='vip'"):
        make_config(tmp_path, width="auto", allocator="vip")
    with pytest.raises(ValueError, match="width_audit_every must"):
        make_config(tmp_path, width="auto", width_audit_every=0)


def test_auto_audits_decides_counts_tokens_and_feeds_the_heads(tmp_path):
    trainer = make_trainer(tmp_path, width="auto", max_steps=4, width_audit_every=2,
                           width_audit_prompts=3)
    trainer.train()
    cb = _callback(trainer)
    # before step 1 and after step 2; none after the last step
    assert [step for step, _, _ in cb.decisions] == [0, 2]
    logs = trainer.state.log_history
    audit = [row["pair/audit_tokens"] for row in logs if "pair/audit_tokens" in row]
    assert len(audit) == 2 and trainer.pair_audit_tokens == int(sum(audit)) > 0
    options = [row["pair/auto_option"] for row in logs if "pair/auto_option" in row]
    assert len(options) == 4
    for _, option, reason in cb.decisions:
        assert option in trainer.auto_width.options and reason
    # 2 audits x 3 prompts x G = 6 complete groups reached the heads
    assert trainer.head_trainer.n_labels >= 2 * 3 * 6
    assert len(trainer.auto_width.audits) == 2


def test_auto_runs_each_decided_width(tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path, width="auto", max_steps=3, width_audit_every=1,
                           width_audit_prompts=2)
    g = trainer.pair_args.num_generations
    plan = iter([("pair_dr_narrow", 4), ("pair_dr", None), ("grpo_small", None)])
    seen: list[tuple[str, str, int | None]] = []

    def observe(population, *, seed=0):
        choice, w = next(plan)
        adv = WidthAdvice(choice, 0.9, 0.8, 1.0, group_size=3.0, generated=0.6,
                          option=choice, prefix_width=w)
        return decision_for(adv, g)

    def record(_self, *args, **kwargs):
        a = trainer.pair_args
        d = trainer.last_draw
        seen.append((a.width, a.allocator, None if d.subset is None else d.subset.shape[1]))

    monkeypatch.setattr(trainer.auto_width, "observe", observe)
    from transformers import TrainerCallback

    class Record(TrainerCallback):
        on_step_end = record

    # runs before AutoWidthCallback's step-end audit: the width of the batch just trained
    trainer.callback_handler.callbacks.insert(0, Record())
    trainer.train()
    assert seen == [("subset", "pair_dr", 4), ("prefixes", "pair_dr", None),
                    ("whole", "pair_dr", None)]
    assert np.isfinite(trainer.state.log_history[-1]["train_loss"])
