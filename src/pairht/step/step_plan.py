r"""One PAIR step's plan at every width, over the ``G`` candidates, before any reward exists.

A trainer makes two calls of :mod:`pairht.step` per step and nothing else of PAIR::

    plan = plan_step(p_hat, c_hat, finished, budget_ratio=0.5, width="prefixes", rng=rng)
    ... continue plan.selected, score them -> rewards (B, G), NaN where not selected ...
    est  = estimate(plan, rewards)            # advantages (B, G), loss mask, logged quantities

The width says which candidates get a prefix (and so a prediction) before the plan:

``"prefixes"``
    every candidate (PAIR): the allocator plans on the ``(B, G)`` predictions
    (:func:`~pairht.step.plan_continuations`).
``"subset"``
    a uniform ``w``-subset ``S`` of each group (:func:`~pairht.step.draw_subsets`, drawn
    before phase 1); the allocator plans on the ``(B, w)`` block at the budget ratio that
    matches full width (:func:`~pairht.step.subset_budget_ratio`), and the plan holds the
    two-phase design ``pi* = (w/G) pi|S``, ``rho* = w(w-1)/(G(G-1)) rho|S``
    (:func:`~pairht.step.two_phase_design`), unbiased for the full-group target.
``"whole"``
    none (small-group GRPO): a uniform subset of ``whole_group_size`` candidates per group
    (sizes ``floor`` and ``ceil`` mixed; the ``"srswor"`` rule on equal predictions) is
    generated to the end, with its exact ``pi`` and ``rho``.

:class:`StepPlan` serialises to per-row arrays (:meth:`StepPlan.as_rows`,
:meth:`StepPlan.from_rows`) for frameworks that carry one record per sequence (a verl
``DataProto``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import RNGLike, as_generator
from pairht.allocation.inputs import StepInputs
from pairht.step.inputs import score_norm_proxy
from pairht.step.plan import ContinuationPlan, plan_continuations
from pairht.step.subset import (
    check_prefix_width,
    put,
    subset_budget_ratio,
    take,
    two_phase_design,
    two_phase_pi,
)

#: The widths of a step: which candidates get a prefix before the plan (module docstring).
WIDTHS = ("prefixes", "subset", "whole")

#: Per-row fields of :meth:`StepPlan.as_rows` (each ``(B * G, ...)``).
ROW_FIELDS = ("selected", "pi", "pi_alloc", "joint", "p_hat", "c_hat", "finished",
              "prefix_tokens", "budget", "in_subset", "inner_joint", "estimator", "width")


@dataclass(frozen=True)
class StepPlan:
    r"""The logged design of one batch over its ``G`` candidates, with its estimator's name.

    Every array exists before any reward does. At width ``"subset"``, ``pi`` and ``joint``
    are the two-phase ``pi*``, ``rho*`` (0 off the subset) and the rule's own design among
    the subset's candidates is ``inner_joint`` (``rho_ij|S``, ``pi_i|S`` on its diagonal).

    Attributes
    ----------
    pi : (B, G) ndarray
        Exact first-order inclusion probabilities (finished prefixes: 1).
    selected : (B, G) ndarray of bool
        ``J``: the candidates to continue (or, at width ``"whole"``, to generate).
    joint : (B, G, G) ndarray
        Exact ``rho_ij = P(J_i = J_j = 1)``, diagonal ``pi``.
    pi_alloc : (B, G) ndarray
        The allocator's ``pi`` (two-phase at width ``"subset"``).
    estimator : str
        The name of :data:`~pairht.step.ESTIMATORS` that :func:`~pairht.step.estimate` runs.
    width : str
        One of :data:`WIDTHS`.
    p_hat, c_hat : (B, G) ndarray
        The predictions the plan was given, before shrinkage (placeholders where none was
        made: 0 off the subset; ``p_hat = 0.5``, ``c_hat = 0`` at width ``"whole"``).
    finished : (B, G) ndarray of bool
        Prefixes that already ended (complete sequences, ``pi = 1``).
    prefix_tokens : (B, G) ndarray of int
        Tokens generated in phase 1 (0 where no prefix was generated).
    budget : (B,) ndarray
        The suffix-token budget each group was planned at.
    subset : (B, w) ndarray of int or None
        Width ``"subset"``: the candidates given prefixes, sorted.
    inner_joint : (B, w, w) ndarray or None
        Width ``"subset"``: the rule's design among the subset's candidates.
    metrics : dict of str to float
        The plan's logged quantities (:func:`~pairht.step.plan_metrics`).
    continuation : ContinuationPlan or None
        The allocator's plan (on the ``(B, w)`` block at width ``"subset"``): its ``status``,
        solver ``info``, ``pi_alloc`` (a warm start for the next step). ``None`` after
        :meth:`from_rows`.
    """

    pi: np.ndarray
    selected: np.ndarray
    joint: np.ndarray
    pi_alloc: np.ndarray
    estimator: str
    width: str
    p_hat: np.ndarray
    c_hat: np.ndarray
    finished: np.ndarray
    prefix_tokens: np.ndarray
    budget: np.ndarray
    subset: np.ndarray | None = None
    inner_joint: np.ndarray | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    continuation: ContinuationPlan | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(B, G)``."""
        return self.pi.shape  # type: ignore[return-value]

    def replace(self, **changes: Any) -> StepPlan:
        """A copy with ``changes`` (e.g. the main process's ``pi``, ``selected``, ``joint``
        broadcast to every process)."""
        return dataclasses.replace(self, **changes)

    def solver_info(self, key: str, default: float | bool) -> np.ndarray:
        """The allocator's per-group ``info[key]`` (``kkt_residual``, ``fallback_used``,
        ``unspent_budget``, ...), ``(B,)``; ``default`` where it reports none."""
        info = self.continuation.info if self.continuation is not None else {}
        dtype = bool if isinstance(default, bool) else np.float64
        return np.asarray(info.get(key, np.full(self.shape[0], default)), dtype=dtype)

    def as_rows(self) -> dict[str, np.ndarray]:
        """The plan as per-row arrays, each with a leading ``B * G`` axis (row ``b * G + i``
        is candidate ``i`` of group ``b``): :data:`ROW_FIELDS`. ``joint`` and ``inner_joint``
        hold the row's line of the group's ``(G, G)`` matrix (``inner_joint`` lifted to the
        ``G`` candidates, 0 off the subset); ``in_subset`` marks the subset's candidates (all
        at the other widths); ``estimator``, ``width`` are strings repeated per row.

        Examples
        --------
        >>> from pairht.step import plan_step
        >>> plan = plan_step([[0.2, 0.8, 0.5]], [[10.0, 20.0, 30.0]], [[False] * 3],
        ...                  budget_ratio=0.5, rng=0)
        >>> rows = plan.as_rows()
        >>> rows["joint"].shape, bool(np.all(StepPlan.from_rows(rows, 3).joint == plan.joint))
        ((3, 3), True)
        """
        B, G = self.shape
        n = B * G
        inner = np.zeros((B, G, G))
        member = np.ones((B, G), dtype=bool)
        if self.subset is not None:
            assert self.inner_joint is not None  # recorded with the subset
            S = self.subset
            rows = np.arange(B)[:, None, None]
            inner[rows, S[:, :, None], S[:, None, :]] = self.inner_joint
            member = put(np.ones(S.shape, dtype=bool), S, G, fill=False)
        return {
            "selected": self.selected.reshape(n).copy(),
            "pi": self.pi.reshape(n).copy(),
            "pi_alloc": self.pi_alloc.reshape(n).copy(),
            "joint": self.joint.reshape(n, G).copy(),
            "p_hat": self.p_hat.reshape(n).copy(),
            "c_hat": self.c_hat.reshape(n).copy(),
            "finished": self.finished.reshape(n).copy(),
            "prefix_tokens": self.prefix_tokens.reshape(n).copy(),
            "budget": np.repeat(self.budget, G),
            "in_subset": member.reshape(n),
            "inner_joint": inner.reshape(n, G),
            "estimator": np.full(n, self.estimator, dtype=object),
            "width": np.full(n, self.width, dtype=object),
        }

    @classmethod
    def from_rows(cls, rows: Mapping[str, np.ndarray], group_size: int) -> StepPlan:
        """Inverse of :meth:`as_rows` (``metrics`` empty, ``continuation`` ``None``).

        Raises ``ValueError`` naming a missing field, a row count that is not a multiple of
        ``group_size``, or a group whose rows disagree on ``estimator`` or ``width``.
        """
        missing = [k for k in ROW_FIELDS if k not in rows]
        if missing:
            raise ValueError(f"rows must hold every field of ROW_FIELDS; missing {missing}")
        G = int(group_size)
        n = len(rows["pi"])
        if G < 2 or n % G:
            raise ValueError(f"group_size must be >= 2 and divide the {n} rows; got {G}")
        B = n // G
        names = {str(v) for v in np.asarray(rows["estimator"])}
        widths = {str(v) for v in np.asarray(rows["width"])}
        if len(names) != 1 or len(widths) != 1:
            raise ValueError(f"rows must share one estimator and one width; got estimators "
                             f"{sorted(names)} and widths {sorted(widths)}")
        width = widths.pop()
        subset = inner_joint = None
        if width == "subset":
            member = np.asarray(rows["in_subset"], dtype=bool).reshape(B, G)
            w = int(member[0].sum()) if B else 0
            if np.any(member.sum(axis=1) != w):
                raise ValueError("in_subset must mark the same number of candidates per group")
            subset = np.nonzero(member)[1].reshape(B, w)
            inner = np.asarray(rows["inner_joint"], np.float64).reshape(B, G, G)
            rb = np.arange(B)[:, None, None]
            inner_joint = inner[rb, subset[:, :, None], subset[:, None, :]]
        budget = np.asarray(rows["budget"], np.float64).reshape(B, G)[:, 0].copy()
        return cls(
            pi=np.asarray(rows["pi"], np.float64).reshape(B, G),
            selected=np.asarray(rows["selected"], dtype=bool).reshape(B, G),
            joint=np.asarray(rows["joint"], np.float64).reshape(B, G, G),
            pi_alloc=np.asarray(rows["pi_alloc"], np.float64).reshape(B, G),
            estimator=names.pop(), width=width,
            p_hat=np.asarray(rows["p_hat"], np.float64).reshape(B, G),
            c_hat=np.asarray(rows["c_hat"], np.float64).reshape(B, G),
            finished=np.asarray(rows["finished"], dtype=bool).reshape(B, G),
            prefix_tokens=np.asarray(rows["prefix_tokens"]).reshape(B, G),
            budget=budget, subset=subset, inner_joint=inner_joint,
        )


def prefix_candidates(width: str, n_groups: int, group_size: int, *,
                      prefix_group_size: int | None = None,
                      rng: RNGLike = None) -> np.ndarray:
    """The candidates of each group given a prefix before the plan, ``(B, w)`` sorted.

    ``"prefixes"``: all ``G`` (``w = G``); ``"subset"``: a uniform ``prefix_group_size``-subset
    of each group (:func:`~pairht.step.draw_subsets`, the only width that draws from ``rng``);
    ``"whole"``: none (``w = 0``, no prefix phase). Pass the result to :func:`plan_step` as
    ``subset``.

    Examples
    --------
    >>> prefix_candidates("prefixes", 1, 3).tolist(), prefix_candidates("whole", 1, 3).shape
    ([[0, 1, 2]], (1, 0))
    """
    from pairht.step.subset import draw_subsets

    B, G = int(n_groups), int(group_size)
    if width == "subset":
        if prefix_group_size is None:
            raise ValueError("width 'subset' needs prefix_group_size, the candidates per "
                             "group given prefixes")
        return draw_subsets(B, G, prefix_group_size, as_generator(rng))
    if width == "prefixes":
        return np.tile(np.arange(G), (B, 1))
    if width == "whole":
        return np.zeros((B, 0), dtype=np.int64)
    raise ValueError(f"width must be one of {list(WIDTHS)}; got {width!r}")


def plan_step(
    p_hat: ArrayLike | None = None,
    c_hat: ArrayLike | None = None,
    finished: ArrayLike | None = None,
    *,
    budget_ratio: float,
    rng: RNGLike,
    width: str = "prefixes",
    subset: ArrayLike | None = None,
    prefix_tokens: ArrayLike | None = None,
    history: Mapping[str, np.ndarray] | None = None,
    n_groups: int | None = None,
    group_size: int | None = None,
    whole_group_size: float | None = None,
    allocator: str = "pair",
    design: str | None = None,
    estimator: str | None = None,
    pi_min: float = 0.08,
    program_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> StepPlan:
    r"""Plan one step at ``width``: which candidates to continue, with the exact design.

    ``"prefixes"``: :func:`~pairht.step.plan_continuations` on
    ``StepInputs.from_ratio(p_hat, c_hat, finished, budget_ratio)`` (realised accounting:
    ``budget_b = budget_ratio * sum_{i unfinished} c_hat_bi``). ``"subset"``: the same on the
    ``(B, w)`` block of ``subset`` at ratio ``min(1, subset_budget_ratio(sum L, sum_u c,
    budget_ratio, w / G))``, lifted to the two-phase design. ``"whole"``: the ``"srswor"``
    rule at ratio ``whole_group_size / G`` on equal predictions and unit costs (``pi_min``
    lowered to that ratio), no prefix.

    Parameters
    ----------
    p_hat, c_hat : (B, G) array_like
        The heads' predictions (success, remaining tokens) over every candidate; at width
        ``"subset"`` only the subset's entries are read. Not used at width ``"whole"``.
    finished : (B, G) array_like of bool
        Prefixes that already ended.
    budget_ratio : float
        The suffix budget as a fraction of the unfinished candidates' predicted cost.
    rng : int, numpy.random.Generator or None
        The only source of randomness (the draw; the subset is drawn by the caller before
        phase 1 with :func:`~pairht.step.draw_subsets`).
    width : {"prefixes", "subset", "whole"}
    subset : (B, w) array_like of int, optional
        The candidates given prefixes (:func:`prefix_candidates`): read at width
        ``"subset"``; at the other widths it must be every candidate (``"prefixes"``) or
        none (``"whole"``).
    prefix_tokens : (B, G) array_like, optional
        Phase-1 tokens, for the accounting (and the score-norm proxy).
    history : mapping, optional
        Per-prompt history of the prompt-level allocators (:class:`~pairht.step.StepInputs`).
    n_groups, group_size : int, optional
        ``B`` and ``G`` at width ``"whole"`` (no predictions to read them from).
    whole_group_size : float, optional
        Width ``"whole"``: expected completions per group, in ``[2, G]``.
    allocator, design, pi_min
        As for :func:`~pairht.step.plan_continuations`.
    estimator : str, optional
        A name of :data:`~pairht.step.ESTIMATORS`; ``None``: the allocator's own
        (:func:`~pairht.step.default_estimator`).
    program_options : mapping, optional
        ``size``, ``proxy``, ``covariance_term``, ``warm_start``: passed only to the rules of
        PAIR's program (:func:`~pairht.step.program_allocators`), which alone take them.
    **options
        Passed to :func:`~pairht.step.plan_continuations` (``anchor_pair``,
        ``skill_success``, ``skill_cost``, ...). A rule that reads the score-norm proxy
        gets ``score_norm = sqrt(L + c_hat)`` (:func:`~pairht.step.score_norm_proxy`).

    Returns
    -------
    StepPlan

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.step import plan_step, draw_subsets
    >>> rng = np.random.default_rng(0)
    >>> p, c, f = np.full((2, 4), 0.5), np.full((2, 4), 50.0), np.zeros((2, 4), bool)
    >>> S = draw_subsets(2, 4, 2, rng)
    >>> plan = plan_step(p, c, f, budget_ratio=1.0, width="subset", subset=S, rng=rng)
    >>> plan.pi.sum(axis=1).tolist()          # w pi|S / G on the subset: 2 * 1 / 4 each
    [1.0, 1.0]
    >>> whole = plan_step(budget_ratio=1.0, width="whole", n_groups=1, group_size=4,
    ...                   whole_group_size=2, rng=rng)
    >>> int(whole.selected.sum()), whole.pi.tolist()
    (2, [[0.5, 0.5, 0.5, 0.5]])
    """
    from pairht.step.allocators import program_allocators
    from pairht.step.estimators import default_estimator

    if width not in WIDTHS:
        raise ValueError(f"width must be one of {list(WIDTHS)}; got {width!r}")
    gen = as_generator(rng)
    name = default_estimator(allocator) if estimator is None else _check_estimator(estimator)
    if width != "subset" and subset is not None:
        S0 = np.asarray(subset)
        G0 = S0.shape[1] if width == "prefixes" else 0
        if S0.ndim != 2 or S0.shape[1] != G0 or (G0 and np.any(S0 != np.arange(G0))):
            raise ValueError(f"subset at width {width!r} must be prefix_candidates's: every "
                             f"candidate ('prefixes') or none ('whole'); got shape {S0.shape}")
        subset = None
    if width == "whole":
        return _plan_whole(n_groups, group_size, whole_group_size, gen, pi_min, name)
    if p_hat is None or c_hat is None or finished is None:
        raise ValueError(f"width {width!r} plans on predictions: p_hat, c_hat and finished "
                         f"are required")
    p = np.asarray(p_hat, dtype=np.float64)
    c = np.asarray(c_hat, dtype=np.float64)
    done = np.asarray(finished, dtype=bool)
    pre = np.zeros(p.shape, dtype=np.int64) if prefix_tokens is None else \
        np.asarray(prefix_tokens)
    G = p.shape[-1]
    S = None
    ratio = float(budget_ratio)
    if width == "subset":
        if subset is None:
            raise ValueError("width 'subset' needs subset, the (B, w) candidates given "
                             "prefixes (pairht.step.draw_subsets)")
        S = np.asarray(subset, dtype=np.int64)
        check_prefix_width(S.shape[1], G)
        p, c, done, pre = (take(a, S) for a in (p, c, done, pre))
        unfinished_cost = float(np.where(done, 0.0, c).sum())
        # pooled over the batch, from pre-reward quantities only (the draw stays exact);
        # capped at 1: a width at or below G' affords every suffix
        ratio = 1.0 if unfinished_cost <= 0.0 else min(1.0, subset_budget_ratio(
            float(pre.sum()), unfinished_cost, ratio, S.shape[1] / G))
    inputs = StepInputs.from_ratio(p, c, done, budget_ratio=ratio, prefix_tokens=pre,
                                   history=history)
    extra = dict(options)
    if allocator in program_allocators():
        extra.update(program_options or {})
        warm = extra.get("warm_start")
        if warm is not None and np.shape(warm) != inputs.shape:
            extra["warm_start"] = None  # a warm start of another batch shape: start cold
    if _takes_score_norm(allocator):
        # the score-norm prediction the audit's populations carry (m_hat), so the rule the
        # trainer runs is the rule the audit measured
        extra["score_norm"] = score_norm_proxy(pre, inputs.c_hat, done)
    cont = plan_continuations(inputs, allocator=allocator, design=design, rng=gen,
                              pi_min=pi_min, **extra)
    assert cont.pi_alloc is not None  # set by plan_continuations
    pi, joint, selected, pi_alloc = cont.pi, cont.joint, cont.selected, cont.pi_alloc
    p_out, c_out, done_out, pre_out = p, inputs.c_hat, done, pre
    inner = None
    metrics = dict(cont.metrics)
    if S is not None:
        metrics["prefix_group_size"] = float(S.shape[1])
        inner = joint
        pi_alloc = two_phase_pi(pi_alloc, S, G)
        pi, joint = two_phase_design(pi, joint, S, G)
        selected = put(selected, S, G, fill=False)
        p_out, c_out, done_out, pre_out = (put(a, S, G) for a in (p, c_out, done, pre))
    return StepPlan(pi=pi, selected=selected, joint=joint, pi_alloc=pi_alloc, estimator=name,
                    width=width, p_hat=p_out, c_hat=c_out, finished=done_out,
                    prefix_tokens=pre_out, budget=inputs.budget, subset=S, inner_joint=inner,
                    metrics=metrics, continuation=cont)


def _plan_whole(n_groups: int | None, group_size: int | None, size: float | None,
                gen: np.random.Generator, pi_min: float, estimator: str) -> StepPlan:
    if n_groups is None or group_size is None or size is None:
        raise ValueError(f"width 'whole' needs n_groups, group_size and whole_group_size; got "
                         f"{n_groups!r}, {group_size!r}, {size!r}")
    B, G = int(n_groups), int(group_size)
    if not 2.0 <= float(size) <= G:
        raise ValueError(f"whole_group_size must lie in [2, G = {G}]; got {size!r}")
    # Equal predictions, no finished prefix and unit costs: "srswor" at ratio G'/G draws a
    # uniform subset of G' candidates per group (floor and ceil mixed).
    inputs = StepInputs.from_ratio(np.full((B, G), 0.5), np.ones((B, G)),
                                   np.zeros((B, G), dtype=bool), budget_ratio=size / G)
    cont = plan_continuations(inputs, allocator="srswor", rng=gen,
                              pi_min=min(pi_min, size / G))
    zeros = np.zeros((B, G))
    return StepPlan(pi=cont.pi, selected=cont.selected, joint=cont.joint, pi_alloc=cont.pi,
                    estimator=estimator, width="whole", p_hat=inputs.p_hat, c_hat=zeros,
                    finished=np.zeros((B, G), dtype=bool),
                    prefix_tokens=np.zeros((B, G), dtype=np.int64), budget=inputs.budget,
                    metrics={**cont.metrics, "whole_group_size": float(size)},
                    continuation=cont)


def _check_estimator(name: str) -> str:
    from pairht.step.estimators import ESTIMATORS

    return ESTIMATORS.check("estimator", name)


def _takes_score_norm(allocator: str) -> bool:
    from pairht.step.allocators import ALLOCATORS

    return bool(ALLOCATORS.capabilities(allocator).takes_score_norm)


def head_labels(plan: StepPlan, rewards: ArrayLike, costs: ArrayLike) -> dict[str, Any]:
    r"""The prefix heads' labels of a step: the completed candidates that had a prefix.

    At width ``"subset"`` the subsets are the groups the heads see, weighted by the rule's
    own ``pi|S`` (the subset itself is uniform); elsewhere every candidate, weighted by
    ``pi``. Success labels are clipped to ``[0, 1]`` (the head predicts ``P(r = 1)``; a
    reward of a row not completed is read as 0 and masked).

    Returns
    -------
    dict
        ``rows`` (flat indices ``b * G + i`` of the labelled candidates, into per-row
        features), ``rewards``, ``costs``, ``pi``, ``mask`` (each over ``rows``) and
        ``group_size`` (``w`` or ``G``).
    """
    r = np.asarray(rewards, dtype=np.float64)
    cost = np.asarray(costs)
    mask, pi = plan.selected, plan.pi
    B, G = plan.shape
    flat = np.arange(B * G).reshape(B, G)
    if plan.subset is not None:
        assert plan.inner_joint is not None  # recorded with the subset
        S = plan.subset
        mask, r, cost, flat = take(mask, S), take(r, S), take(cost, S), take(flat, S)
        pi = np.diagonal(plan.inner_joint, axis1=-2, axis2=-1)
    return {
        "rows": flat.reshape(-1),
        "rewards": np.clip(np.nan_to_num(r.reshape(-1), nan=0.0), 0.0, 1.0),
        "costs": cost.reshape(-1).astype(np.float64),
        "pi": pi.reshape(-1).copy(),
        "mask": mask.reshape(-1).copy(),
        "group_size": mask.shape[1],
    }


__all__ = ["ROW_FIELDS", "WIDTHS", "StepPlan", "head_labels", "plan_step",
           "prefix_candidates"]
