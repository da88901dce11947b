r"""The rows of the audit matrix: one small registered object per design/estimator pair.

Every row answers three questions for a frozen :class:`~pairht.audit.population.Population`:

* :meth:`AuditRow.plan` -- which design does it run on each prompt (inclusion probabilities at
  the matched expected suffix cost, the design object, its joint inclusions), and how long
  did choosing it take;
* :meth:`AuditRow.exact` -- the exact design expectation and covariance of its gradient
  estimate (from inclusion probabilities, no sampling; see :mod:`pairht.audit.exact`);
* :meth:`AuditRow.draw` -- ``n`` Monte Carlo replays (see :mod:`pairht.audit.montecarlo`).

Most rows are a :class:`VertexRow`: an allocation rule (``full``, ``uniform``, ``pointwise``,
``pair``, ``pair_fixed``), a vertex design kind from :func:`pairht.designs.make_design` and an
edge-weighting variant from :data:`pairht.estimators.VARIANTS`. Adding one is a class with
five attributes and the :func:`register_row` decorator::

    @register_row
    class PairClipped5(VertexRow):
        '''PAIR with inverse weights clipped at 5.'''
        key, label, group = "pair_clip5", "PAIR, clipped w_max=5", "practical"
        allocation, design, weighting, w_max = "pair", "bernoulli", "clipped", 5.0

Direct edge sampling is an :class:`EdgeRow` (it samples edges, not vertices).

Matched cost
------------
Every row's budget is ``budget_ratio * sum_i c_hat_i`` predicted suffix tokens per prompt, and
every allocation spends it in expectation under the *predicted* costs. Realised relative
suffix tokens ``E[sum_i J_i C_i] / sum_i C_i`` are reported per row.

Direct edge HT: documented choice
---------------------------------
Edges are drawn independently, ``I_e ~ Bernoulli(q_e)``, weighted ``1/(M q_e)``, and every
endpoint of a drawn edge must be completed, so vertex ``i`` is paid for with probability
``1 - prod_{e ∋ i} (1 - q_e)``. We use the variance-optimal independent-edge shape
``q_e = clip(lambda sqrt(a_e), pi_min^2, 1)`` (minimises ``sum_e a_e / q_e`` for a fixed
expected edge count; the floor ``pi_min^2`` mirrors the vertex designs' smallest
``rho_ij``) and report two rows: ``direct_edge_ht`` picks ``lambda`` so that its expected
*vertex* cost equals the budget (cost-matched, the fair comparison), and
``direct_edge_ht_edges`` picks ``lambda`` so that its expected number of observed edges
equals PAIR's, and reports the higher cost that buys (the paper's 0.61-vs-0.46 row).
"""

from __future__ import annotations

import abc
import importlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np

from pairht.audit.population import Population

#: Allocation rules a :class:`VertexRow` can name.
ALLOCATIONS = ("full", "uniform", "pointwise", "pair", "pair_fixed", "pair_norm")


class RowUnavailable(RuntimeError):
    """A row needs a function that is not (yet) importable; the audit skips it and says why."""


def need(module: str, name: str) -> Any:
    """Import ``module.name`` or raise :class:`RowUnavailable` naming what is missing."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise RowUnavailable(f"{module} is not importable ({exc})") from None
    try:
        return getattr(mod, name)
    except AttributeError:
        raise RowUnavailable(f"{module}.{name} is missing") from None


@dataclass(frozen=True)
class AuditConfig:
    """Settings shared by every row of one audit.

    Parameters
    ----------
    budget_ratio : float
        Expected predicted suffix cost as a fraction of the full group's, in (0, 1].
    pi_min : float
        Probability floor of the adaptive allocations (and ``pi_min^2`` floor of direct edge
        sampling), in (0, 1].
    proxy : str
        Edge proxy kind for :func:`pairht.allocation.allocate` (``"disagreement"`` default).
    fixed_size : int or None
        Endpoint count of the fixed-size rows; ``None`` lets
        :func:`pairht.allocation.auto_size` choose ``floor(budget_ratio * G)`` (at least 2
        and ``ceil(G pi_min)``).
    n_orders : int
        Recorded orders of the randomized dependent-rounding design.
    enum_limit : int
        Largest ``2**G`` for which exact metrics of ratio estimators (no closed form) are
        computed by enumerating the design support; beyond it they are reported as n/a.
    alpha : float
        Level of the exact-vs-Monte-Carlo consistency tests.
    seed : int
        Seed of every random choice of the audit (design construction and draws).
    """

    budget_ratio: float = 0.5
    pi_min: float = 0.08
    proxy: str = "disagreement"
    fixed_size: int | None = None
    n_orders: int = 8
    enum_limit: int = 2**12
    alpha: float = 1e-4
    seed: int = 0

    def __post_init__(self) -> None:
        if not (0.0 < self.budget_ratio <= 1.0):
            raise ValueError(f"budget_ratio must lie in (0, 1]; got {self.budget_ratio!r}")
        if not (0.0 < self.pi_min <= 1.0):
            raise ValueError(f"pi_min must lie in (0, 1]; got {self.pi_min!r}")
        if self.fixed_size is not None and self.fixed_size < 2:
            raise ValueError(f"fixed_size must be an int >= 2 or None; got {self.fixed_size!r}")
        if self.n_orders < 1:
            raise ValueError(f"n_orders must be >= 1; got {self.n_orders!r}")
        if not (0.0 < self.alpha < 1.0):
            raise ValueError(f"alpha must lie in (0, 1); got {self.alpha!r}")



@dataclass
class Plan:
    """What a row runs on each prompt, and what choosing it cost.

    ``pi`` (P, G) are vertex inclusion probabilities (what decides the suffix cost); vertex
    rows also hold ``designs`` (one :class:`~pairht.designs.Design` per prompt) and ``joint``
    (P, G, G); edge rows hold ``q`` (P, G, G), the edge inclusion probabilities.
    """

    pi: np.ndarray
    alloc_seconds: float
    build_seconds: float = 0.0
    designs: list[Any] | None = None
    joint: np.ndarray | None = None
    q: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)


class AuditRow(abc.ABC):
    """One row of the audit matrix (a design plus an estimator)."""

    #: Registry key (also the CSV key), e.g. ``"pair"``.
    key: ClassVar[str] = ""
    #: Human-readable label for tables and figures.
    label: ClassVar[str] = ""
    #: ``"paper"`` (Table audit-matrix), ``"fixed_size"``, ``"practical"`` or ``"extra"``.
    group: ClassVar[str] = "extra"
    #: Whether the estimator is claimed exactly design-unbiased (tested: exact bias <= 1e-12).
    unbiased: ClassVar[bool] = False

    @abc.abstractmethod
    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        """Choose the design of every prompt (``cache`` shares allocations between rows)."""

    @abc.abstractmethod
    def exact(self, plan: Plan, pop: Population, L: np.ndarray, cfg: AuditConfig) -> Any:
        """Exact moments, a :class:`pairht.audit.exact.ExactMoments`."""

    @abc.abstractmethod
    def draw(self, plan: Plan, pop: Population, L: np.ndarray, q: int, n: int,
             rng: np.random.Generator) -> Any:
        """``n`` replays on prompt ``q``, a :class:`pairht.audit.montecarlo.Draws`."""

    def __repr__(self) -> str:
        return f"<audit row {self.key!r}: {self.label}>"


#: Registry of audit rows, key -> instance, in registration (= table) order.
ROWS: dict[str, AuditRow] = {}

_R = TypeVar("_R", bound=type[AuditRow])


def register_row(cls: _R) -> _R:
    """Class decorator: instantiate an :class:`AuditRow` subclass and register it by ``key``.

    Examples
    --------
    >>> from pairht.audit.rows import ROWS, VertexRow, register_row
    >>> @register_row
    ... class Clip5(VertexRow):
    ...     key, label, group = "pair_clip5", "PAIR, clipped w_max=5", "practical"
    ...     allocation, design, weighting, w_max = "pair", "bernoulli", "clipped", 5.0
    >>> ROWS["pair_clip5"].label
    'PAIR, clipped w_max=5'
    >>> del ROWS["pair_clip5"]
    """
    if not cls.key:
        raise ValueError(f"{cls.__name__}.key must be a non-empty string")
    if cls.key in ROWS:
        raise ValueError(f"audit row key {cls.key!r} is already registered")
    ROWS[cls.key] = cls()
    return cls


# ---------------------------------------------------------------------- allocations
def budget_tokens(pop: Population, cfg: AuditConfig) -> np.ndarray:
    """Per-prompt budget ``B_q = budget_ratio * sum_i c_hat_qi`` in predicted tokens, (P,)."""
    return cfg.budget_ratio * pop.c_hat.sum(axis=1)


def allocation_pi(kind: str, pop: Population, cfg: AuditConfig,
                  cache: dict[str, Any]) -> tuple[np.ndarray, float, list[str]]:
    """Inclusion probabilities ``(P, G)`` of allocation rule ``kind`` at the matched budget.

    Returns ``(pi, seconds, notes)``; results are cached per audit so that rows sharing an
    allocation (PAIR and its weighting variants) share its cost and its draw of ``pi``.
    """
    if kind not in ALLOCATIONS:
        raise ValueError(f"allocation must be one of {ALLOCATIONS}; got {kind!r}")
    if kind in cache:
        return cache[kind]
    budget = budget_tokens(pop, cfg)
    notes: list[str] = []
    if kind == "full":
        solve: Callable[[slice], Any] = lambda sl: np.ones_like(pop.p_hat[sl])  # noqa: E731
    elif kind == "uniform":
        fn = need("pairht.allocation", "uniform_allocation")
        solve = lambda sl: fn(pop.c_hat[sl], budget[sl], cfg.pi_min)  # noqa: E731
    elif kind == "pointwise":
        fn = need("pairht.allocation", "pointwise_allocation")
        solve = lambda sl: fn(pop.p_hat[sl], pop.c_hat[sl], budget[sl], cfg.pi_min)  # noqa: E731
    else:
        allocate = need("pairht.allocation", "allocate")
        proxy = "score_norm" if kind == "pair_norm" else cfg.proxy
        kwargs: dict[str, Any] = {"pi_min": cfg.pi_min, "proxy": proxy, "fallback": True}
        if proxy == "score_norm":
            if pop.m_hat is None:
                raise RowUnavailable("the score_norm proxy needs m_hat in the population")
            kwargs["score_norm"] = pop.m_hat
        if kind == "pair_fixed":
            kwargs["size"] = "auto" if cfg.fixed_size is None else cfg.fixed_size
        def solve(sl: slice) -> Any:
            kw = dict(kwargs)
            if "score_norm" in kw:
                kw["score_norm"] = kw["score_norm"][sl]
            return allocate(pop.p_hat[sl], pop.c_hat[sl], budget[sl], **kw)
    # One untimed call on the first prompt compiles any numba kernel, so that the reported
    # wall-clock is the steady-state cost of a training step, not a one-off JIT compile.
    solve(slice(0, 1))
    t0 = time.perf_counter()
    res = solve(slice(None))
    if kind in ("full", "uniform", "pointwise"):
        pi = res
    else:
        pi = res.pi
        bad = ~np.asarray(res.converged, dtype=bool)
        if bad.any():
            notes.append(f"allocation did not converge on {int(bad.sum())} prompts")
        used = np.asarray(getattr(res, "fallback_used", False), dtype=bool)
        if used.any():
            notes.append(f"allocation fell back to uniform on {int(used.sum())} prompts")
    seconds = time.perf_counter() - t0
    pi = np.clip(np.asarray(pi, dtype=np.float64), 0.0, 1.0)
    if kind == "pair_fixed":
        # Fixed-size designs need sum(pi) = n exactly; the solver meets it to its tolerance.
        pi = _rescale_to_sum(pi, np.round(pi.sum(axis=1, keepdims=True)))
    cache[kind] = (pi, seconds, notes)
    return cache[kind]


def _rescale_to_sum(pi: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Remove the solver's rounding from ``sum(pi) = n`` (iterative capped rescaling)."""
    out = pi.copy()
    for _ in range(50):
        gap = n - out.sum(axis=1, keepdims=True)
        if np.all(np.abs(gap) < 1e-13):
            break
        free = (out < 1.0) & (out > 0.0)
        room = np.where(free, out, 0.0)
        out = np.clip(out + gap * room / np.maximum(room.sum(axis=1, keepdims=True), 1e-300),
                      0.0, 1.0)
    return out


# ---------------------------------------------------------------------- vertex rows
class VertexRow(AuditRow):
    """A vertex design (allocation + design kind) with an edge-weighting variant.

    Class attributes: ``allocation`` (one of :data:`ALLOCATIONS`), ``design`` (a kind of
    :func:`pairht.designs.make_design`), ``weighting`` (a key of
    :data:`pairht.estimators.VARIANTS`) and ``w_max`` (clipping level, or None).
    """

    allocation: ClassVar[str] = "pair"
    design: ClassVar[str] = "bernoulli"
    weighting: ClassVar[str] = "exact"
    w_max: ClassVar[float | None] = None

    def design_kwargs(self, cfg: AuditConfig, q: int) -> dict[str, Any]:
        """Extra keyword arguments of the design constructor for prompt ``q``."""
        if self.design == "randomized_dependent_rounding":
            return {"n_orders": cfg.n_orders, "rng": np.random.SeedSequence([cfg.seed, 7, q])}
        return {}

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        pi, seconds, notes = allocation_pi(self.allocation, pop, cfg, cache)
        key = f"designs:{self.allocation}:{self.design}"
        if key not in cache:
            if self.design == "bernoulli":
                make = need("pairht.designs", "Bernoulli")
                build: Callable[..., Any] = lambda kind, p, **kw: make(p)  # noqa: E731
            else:
                build = need("pairht.designs", "make_design")
            warm = build(self.design, pi[0], **self.design_kwargs(cfg, 0))  # JIT, untimed
            warm.joint()
            warm.sample(np.random.default_rng(0), size=2)
            t0 = time.perf_counter()
            designs = [build(self.design, pi[q], **self.design_kwargs(cfg, q))
                       for q in range(pop.n_prompts)]
            joint = np.stack([d.joint() for d in designs])
            cache[key] = (designs, joint, time.perf_counter() - t0)
        designs, joint, build_seconds = cache[key]
        return Plan(pi=np.stack([d.pi for d in designs]), alloc_seconds=seconds,
                    build_seconds=build_seconds, designs=designs, joint=joint,
                    notes=list(notes))

    def exact(self, plan: Plan, pop: Population, L: np.ndarray, cfg: AuditConfig) -> Any:
        from pairht.audit.exact import vertex_row_moments

        return vertex_row_moments(self, plan, pop, L, cfg)

    def draw(self, plan: Plan, pop: Population, L: np.ndarray, q: int, n: int,
             rng: np.random.Generator) -> Any:
        from pairht.audit.montecarlo import draw_vertex_row

        return draw_vertex_row(self, plan, pop, L, q, n, rng)


@register_row
class FullGraph(VertexRow):
    """Every candidate completed: the complete pair average itself (the audit's target)."""

    key, label, group, unbiased = "full", "Full candidate graph", "paper", True
    allocation = "full"


@register_row
class UniformHT(VertexRow):
    """Equal inclusion probability for every candidate at the matched cost, exact HT weights."""

    key, label, group, unbiased = "uniform_ht", "Uniform vertex HT", "paper", True
    allocation = "uniform"


@register_row
class PointwiseHT(VertexRow):
    """Inclusion proportional to the pointwise score p(1-p) (floored), exact HT weights."""

    key, label, group, unbiased = "pointwise_ht", "Pointwise p(1-p) HT", "paper", True
    allocation = "pointwise"


# ---------------------------------------------------------------------- edge rows
def edge_probabilities(a: np.ndarray, c_hat: np.ndarray, *, floor: float,
                       target: np.ndarray, match: str) -> np.ndarray:
    r"""Independent edge-inclusion probabilities ``q_e = clip(lambda sqrt(a_e), floor, 1)``.

    ``lambda`` (one per prompt) is found by bisection in ``log lambda`` so that the matched
    quantity equals ``target``: ``match="cost"``: the expected vertex cost
    ``sum_i c_hat_i (1 - prod_{j != i} (1 - q_ij))``; ``match="edges"``: the expected edge
    count ``sum_{i<j} q_ij``. Both are nondecreasing in ``lambda``. A target below the
    floor's value (or above full inclusion) leaves the floor (or ones).

    Parameters
    ----------
    a : (P, G, G) edge proxy (symmetric, zero diagonal)
    c_hat : (P, G) predicted suffix costs
    floor : float in (0, 1]
    target : (P,) matched quantity
    match : {"cost", "edges"}

    Returns
    -------
    (P, G, G) symmetric, zero diagonal, entries in [floor, 1] off the diagonal.
    """
    G = a.shape[-1]
    off = ~np.eye(G, dtype=bool)
    root = np.sqrt(np.maximum(a, 0.0))

    def q_of(lam: np.ndarray) -> np.ndarray:
        q = np.clip(lam[:, None, None] * root, floor, 1.0)
        return np.where(off, q, 0.0)

    def value(q: np.ndarray) -> np.ndarray:
        if match == "edges":
            return q.sum(axis=(1, 2)) / 2.0
        untouched = np.prod(np.where(off, 1.0 - q, 1.0), axis=2)
        return (c_hat * (1.0 - untouched)).sum(axis=1)

    positive = np.where(root > 0, root, np.inf).min(axis=(1, 2))
    hi = np.log(np.where(np.isfinite(positive), 1.0 / positive, 1.0)) + 1.0
    lo = np.log(np.full(a.shape[0], floor)) - np.log(np.maximum(root.max(axis=(1, 2)), 1e-300))
    lo = np.minimum(lo, hi - 1.0) - 1.0
    for _ in range(100):  # bisection to ~2^-100 of the bracket: float64 exact
        mid = 0.5 * (lo + hi)
        above = value(q_of(np.exp(mid))) > target
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return q_of(np.exp(lo))


class EdgeRow(AuditRow):
    """Direct edge HT: independent edge sampling, weights ``1/(M q_e)``, every endpoint paid."""

    unbiased = True
    #: ``"cost"`` (match the expected vertex cost) or ``"edges"`` (match PAIR's edge count).
    match: ClassVar[str] = "cost"

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        edge_proxy = need("pairht.allocation", "edge_proxy")
        t0 = time.perf_counter()
        a = edge_proxy(pop.p_hat, kind=cfg.proxy)
        if self.match == "cost":
            target = budget_tokens(pop, cfg)
            notes: list[str] = []
        else:
            pair_pi, _, notes = allocation_pi("pair", pop, cfg, cache)
            # Bernoulli PAIR observes sum_{i<j} pi_i pi_j edges in expectation.
            target = (pair_pi.sum(axis=1) ** 2 - (pair_pi**2).sum(axis=1)) / 2.0
        q = edge_probabilities(a, pop.c_hat, floor=cfg.pi_min**2, target=target,
                               match=self.match)
        G = pop.group_size
        off = ~np.eye(G, dtype=bool)
        pi = 1.0 - np.prod(np.where(off, 1.0 - q, 1.0), axis=2)
        return Plan(pi=pi, alloc_seconds=time.perf_counter() - t0, q=q, notes=list(notes))

    def exact(self, plan: Plan, pop: Population, L: np.ndarray, cfg: AuditConfig) -> Any:
        from pairht.audit.exact import edge_row_moments

        return edge_row_moments(plan, pop, L)

    def draw(self, plan: Plan, pop: Population, L: np.ndarray, q: int, n: int,
             rng: np.random.Generator) -> Any:
        from pairht.audit.montecarlo import draw_edge_row

        return draw_edge_row(plan, pop, L, q, n, rng)


@register_row
class DirectEdgeHT(EdgeRow):
    """Direct edge HT at the matched expected suffix cost (fair comparison)."""

    key, label, group = "direct_edge_ht", "Direct edge HT", "paper"
    match = "cost"


@register_row
class DirectEdgeHTMatchedEdges(EdgeRow):
    """Direct edge HT drawing as many edges as PAIR observes; reports the higher cost."""

    key, label, group = "direct_edge_ht_edges", "Direct edge HT (PAIR's edge count)", "paper"
    match = "edges"


# ---------------------------------------------------------------------- PAIR and variants
@register_row
class AdaptiveUnweighted(VertexRow):
    """PAIR's probabilities, no inverse weights, complete-pair denominator (biased)."""

    key, label, group = "adaptive_unweighted", "Adaptive unweighted", "paper"
    weighting = "unweighted"


@register_row
class MarginalOnly(VertexRow):
    """PAIR's probabilities with per-vertex weights 1/(pi_i pi_j) (Bernoulli: unbiased)."""

    key, label, group = "marginal_only", "Marginal-only weighting", "paper"
    weighting = "marginal_only"
    unbiased = True  # under the Bernoulli design rho_ij = pi_i pi_j exactly


@register_row
class Pair(VertexRow):
    """PAIR: convex graph allocation, Bernoulli vertices, exact HT pair weights."""

    key, label, group, unbiased = "pair", "PAIR", "paper", True


@register_row
class PairScoreNorm(VertexRow):
    """PAIR with the score-norm edge proxy a_ij = d_ij (m_i + m_j)^2 / 4 (needs m_hat)."""

    key, label, group, unbiased = "pair_score_norm", "PAIR, score-norm proxy", "proxy", True
    allocation = "pair_norm"


@register_row
class PairConditionalPoisson(VertexRow):
    """PAIR with a fixed endpoint count: conditional Poisson (max-entropy) design."""

    key, label, group, unbiased = "pair_cps", "PAIR, conditional Poisson", "fixed_size", True
    allocation, design = "pair_fixed", "conditional_poisson"


@register_row
class PairDependentRounding(VertexRow):
    """PAIR with a fixed endpoint count: dependent rounding over randomized orders."""

    key, label, group, unbiased = ("pair_drr", "PAIR, dependent rounding (rand. order)",
                                   "fixed_size", True)
    allocation, design = "pair_fixed", "randomized_dependent_rounding"


@register_row
class MarginalOnlyConditionalPoisson(VertexRow):
    """Marginal-only weights 1/(pi_i pi_j) on the conditional Poisson design (biased there)."""

    key, label, group = "marginal_only_cps", "Marginal-only, conditional Poisson", "fixed_size"
    allocation, design, weighting = "pair_fixed", "conditional_poisson", "marginal_only"


@register_row
class PairClip10(VertexRow):
    """PAIR with inverse pair weights clipped at 10 (biased)."""

    key, label, group = "pair_clip10", "PAIR, clipped w_max=10", "practical"
    weighting, w_max = "clipped", 10.0


@register_row
class PairClip20(VertexRow):
    """PAIR with inverse pair weights clipped at 20 (biased)."""

    key, label, group = "pair_clip20", "PAIR, clipped w_max=20", "practical"
    weighting, w_max = "clipped", 20.0


@register_row
class PairClip50(VertexRow):
    """PAIR with inverse pair weights clipped at 50 (biased)."""

    key, label, group = "pair_clip50", "PAIR, clipped w_max=50", "practical"
    weighting, w_max = "clipped", 50.0


@register_row
class PairHajek(VertexRow):
    """PAIR with self-normalised (Hajek) weights: a ratio estimator (biased)."""

    key, label, group = "pair_hajek", "PAIR, Hajek", "practical"
    weighting = "hajek"


#: The paper's Table audit-matrix rows, in its order.
PAPER_ROWS = tuple(k for k, r in ROWS.items() if r.group == "paper")


def select_rows(keys: list[str] | tuple[str, ...] | None = None) -> list[AuditRow]:
    """Rows by key (``None``: all registered rows), validating every key."""
    if keys is None:
        return list(ROWS.values())
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        raise ValueError(f"unknown audit rows {unknown}; registered rows are {list(ROWS)}")
    return [ROWS[k] for k in keys]


def _is_linear(weighting: str) -> bool:
    """Whether ``W_ij = I_ij w_ij`` with ``w`` fixed by the design (closed-form moments).

    Read from the estimators' registry: a variant is linear iff it has a closed-form bias
    multiplier (ratio estimators return ``None``).
    """
    variants = need("pairht.estimators", "VARIANTS")
    if weighting not in variants:
        raise RowUnavailable(f"weighting {weighting!r} is not in pairht.estimators.VARIANTS")
    rho = np.full((2, 2), 0.5)
    out = variants[weighting].bias_multiplier(rho, rho, w_max=1.0, pi=np.full(2, 0.5))
    return out is not None


def n_pairs(G: int) -> int:
    """``M = G (G - 1) / 2``."""
    return math.comb(G, 2)
