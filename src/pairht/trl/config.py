"""``PairGRPOConfig``: every knob of PAIR on top of TRL's ``GRPOConfig``.

Defaults follow the paper's default training configuration (Table "Default training
configuration") and the appendices "Practical Departures from the Exact Estimator" and
"Implementation Details". Two modes:

``mode="exact"``
    The policy update IS the pair Horvitz-Thompson estimator (Eq. pair-ht) up to a constant:
    unclipped (one epoch, ``num_iterations=1``, so every PPO ratio is 1 and clipping is
    inactive), unstandardised (``scale_rewards="none"``), constant loss normaliser
    (``loss_type="dr_grpo"``: TRL divides the summed token loss by
    ``rows_per_micro_batch * max_completion_length``, a number that does not depend on which rows
    are masked), ``weighting="exact"``, no KL term and no entropy bonus.

``mode="practical"``
    PAIR advantages inserted into TRL's clipped PPO surrogate (default 2 epochs), with optional
    reward standardisation and clipped / Hajek weights. Not an unbiased gradient; reported as a
    "pair-corrected data-collection target" (paper, appendix "Practical Departures").
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import numbers
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pairht._validation import check_budget_ratio
from pairht.designs import DESIGNS
from pairht.estimators import VARIANTS
from pairht.estimators.horvitz_thompson import check_w_max, resolve_variant
from pairht.torch.row_drop import check_drop_rows, drop_rows_reason
from pairht.trl.defaults import CHANGED_DEFAULTS, announce_changed_defaults, trl_default
from trl import GRPOConfig

logger = logging.getLogger("pairht.trl")

MODES = ("exact", "practical")


def design_kinds() -> tuple[str, ...]:
    """Designs the config accepts: every name of the registry :data:`pairht.designs.DESIGNS`."""
    return tuple(sorted(DESIGNS))


def fixed_size_designs() -> tuple[str, ...]:
    """Registered designs with a fixed sample size (``Design.fixed_size``)."""
    return tuple(sorted(name for name, cls in DESIGNS.items() if cls.fixed_size))


def edge_proxies() -> tuple[str, ...]:
    """Edge proxies of the step's PAIR program (:data:`pairht.step.pair_program.PROXIES`)."""
    from pairht.step.pair_program import PROXIES

    return tuple(PROXIES)


def trainable_edge_proxies() -> tuple[str, ...]:
    """The proxies the trainer can feed: those that need no predictor beyond ``p_hat`` and
    ``c_hat`` (the disagreement proxy, and the length energy, which reads the prefix lengths
    the trainer passes as ``StepInputs.prefix_tokens``)."""
    from pairht.allocation.energy import NAME as LENGTH_ENERGY

    return ("disagreement", LENGTH_ENERGY)


def head_kinds() -> tuple[str, ...]:
    """Prefix-head families of :class:`pairht.torch.heads.HeadTrainer` (first: the default)."""
    from pairht.torch.heads import HEAD_KINDS

    return tuple(HEAD_KINDS)


def shrink_measures() -> tuple[str, ...]:
    """What predictions are shrunk by (:data:`pairht.torch.heads.SHRINK_MEASURES`; first: the
    default)."""
    from pairht.torch.heads import SHRINK_MEASURES

    return tuple(SHRINK_MEASURES)


def allocators() -> tuple[str, ...]:
    """Allocation rules of the step (:func:`pairht.step.allocator_names`: the built-ins and the
    registered comparators)."""
    from pairht.step import allocator_names

    return tuple(allocator_names())


def prefix_rules() -> tuple[str, ...]:
    """The prefix rules a width verdict may switch to (:data:`pairht.step.PREFIX_RULES`:
    ``"pair"``, ``"pair_batch"``, ``"pair_strata"``, ``"pair_dr"``)."""
    from pairht.step import PREFIX_RULES

    return PREFIX_RULES


def rule_design(allocator: str, anchor_pair: bool) -> str | None:
    """The design a rule runs when none is named: PAIR's default design for a rule of PAIR's
    program (fixed size over the unfinished candidates, ``"conditional_poisson"``; the anchor
    pair is defined on the Bernoulli design only), else ``None``, the allocator's own (e.g.
    ``"stratified"`` for ``"pair_strata"``; :mod:`pairht.step`)."""
    if allocator in program_allocators():
        return "bernoulli" if anchor_pair else "conditional_poisson"
    return None


def rule_estimator(allocator: str) -> str:
    """How a rule's draw is estimated: ``"difference"`` for rules built for the difference
    estimator (``"pair_dr"``: :mod:`pairht.estimators.difference`), else ``"ht"`` (the
    pair-HT estimator with the config's ``weighting``)."""
    from pairht.step import ALLOCATORS

    return ALLOCATORS.capabilities(allocator).estimator


def switchable_rules(weighting: str) -> tuple[str, ...]:
    """The prefix options a width verdict may switch to under the config's ``weighting``
    (audit row keys, :class:`pairht.trl.audit_mode.AuditCallback` asks the audit about
    these): every rule of :func:`prefix_rules` at full width, then the narrower widths
    (:data:`pairht.audit.width.NARROW_OPTIONS`, run as ``width="subset"`` with their inner
    rule); the difference estimator's (``"pair_dr"``, ``"pair_dr_narrow"``) with exact
    weights only."""
    from pairht.audit import narrow_rule
    from pairht.audit.width import NARROW_OPTIONS

    def ok(rule: str) -> bool:
        return weighting == "exact" or rule_estimator(rule) != "difference"

    return (tuple(r for r in prefix_rules() if ok(r))
            + tuple(o for o in NARROW_OPTIONS if ok(narrow_rule(o))))


def program_allocators() -> tuple[str, ...]:
    """The allocation rules that solve PAIR's program and take its size, proxy and warm start
    (:func:`pairht.step.program_allocators`: ``"pair"``, ``"pair_batch"``)."""
    from pairht.step import program_allocators as names

    return names()


def weightings() -> tuple[str, ...]:
    """Registered estimator variants (:data:`pairht.estimators.VARIANTS`) that need no ``pi``.

    The trainer builds ``W`` from the logged ``J`` and ``rho`` only, so ``"marginal_only"``
    (which reads ``pi``) is not offered.
    """
    return tuple(sorted(name for name, v in VARIANTS.items() if not v.needs_pi))


# Views of the registries at import time, for code that imports the names; the checks below
# read the registries themselves, so a design or variant registered later is accepted.
DESIGN_KINDS = design_kinds()
FIXED_SIZE_DESIGNS = fixed_size_designs()
EDGE_PROXIES = edge_proxies()
WEIGHTINGS = weightings()

#: What an exception from a (synchronous) reward function does (``PairGRPOConfig.
#: reward_failure``; the first is the default): ``"raise"`` stops training with an error that
#: names the function and the prompt, as TRL does; ``"zero"`` scores the completion 0, counts it
#: in ``pair/reward_failures`` and warns on every step it happens. A 0 for a crashed verifier
#: is a wrong reward (and a biased gradient), so it is only ever a choice.
REWARD_FAILURES = ("raise", "zero")


class RewardFunctionError(RuntimeError):
    """A reward function raised, with ``reward_failure="raise"`` (the default).

    The message names the function, the prompt (its index in the batch) and the completion;
    the function's own exception is the ``__cause__``. Defined here, beside
    :data:`REWARD_FAILURES`, so that the trainer and :mod:`pairht.trl.audit_mode` share it
    without importing each other.
    """


class RewardFailureWarning(UserWarning):
    """Completions were scored 0 because their reward function raised
    (``reward_failure="zero"``); issued on every step it happens."""


#: Generation widths of the trainer (``PairGRPOConfig.width``; the first is the default):
#: ``"auto"`` decides among the three others from the run's own audits (PAIR's default,
#: :class:`pairht.audit.AutoWidth`: small-group GRPO, the difference estimator among a
#: uniform subset's prefixes, or among every candidate's); ``"prefixes"`` gives every
#: candidate a prefix and continues a subset (PAIR);
#: ``"whole"`` generates a uniform subset of ``whole_group_size`` candidates to the end and no
#: prefixes (small-group GRPO inside the trainer, for where the prefixes do not pay);
#: ``"subset"`` gives a uniform subset of ``prefix_group_size`` candidates a prefix and runs
#: the prefix rule among them (a narrower prefix width, :mod:`pairht.step.subset`).
WIDTHS = ("auto", "prefixes", "whole", "subset")


def check_width(width: Any, whole_group_size: Any, num_generations: int, allocator: str,
                prefix_group_size: Any = None) -> tuple[str, float | None, int | None]:
    """The one check of a generation width (config construction and
    :meth:`pairht.trl.PairGRPOTrainer.set_width`); returns ``(width, whole_group_size,
    prefix_group_size)``. A size of the width not in use may be set (kept for a switch)."""
    width = _one_of(lambda: WIDTHS, "pairht.trl.config.WIDTHS")("width", width)
    size = None if whole_group_size is None else _real(0.0, math.inf, closed_hi=False)(
        "whole_group_size", whole_group_size)
    if size is not None and not 2.0 <= size <= num_generations:
        raise ValueError(
            f"whole_group_size must lie in [2, num_generations={num_generations}] (a pair needs "
            f"two completions; a non-integer size mixes its two neighbours); got "
            f"whole_group_size={whole_group_size!r}"
        )
    # a pair needs two prefixes; at num_generations it is width "prefixes"
    width_size = _integer(2, num_generations, optional=True)("prefix_group_size",
                                                             prefix_group_size)
    if width == "auto" and allocator != "pair":
        raise ValueError(
            f"width='auto' chooses the allocator itself (PAIR's default: small-group GRPO or "
            f"the difference estimator, pairht.audit.width.DEFAULT_OPTIONS); got "
            f"allocator={allocator!r}. Set width='prefixes' to run that allocator"
        )
    if width in ("whole", "subset"):
        name, value = (("whole_group_size", size) if width == "whole"
                       else ("prefix_group_size", width_size))
        if value is None:
            what = ("generates whole_group_size of the num_generations candidates to the end"
                    if width == "whole" else
                    "gives prefix_group_size of the num_generations candidates a prefix")
            raise ValueError(
                f"width={width!r} {what}; set {name} (e.g. the size that "
                f"pairht.audit.width_advice reports)"
            )
        if allocator not in prefix_rules():
            runs = ("small-group GRPO (a uniform subset, no allocation) and the allocator "
                    "applies to the prefix widths only" if width == "whole" else
                    "a prefix rule among a uniform subset")
            raise ValueError(
                f"allocator must stay 'pair' (or another prefix rule a width verdict chooses: "
                f"{', '.join(prefix_rules())}) with width={width!r}: that width runs {runs}; "
                f"got allocator={allocator!r}"
            )
    return width, size, width_size


#: Paper defaults of the prefix checkpoint and snap window, used when the response is long
#: enough (``max_completion_length >= 1024`` and ``>= 256``); shorter responses scale them
#: down (``tau = L // 4``, ``snap_window = L // 8``) so that ``tau + snap_window < L`` holds.
TAU_DEFAULT = 256
SNAP_WINDOW_DEFAULT = 32

# ------------------------------------------------------------------ field rules
# Each rule takes (name, value) and returns the value (ints and floats normalised), or raises
# TypeError (wrong kind of value) / ValueError (out of range) naming the field, the value and
# the rule.
Rule = Callable[[str, Any], Any]


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be True or False; got {name}={value!r} ({type(value).__name__}). A "
            f"string such as 'no' is truthy and would silently turn the option on."
        )
    return value


def _optional_flag(name: str, value: Any) -> bool | None:
    """``None`` (resolved later from other fields) or a ``bool`` (see :func:`_flag`)."""
    return None if value is None else _flag(name, value)


def _integer(lo: int | None, hi: int | None = None, *, optional: bool = False) -> Rule:
    """An int (numpy ints included, bool excluded) in ``[lo, hi]``; ``lo=None``: type only."""
    def rule(name: str, value: Any) -> Any:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(
                f"{name} must be an int{' or None' if optional else ''}; got {name}={value!r} "
                f"({type(value).__name__})"
            )
        value = int(value)
        if lo is not None and (value < lo or (hi is not None and value > hi)):
            bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise ValueError(f"{name} must be an int {bound}; got {name}={value!r}")
        return value

    return rule


def _real(lo: float, hi: float, *, closed_hi: bool = True) -> Rule:
    """A finite real number in ``(lo, hi]`` (or ``(lo, hi)``); ``hi = inf`` means no upper bound."""

    def rule(name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"{name} must be a real number; got {name}={value!r} ({type(value).__name__})"
            )
        value = float(value)
        inside = lo < value and (value <= hi if closed_hi else value < hi)
        if not math.isfinite(value) or not inside:
            rule_text = (
                f"be a finite number > {lo:g}" if hi == math.inf
                else f"lie in ({lo:g}, {hi:g}{']' if closed_hi else ')'}"
            )
            raise ValueError(f"{name} must {rule_text}; got {name}={value!r}")
        return value

    return rule


def _one_of(choices: Callable[[], tuple[str, ...]], registry: str) -> Rule:
    def rule(name: str, value: Any) -> str:
        names = choices()
        if not isinstance(value, str) or value not in names:
            raise ValueError(
                f"{name} must be one of {names} (from {registry}); got {name}={value!r}"
            )
        return value

    return rule


#: Every PAIR field and its rule (cross-field rules follow in ``_check_pair_fields``).
PAIR_FIELD_RULES: dict[str, Rule] = {
    "mode": _one_of(lambda: MODES, "pairht.trl.config.MODES"),
    "tau": _integer(1),
    "snap_window": _integer(0),
    "budget_ratio": _real(0.0, 1.0),
    "pi_min": _real(0.0, 1.0),
    "allocator": _one_of(allocators, "the registry pairht.step.ALLOCATORS"),
    "design": _one_of(design_kinds, "the registry pairht.designs.DESIGNS"),
    "design_size": _integer(None, optional=True),  # range: needs G, checked below
    "edge_proxy": _one_of(edge_proxies, "pairht.step.pair_program.PROXIES"),
    "covariance_term": _flag,
    "weighting": _one_of(weightings, "the registry pairht.estimators.VARIANTS, without pi"),
    "anchor_pair": _flag,
    "design_seed": _integer(0, optional=True),
    "head_kind": _one_of(head_kinds, "pairht.torch.heads.HEAD_KINDS"),
    "head_refit_every": _integer(1),
    "head_refit_growth": _real(0.0, math.inf, closed_hi=False),
    "head_width": _integer(1),
    "head_feature_window": _integer(1),
    "head_lr": _real(0.0, math.inf, closed_hi=False),
    "head_replay": _integer(1),
    "head_temperature_fraction": _real(0.0, 1.0),
    "lagged_heads": _flag,
    "shrink_to_skill": _flag,
    "shrink_by": _one_of(shrink_measures, "pairht.torch.heads.SHRINK_MEASURES"),
    "head_steps_per_update": _integer(0),
    "head_batch_size": _integer(1),
    "drop_unselected_rows": _optional_flag,  # exactness: needs the resolved TRL fields, below
    "vllm_importance_sampling_correction": _optional_flag,
    "width_audit_every": _integer(1),
    "width_audit_prompts": _integer(2),
    "width_history": _integer(1),
    "reward_failure": _one_of(lambda: REWARD_FAILURES, "pairht.trl.config.REWARD_FAILURES"),
}


@functools.cache
def _bool_fields(cls: type) -> tuple[str, ...]:
    """Every field of ``cls`` annotated exactly ``bool`` (TRL's and transformers' included)."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if hints.get(f.name) is bool)


@dataclass
class PairGRPOConfig(GRPOConfig):
    r"""Configuration of :class:`~pairht.trl.PairGRPOTrainer`: TRL's ``GRPOConfig`` plus PAIR.

    Every field is checked at construction (:data:`PAIR_FIELD_RULES`, then the cross-field
    rules): a value of the wrong kind raises ``TypeError``, an invalid value or combination
    ``ValueError``, each naming the field, the value and the rule. Every field TRL or
    transformers annotate ``bool`` must be a ``bool`` (``"no"`` is truthy). Designs, edge
    proxies and weightings are the names of the core registries.

    Defaults changed from TRL's ``GRPOConfig`` (:data:`pairht.trl.defaults.CHANGED_DEFAULTS`;
    announced once per process at WARNING by the logger ``"pairht.trl"`` when they differ
    from TRL's): ``loss_type="dr_grpo"``, ``scale_rewards="none"`` (exact mode),
    ``num_iterations=2`` (practical mode), ``vllm_importance_sampling_correction=False``.

    Parameters
    ----------
    mode : {"exact", "practical"}
        ``"exact"`` (default): the update equals ``-(1 / (G * max_completion_length))`` times
        the batch mean over prompts of the pair-HT gradient (see
        :meth:`PairGRPOTrainer.update_scale`). Requires ``num_iterations=1``,
        ``steps_per_generation == gradient_accumulation_steps``, ``scale_rewards="none"``,
        ``loss_type="dr_grpo"``, ``weighting="exact"``, ``beta=0``, no entropy bonus,
        ``top_entropy_quantile=1``, ``mask_truncated_completions=False``.
        ``"practical"``: clipped PPO surrogate with PAIR advantages.
    tau : int or None
        Prefix checkpoint in generated tokens, snapped forward to the next newline or sentence
        end within ``snap_window`` tokens. ``None`` (default): ``min(256, L // 4)`` with
        ``L = max_completion_length`` (the paper's 256 from ``L = 1024`` on), so TRL's
        default lengths need no extra argument. ``tau + snap_window < L`` is required: the
        longest prefix must leave room for a suffix.
    snap_window : int or None
        Largest forward snap of the prefix checkpoint. ``None`` (default): ``min(32, L // 8)``
        (the paper's 32 from ``L = 256`` on).
    budget_ratio : float in (0, 1]
        Expected suffix budget per group as a fraction of the predicted suffix cost of its
        *unfinished* candidates: ``budget = budget_ratio * sum_{i unfinished} c_hat_i`` (paper:
        0.5). Realised accounting (``pairht.step``): a candidate whose prefix already ended is
        kept for free (``pi = 1``), so the budget is spent on the others only.
    pi_min : float in (0, 1]
        Probability floor (paper: 0.08); caps inverse weights at ``1 / pi_min**2``.
    allocator : str
        Allocation rule, a name of :data:`pairht.step.ALLOCATORS`: ``"pair"`` (default, the
        convex continuation design), the baselines a user would try instead (``"uniform"``
        among unfinished, ``"srswor"``, ``"pointwise"``, ``"full"``) and the paper's
        comparators (``"vip"``, ``"hora"``, ``"duet"``, ``"dppo"``, ``"pair_joint"``; see
        docs/comparators.md). The same trainer, budget and accounting run every one of them.
    design : str or None
        Continuation design, a name of the core registry :data:`pairht.designs.DESIGNS`
        (``"bernoulli"``, ``"conditional_poisson"``, ``"dependent_rounding"``, ...); its exact
        joint ``rho_ij`` is logged before any reward exists. ``None`` (default): the
        allocator's own design: for ``"pair"`` ``"conditional_poisson"``, PAIR's default
        fixed-size design (``"bernoulli"`` with ``anchor_pair=True``; chosen by the audit at
        equal realised cost, docs/step.md), SRSWOR for ``"srswor"`` and the prompt-level
        comparators.
    design_size : int or None
        Sample size ``n = sum_i pi_i`` over the *unfinished* candidates of a fixed-size design
        (finished ones are kept on top; clipped to their number); ``None``: ``size="auto"`` of
        :func:`pairht.step.plan_continuations` (PAIR's default: per group, the two sizes
        neighbouring ``budget_ratio`` times its unfinished count, mixed; a group that affords
        no size of two is drawn Bernoulli). Only for fixed-size designs. An explicit ``n``
        must be affordable whatever the heads predict: with predicted costs ``c`` and no
        prefix finished the cheapest ``pi`` with ``sum pi = n`` costs at most
        ``(n / G) sum c`` (the extra mass goes to the cheapest candidates), with equality
        when the costs are equal (an untrained cost head), and the budget is
        ``budget_ratio * sum c``; so ``n`` is affordable for every prediction iff
        ``n <= floor(budget_ratio * G)``. Also ``max(2, G * pi_min) <= n``. When some
        prefixes have finished, :mod:`pairht.step` takes the size over the unfinished
        candidates and clips it to their number and to what the budget affords.
    edge_proxy : str
        Edge proxy ``a_ij`` of the contrast graph (Eq. edge-proxy), a name of
        :data:`pairht.step.pair_program.PROXIES`; the trainer can feed ``"disagreement"``
        (default) and ``"length_energy"`` (it reads the prefix lengths; docs/step.md), the
        others need predictors it does not train.
    covariance_term : bool
        Include the shared-vertex term ``b_i`` in the allocation objective.
    weighting : str
        Edge weighting, a variant of the registry :data:`pairht.estimators.VARIANTS` that needs
        no ``pi``: exact HT ``1/rho``, clipped ``min(1/rho, w_max)``, Hajek self-normalised,
        ... Only ``"exact"`` is design-unbiased (and required by ``mode="exact"``).
    w_max : float or None
        Clip level for ``weighting="clipped"`` (paper: 10, 20 or 50): positive and finite;
        refused with any other weighting (:func:`pairht.estimators.horvitz_thompson.check_w_max`).
    anchor_pair : bool
        Force a uniformly drawn pair into every draw (mixture design with exact joints), so
        every group observes at least one edge. Bernoulli base design only.
    design_seed : int >= 0 or None
        Seed of the trainer-owned design generator (``None``: derived from ``seed``). Its state
        is saved with checkpoints.
    head_width, head_feature_window, head_lr, head_replay, head_temperature_fraction
        Prefix heads: MLP width (256), number of last prefix hidden states averaged (16),
        Adam learning rate, replay window in labels (2048), fraction of the newest replay
        labels the temperature is fitted on (0.25).
    head_steps_per_update, head_batch_size
        Adam steps on replay minibatches after each policy update, and their size.
    lagged_heads : bool
        Allocate with the heads of the preceding checkpoint (lagged-predictor variant).
    head_kind : {"linear", "mlp"}
        Prefix heads: ``"linear"`` (default), a cross-validated L2 logistic / ridge probe with
        a fitted temperature, which beats the constant predictor on held-out data at a few
        hundred labels (docs/real_model.md); ``"mlp"``, the paper's 256-wide MLP heads (which
        did not, at tau 32). The ``head_width``, ``head_lr``, ``head_steps_per_update`` and
        ``head_batch_size`` fields apply to ``"mlp"`` only.
    drop_unselected_rows : bool or None
        Remove the unselected rows (and, with ``allocator="dppo"``, the pruned ones) from the
        batch of the policy update instead of masking them, trimming completion columns to the
        longest kept row, and rescale the loss so that it is exactly the masked loss
        (:mod:`pairht.torch.row_drop`: factor kept/total rows for the row-mean losses ``grpo``,
        ``sapo``, ``dr_grpo``, ``luspo``; 1 for the token-normalised ``bnpo``, ``dapo``,
        ``cispo``, ``vespo``). Exact only with ``steps_per_generation == 1`` and, for a
        row-mean loss, no entropy bonus; ``True`` otherwise raises ``ValueError``. ``None``
        (default): ``True`` exactly when those rules hold (so with the defaults, ``dr_grpo`` and
        ``gradient_accumulation_steps=1``), else ``False`` (masking, as before).
    head_refit_every, head_refit_growth : int, float
        Linear heads: refit the probe when it is ``head_refit_every`` updates old (default 4)
        or when the labels added since its fit reach ``head_refit_growth`` times the labels it
        was fitted on (default 0.25), whichever comes first; labels are still added and scored
        in between. ``head_refit_every=1`` refits on every update. See
        :class:`pairht.torch.heads.HeadTrainer` (``refit_every``, ``refit_growth``).
    head_confidence : bool
        Feed the heads the prefix's confidence features beside the hidden states: the minimum
        and the mean log-probability of the sampled prefix tokens
        (:func:`pairht.rollout.features.confidence_features`), kept whole by the linear probe.
        Default ``True``; a backend that cannot report them then raises.
    shrink_to_skill : bool
        Shrink the heads' predictions toward their group mean by a factor the heads measure
        held out (``shrink_by``, clipped to [0, 1]; 0 until labels exist): uninformative heads
        then reduce PAIR to the uniform design among unfinished candidates
        (``pairht.step.shrink_predictions``). Default True.
    width : {"prefixes", "whole", "subset"}
        How a group is generated (:data:`WIDTHS`). ``"prefixes"`` (default): PAIR, a prefix for
        every candidate, then the allocation continues a subset. ``"whole"``: small-group GRPO
        inside the trainer, no prefix phase: a uniform subset of ``whole_group_size`` of the
        ``num_generations`` candidates (sizes ``floor`` and ``ceil`` mixed for a non-integer
        size, pairht.step's ``"srswor"`` rule) is generated to the end and the rest not at all;
        the pair-HT estimator on that design is the pair average over the completed ones (exact
        mode stays exact), and the heads get no labels. For where the prefixes do not pay:
        :class:`pairht.trl.audit_mode.AuditCallback` (``switch_width=True``) switches between
        the two from its exact audit of the live policy (docs/trl.md, "Audit mode").
        ``"subset"``: a narrower prefix width. A uniform subset ``S`` of
        ``prefix_group_size = w`` candidates per group gets prefixes (the rest are not
        generated at all), and ``allocator`` runs among them at the suffix budget ratio ``b_w``
        that spends full-width PAIR's tokens at ``budget_ratio`` (pooled over the batch,
        ``b_w = (P_S + b C_S - s P_S) / (s C_S)`` with ``s = w / G``, ``P_S`` the subsets'
        prefix tokens and ``C_S`` their unfinished candidates' predicted suffix tokens; capped
        at 1); the estimate is the rule's estimate of the pair average over ``S``, unbiased
        for the full group's (:mod:`pairht.step.subset`; the logged ``pi``/``joint`` are the
        two-phase ``pi*``/``rho*``). ``allocator`` must be a prefix rule with ``"whole"`` and
        ``"subset"``.
    whole_group_size : float, optional
        ``G'`` for ``width="whole"``, in ``[2, num_generations]`` (required there).
    prefix_group_size : int, optional
        ``w`` for ``width="subset"``, an int in ``[2, num_generations]`` (required there; the
        audit's ``pair_dr_narrow`` width is :func:`pairht.audit.two_stage.narrow_width`).
    shrink_by : {"slope", "skill"}
        The factor (:data:`pairht.torch.heads.SHRINK_MEASURES`). ``"slope"`` (default): the
        prequential reliability slope of the within-group deviations,
        ``sum w (p_hat - p_bar)(r - p_bar) / sum w (p_hat - p_bar)^2`` (and the same for the
        cost), the least-squares shrinkage: 1 for a calibrated head, 0 for an uninformative
        one. ``"skill"``: the Brier skill (R^2 of log cost), which shrinks even a perfectly
        calibrated head (an oracle's Brier skill is the share of the reward variance its
        probabilities explain, 0.36 on the synthetic audit population) and so throws away
        most of what sharp heads know (docs/trl.md, "Prefix heads").
    reward_failure : {"raise", "zero"}
        What an exception from a synchronous reward function does (:data:`REWARD_FAILURES`).
        ``"raise"`` (default, as TRL): training stops with a ``RewardFunctionError`` naming
        the function, the prompt and the completion, chained to the exception (a batch that
        raised is scored again one completion at a time, up to the first that raises, to find
        it). ``"zero"``: the completions that raise score 0 and are counted in
        ``pair/reward_failures``; the first traceback per function is logged and a
        ``RewardFailureWarning`` is issued on every step with a failure. Opt in only where 0
        is the right reward for a crash (e.g. a parser that fails exactly on malformed
        answers): a 0 for a broken verifier is a wrong reward and biases the gradient.
        Reward functions that are ``nn.Module`` s or coroutines are called by TRL as they are
        (their exceptions propagate).
    """

    # ------------------------------------------------------------------ TRL defaults changed
    # None = resolved from `mode` in __post_init__ (exact: 1 epoch, no standardisation).
    num_iterations: int | None = field(  # type: ignore[assignment]
        default=None,
        metadata={"help": "PPO epochs per generation batch; None: 1 (exact) or 2 (practical)."},
    )
    scale_rewards: str | None = field(  # type: ignore[assignment]
        default=None,
        metadata={"help": "'none'|'group'|'batch'; None: 'none' (exact), 'group' (practical)."},
    )
    loss_type: str | None = field(  # type: ignore[assignment]
        default=None,
        metadata={"help": "TRL loss type; None: 'dr_grpo' (constant, mask-independent normaliser)"},
    )
    vllm_importance_sampling_correction: bool | None = field(  # type: ignore[assignment]
        default=None,
        metadata={"help": "TRL's vLLM importance correction; None: False (PAIR's vLLM backend "
                          "returns no sampling log-probabilities). True is refused."},
    )

    # ------------------------------------------------------------------ PAIR
    mode: str = field(default="exact", metadata={"help": "'exact' or 'practical'."})
    tau: int | None = field(
        default=None,
        metadata={"help": "Prefix checkpoint (tokens); None: min(256, max_completion_length//4)"},
    )
    snap_window: int | None = field(
        default=None,
        metadata={"help": "Forward snap window (tokens); None: min(32, max_completion_length//8)"},
    )
    budget_ratio: float = field(
        default=0.5, metadata={"help": "Expected suffix budget / full-group predicted cost."}
    )
    pi_min: float = field(default=0.08, metadata={"help": "Continuation probability floor."})
    allocator: str = field(
        default="pair",
        metadata={"help": "Allocation rule, a name of pairht.step.ALLOCATORS ('pair': PAIR)."},
    )
    design: str | None = field(
        default=None,
        metadata={"help": "Continuation design; None: the allocator's own ('pair': "
                          "conditional_poisson, fixed size; bernoulli with anchor_pair)."},
    )
    design_size: int | None = field(
        default=None, metadata={"help": "Sample size of fixed-size designs."}
    )
    edge_proxy: str = field(default="disagreement", metadata={"help": "Edge proxy a_ij."})
    covariance_term: bool = field(default=True, metadata={"help": "Use the b_i term."})
    weighting: str = field(default="exact", metadata={"help": "'exact' | 'clipped' | 'hajek'."})
    w_max: float | None = field(default=None, metadata={"help": "Clip level (clipped)."})
    anchor_pair: bool = field(default=False, metadata={"help": "Force a random anchor pair."})
    design_seed: int | None = field(default=None, metadata={"help": "Design RNG seed."})
    head_kind: str = field(
        default="linear",
        metadata={"help": "Prefix heads: 'linear' (cross-validated probe) or 'mlp' (paper)."},
    )
    head_refit_every: int = field(
        default=4, metadata={"help": "Linear heads: refit the probe at least every k updates."}
    )
    head_refit_growth: float = field(
        default=0.25,
        metadata={"help": "Linear heads: also refit once the unseen labels reach this share."},
    )
    head_confidence: bool = field(
        default=True,
        metadata={"help": "Heads also read the prefix tokens' min and mean log-probability."},
    )
    head_width: int = field(default=256, metadata={"help": "Prefix head MLP width."})
    head_feature_window: int = field(default=16, metadata={"help": "Hidden states averaged."})
    head_lr: float = field(default=1e-3, metadata={"help": "Prefix head learning rate."})
    head_replay: int = field(default=2048, metadata={"help": "Replay window (labels)."})
    head_temperature_fraction: float = field(
        default=0.25, metadata={"help": "Newest replay fraction for the temperature fit."}
    )
    lagged_heads: bool = field(default=False, metadata={"help": "Lagged-predictor variant."})
    shrink_to_skill: bool = field(
        default=True,
        metadata={"help": "Shrink predictions toward the group mean by a held-out measure."},
    )
    shrink_by: str = field(
        default="slope",
        metadata={"help": "The shrinkage factor: 'slope' (reliability slope) or 'skill'."},
    )
    head_steps_per_update: int = field(
        default=32, metadata={"help": "Head Adam steps after each policy update."}
    )
    head_batch_size: int = field(default=256, metadata={"help": "Head minibatch size."})
    drop_unselected_rows: bool | None = field(
        default=None,
        metadata={"help": "Drop unselected rows from the update batch (loss unchanged); None: "
                          "True when exact (steps_per_generation == 1), else False."},
    )
    width: str | None = field(
        default=None,
        metadata={"help": "'auto' (PAIR's default: decides among the others from the run's "
                          "audits), 'prefixes' (PAIR), 'whole' (small-group GRPO: "
                          "whole_group_size whole completions, no prefixes) or 'subset' (PAIR "
                          "on a uniform subset of prefix_group_size candidates); None: 'auto' "
                          "unless an allocator, design or weighting other than the defaults "
                          "is set, then 'prefixes'."},
    )
    width_audit_every: int = field(
        default=16,
        metadata={"help": "width='auto': audit every k optimizer steps (and before step 1)."},
    )
    width_audit_prompts: int = field(
        default=8,
        metadata={"help": "width='auto': prompts per audit, each with every candidate "
                          "generated to the end (tokens counted in pair/audit_tokens)."},
    )
    width_history: int = field(
        default=4, metadata={"help": "width='auto': audits pooled by the choice (newest)."}
    )
    whole_group_size: float | None = field(
        default=None,
        metadata={"help": "Whole completions per group in width='whole' (G'; a non-integer "
                          "mixes its neighbours)."},
    )
    prefix_group_size: int | None = field(
        default=None,
        metadata={"help": "Candidates per group given a prefix in width='subset' (w, an int "
                          "in [2, num_generations])."},
    )
    reward_failure: str = field(
        default="raise",
        metadata={"help": "A reward function's exception: 'raise' (stop, naming the function "
                          "and the prompt) or 'zero' (score 0, count in pair/reward_failures, "
                          "warn every step it happens)."},
    )

    def __post_init__(self) -> None:
        # Rules first: TRL's own __post_init__ would read a bad value (e.g. `"0.5" < 1`) and
        # fail with a message naming no field.
        given = {"scale_rewards": self.scale_rewards}
        # PAIR's default where it applies: a user who named a rule, design or weighting gets
        # that rule with prefixes for every candidate (before the design is resolved)
        plain = (self.allocator == "pair" and self.design is None and self.weighting == "exact"
                 and not self.anchor_pair)
        if self.width is None:
            self.width = "auto" if plain else "prefixes"
        elif self.width == "auto" and not plain:
            raise ValueError(
                f"width='auto' runs PAIR's default options (small-group GRPO or the difference "
                f"estimator, with exact weights and its own designs); it needs allocator='pair' "
                f"(the field's default), design=None, weighting='exact' and anchor_pair=False; "
                f"got allocator={self.allocator!r}, design={self.design!r}, "
                f"weighting={self.weighting!r}, anchor_pair={self.anchor_pair!r}. Set "
                f"width='prefixes' to run that rule"
            )
        for name, rule in PAIR_FIELD_RULES.items():
            if not (name in ("tau", "snap_window", "design") and getattr(self, name) is None):
                setattr(self, name, rule(name, getattr(self, name)))
        # annotated ``type``: mypy does not count a dataclass's class object as Hashable
        # (what functools.cache asks of its argument), though every class object is
        config_cls: type = type(self)
        for name in _bool_fields(config_cls):
            _flag(name, getattr(self, name))
        changed = self._resolve_defaults()
        super().__post_init__()
        self._check_pair_fields()
        if self.mode == "exact":
            self._check_exact(given)
        if changed:
            announce_changed_defaults(self.mode, {name: getattr(self, name) for name in changed})

    def _resolve_defaults(self) -> list[str]:
        """Fill the ``None`` defaults; return the TRL fields now differing from TRL's default."""
        changed = []
        for c in CHANGED_DEFAULTS:
            if getattr(self, c.field) is None:
                value = c.exact if self.mode == "exact" else c.practical
                setattr(self, c.field, value)
                if value != trl_default(c.field) and (self.use_vllm or not c.vllm_only):
                    changed.append(c.field)
        if self.design is None:
            # PAIR's default design (issue 14, docs/step.md) for PAIR's program, else None:
            # the allocator's own design (pairht.step).
            self.design = rule_design(self.allocator, self.anchor_pair)
        length = self.max_completion_length
        if self.tau is None:
            self.tau = TAU_DEFAULT if length is None else max(1, min(TAU_DEFAULT, length // 4))
        if self.snap_window is None:
            self.snap_window = (
                SNAP_WINDOW_DEFAULT if length is None else min(SNAP_WINDOW_DEFAULT, length // 8)
            )
        return changed

    # ------------------------------------------------------------------ validation
    def _check_pair_fields(self) -> None:
        length = self.max_completion_length
        # _resolve_defaults (run before this) replaces a None tau / snap_window by its default
        assert self.tau is not None and self.snap_window is not None
        if length is not None and self.tau + self.snap_window >= length:
            raise ValueError(
                f"tau + snap_window must be smaller than max_completion_length (the longest "
                f"snapped prefix must leave room for a suffix); got tau={self.tau}, snap_window="
                f"{self.snap_window}, max_completion_length={length}. Leave tau and "
                f"snap_window at None (min(256, L // 4) and min(32, L // 8)) or lower them"
            )
        check_budget_ratio(self.budget_ratio, self.pi_min)
        if self.edge_proxy not in trainable_edge_proxies():
            raise ValueError(
                f"edge_proxy={self.edge_proxy!r} needs a score-norm or pair-energy predictor, "
                f"which the trainer does not train yet; use one of {trainable_edge_proxies()}"
            )
        # the core's rule and wording: positive finite w_max for clipping variants only
        self.w_max = check_w_max(resolve_variant(self.weighting), self.w_max)
        if rule_estimator(self.allocator) == "difference" and (
                self.weighting != "exact" or self.design not in (None, "bernoulli")):
            raise ValueError(
                f"allocator={self.allocator!r} estimates with the difference estimator "
                f"(pairht.estimators.difference) on its own Bernoulli design: it needs "
                f"weighting='exact' and design=None or 'bernoulli'; got weighting="
                f"{self.weighting!r}, design={self.design!r}")
        if self.allocator not in program_allocators() and self.design_size is not None:
            raise ValueError(
                f"design_size applies to allocator='pair' only, or another rule that solves "
                f"PAIR's program ({', '.join(program_allocators())}); allocator "
                f"{self.allocator!r} sets its own sizes; got design_size={self.design_size!r}"
            )
        fixed = self.design in fixed_size_designs()
        g = self.num_generations
        # GRPOConfig.__post_init__ (run before this) compares it with 2: an int by now
        assert g is not None
        # largest size affordable under every cost prediction (see design_size above); the
        # relative 1e-12 absorbs the rounding of budget_ratio * G at exact integers
        affordable = math.floor(g * self.budget_ratio * (1 + 1e-12))
        if self.design_size is not None:
            n = self.design_size
            if not fixed:
                raise ValueError(
                    f"design_size applies only to fixed-size designs {fixed_size_designs()}; "
                    f"got design_size={n!r} with design={self.design!r}"
                )
            if not 2 <= n <= g:
                raise ValueError(
                    f"design_size must lie in [2, num_generations={g}] (a pair needs two "
                    f"completed candidates); got design_size={n!r}"
                )
            if g * self.pi_min > n * (1 + 1e-12):
                raise ValueError(
                    f"design_size={n} is below num_generations * pi_min = "
                    f"{g * self.pi_min:g}; no pi >= pi_min sums to it"
                )
            if n > affordable:
                raise ValueError(
                    f"design_size={n} is not affordable for every cost prediction: with equal "
                    f"predicted costs (an untrained cost head) any pi with sum(pi) = n costs "
                    f"n / num_generations of the full-group suffix, so design_size must be <= "
                    f"floor(num_generations * budget_ratio) = floor({g} * "
                    f"{self.budget_ratio:g}) = {affordable}. Lower design_size, raise "
                    f"budget_ratio, or use design_size=None (size 'auto')"
                )
        # design_size=None with a fixed-size design is size "auto": per group, the two sizes
        # neighbouring budget_ratio x (unfinished candidates), mixed; a group that affords no
        # size of two is drawn Bernoulli (pairht.step), so every budget is valid.
        self.width, self.whole_group_size, self.prefix_group_size = check_width(
            self.width, self.whole_group_size, g, self.allocator, self.prefix_group_size)
        if self.anchor_pair and fixed:
            raise ValueError(
                f"anchor_pair=True is defined for the Bernoulli base design only; a fixed-size "
                f"design already guarantees design_size >= 2 endpoints. Got anchor_pair=True "
                f"with design={self.design!r}"
            )
        entropy_bonus = self.entropy_coef != 0.0 or bool(self.use_adaptive_entropy)
        # GRPOConfig.__post_init__ (run before this) resolves steps_per_generation to an int
        assert self.steps_per_generation is not None and self.loss_type is not None
        if self.drop_unselected_rows is None:
            self.drop_unselected_rows = (
                drop_rows_reason(self.loss_type, self.steps_per_generation, entropy_bonus) is None
            )
        elif self.drop_unselected_rows:
            check_drop_rows(self.loss_type, self.steps_per_generation, entropy_bonus)
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"PAIR combines reward functions as a weighted sum before the pair estimator; "
                f"multi_objective_aggregation must be 'sum_then_normalize', got "
                f"{self.multi_objective_aggregation!r}"
            )
        if self.use_transformers_continuous_batching:
            raise ValueError(
                "PairGRPOTrainer generates in two phases (prefix, then resume the selected "
                "candidates); use_transformers_continuous_batching=True is not supported. Use the "
                "default transformers backend or use_vllm=True (pairht.vllm)"
            )
        if self.use_vllm:
            unsupported: list[tuple[str, object, object]] = [
                ("vllm_enable_sleep_mode", self.vllm_enable_sleep_mode, False),
                ("vllm_structured_outputs_regex", self.vllm_structured_outputs_regex, None),
            ]
            if self.vllm_mode == "colocate":
                unsupported.append(
                    ("vllm_tensor_parallel_size", self.vllm_tensor_parallel_size, 1)
                )
            bad = [(k, v, want) for k, v, want in unsupported if v != want]
            if bad:
                raise ValueError(
                    "the two-phase vLLM backend (pairht.vllm) does not support "
                    + ", ".join(f"{k}={v!r} (use {want!r})" for k, v, want in bad)
                )
        if self.use_vllm and self.vllm_importance_sampling_correction:
            # The two-phase vLLM backend returns no sampling logprobs, and TRL's truncated
            # importance correction would reweight the pair-HT update away from the estimator.
            raise ValueError(
                "use_vllm=True requires vllm_importance_sampling_correction=False: PAIR's vLLM "
                "backend (pairht.vllm) returns no sampling logprobs and the correction would "
                "change the pair-HT estimator"
            )

    def _check_exact(self, given: dict[str, Any]) -> None:
        """``given``: values as the user passed them (TRL rewrites ``scale_rewards=True``)."""
        rules = [
            ("num_iterations", self.num_iterations == 1, "1 (one epoch: PPO ratios are 1)"),
            ("scale_rewards", self.scale_rewards == "none", "'none' (no standardisation)"),
            ("loss_type", self.loss_type == "dr_grpo", "'dr_grpo' (constant loss normaliser)"),
            ("weighting", self.weighting == "exact", "'exact' (unclipped 1/rho)"),
            ("beta", self.beta == 0.0, "0 (no KL term)"),
            ("entropy_coef", self.entropy_coef == 0.0, "0 (no entropy bonus)"),
            ("use_adaptive_entropy", not self.use_adaptive_entropy, "False"),
            ("top_entropy_quantile", self.top_entropy_quantile == 1.0, "1.0 (every token)"),
            ("mask_truncated_completions", not self.mask_truncated_completions, "False"),
            ("off_policy_mask_threshold", self.off_policy_mask_threshold is None, "None"),
            # TRL's two-sided clip clamps the ratio at delta even at ratio 1 when delta < 1
            ("delta", self.delta is None, "None (no two-sided ratio clamp)"),
            # the scores TRL differentiates are those of the temperature-only policy: any
            # other sampling transform makes the samples off-policy for them
            ("top_p", self.top_p == 1.0, "1.0 (sample from the policy itself)"),
            ("top_k", self.top_k in (None, 0), "0 or None"),
            ("min_p", self.min_p in (None, 0.0), "None"),
            ("repetition_penalty", self.repetition_penalty == 1.0, "1.0"),
            (
                "steps_per_generation",
                self.steps_per_generation == self.gradient_accumulation_steps,
                f"gradient_accumulation_steps={self.gradient_accumulation_steps} (one "
                f"optimizer step per generation batch, on-policy)",
            ),
        ]
        bad = [(name, want) for name, ok, want in rules if not ok]
        if bad:
            got = ", ".join(
                f"{name}={given.get(name, getattr(self, name))!r}" for name, _ in bad
            )
            need = "; ".join(f"{name} must be {want}" for name, want in bad)
            raise ValueError(
                f"mode='exact' makes the update equal to the pair-HT estimator, which needs: "
                f"{need}. Got {got}. Use mode='practical' for the clipped surrogate."
            )
