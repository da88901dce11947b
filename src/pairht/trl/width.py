"""Switching a running :class:`~pairht.trl.PairGRPOTrainer` between widths, and PAIR's
default width ``"auto"`` (the core's :class:`pairht.audit.AutoWidth`).

Every batch's design is drawn and logged before its rewards, so switching between batches
keeps each batch's estimator exact.
"""

from __future__ import annotations

from typing import Any

from pairht.step import ESTIMATORS, default_estimator
from pairht.trl.config import PairGRPOConfig, check_width, prefix_rules, rule_design

__all__ = ["start_auto_width", "switch_width"]


def switch_width(a: PairGRPOConfig, width: str, whole_group_size: float | None = None,
                 allocator: str | None = None, prefix_group_size: int | None = None) -> None:
    """Set ``a``'s width (and, with ``allocator``, its prefix rule), checked by the config's
    rule (:func:`pairht.trl.config.check_width`); a size left ``None`` keeps the config's.

    ``"prefixes"``: PAIR; ``"whole"``: ``whole_group_size`` whole completions per group,
    small-group GRPO; ``"subset"``: prefixes for a uniform subset of ``prefix_group_size``
    candidates, the prefix rule among them. ``allocator`` must be a prefix rule
    (:data:`pairht.step.PREFIX_RULES`); a new rule brings its own design
    (:func:`pairht.trl.config.rule_design`).
    """
    size = a.whole_group_size if whole_group_size is None else whole_group_size
    width_size = a.prefix_group_size if prefix_group_size is None else prefix_group_size
    rule = a.allocator if allocator is None else allocator
    if allocator is not None and rule not in prefix_rules():
        # Only the prefix rules are a width verdict's options; without an allocator the
        # current rule stays, checked by check_width ("whole" needs a prefix rule).
        raise ValueError(f"allocator must be a prefix rule {prefix_rules()} to switch "
                         f"widths; got {rule!r}")
    estimator = default_estimator(rule)
    if ESTIMATORS.capabilities(estimator).exact_weights_only and a.weighting != "exact":
        raise ValueError(f"allocator {rule!r} estimates with the {estimator} estimator, "
                         f"which has exact weights only; got weighting={a.weighting!r}")
    assert a.num_generations is not None  # resolved by GRPOConfig
    a.width, a.whole_group_size, a.prefix_group_size = check_width(
        width, size, a.num_generations, rule, width_size)
    if rule != a.allocator:
        # the verdict weighed each rule with its own design: a new rule brings it
        a.design = rule_design(rule, a.anchor_pair)
    a.allocator = rule


def start_auto_width(trainer: Any) -> None:
    """``width="auto"``: the core's :class:`pairht.audit.AutoWidth` and the callback that
    audits and switches (:class:`pairht.trl.audit_mode.AutoWidthCallback`). Until its first
    audit (before step 1) the width is the safe option, small-group GRPO. Another width:
    nothing to do."""
    from pairht.audit import AutoWidth
    from pairht.trl.audit_mode import AutoWidthCallback

    a = trainer.pair_args
    if a.width != "auto":
        return
    if trainer.accelerator.num_processes > 1 and a.use_vllm and a.vllm_mode == "server":
        raise ValueError(
            "width='auto' audits on the main process, and vLLM server mode generates as a "
            "collective across processes; set width='prefixes' (or 'whole' / 'subset') "
            "with use_vllm=True, vllm_mode='server' and several processes"
        )
    g = a.num_generations
    assert g is not None  # resolved by GRPOConfig
    trainer.auto_width = AutoWidth(a.budget_ratio, g, pi_min=a.pi_min, history=a.width_history)
    callback = AutoWidthCallback(a.width_audit_every, a.width_audit_prompts)
    callback.trainer = trainer
    trainer.add_callback(callback)
    trainer.set_width("whole", float(min(max(2.0, g * a.budget_ratio), g)))
