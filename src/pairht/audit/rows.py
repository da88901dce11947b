r"""The rows of the audit matrix: one registered row, as data, per design/estimator pair.

A row *declares* what it is and *plans* its design on a frozen
:class:`~pairht.audit.population.Population`; it does not evaluate itself. Its
``estimator`` attribute (one of :data:`pairht.audit.base.ESTIMATORS`) names how
:mod:`pairht.audit.exact` (exact design moments) and :mod:`pairht.audit.montecarlo` (replays)
evaluate it, so imports run one way: base <- rows; base <- exact <- montecarlo; all <- runner.

Most rows are a :class:`VertexRow`: an allocation rule named as in the step's allocator
registry (``full``, ``uniform``, ``srswor``, ``pointwise``, ``pair``; see
:mod:`pairht.audit.allocations`), an edge proxy for ``pair``, a vertex design kind from
:func:`pairht.designs.make_design` and an edge-weighting variant from
:data:`pairht.estimators.VARIANTS`. A row is data: adding one is one call::

    register_row(VertexRow(key="pair_clip5", label="PAIR, clipped w_max=5",
                           group="practical", allocation="pair", design="bernoulli",
                           weighting="clipped", w_max=5.0))

Direct edge sampling is an :class:`EdgeRow`; small-group GRPO is :class:`SmallGroupGRPO`;
a choice among rows from history a :class:`ChoiceRow`; a narrower prefix width a
:class:`TwoStageRow`. A new family (a subclass with its own :meth:`AuditRow.plan`) is needed
only for a new way of planning.

Equal realised cost
-------------------
Every row follows realised accounting (finished candidates kept for free, budget spent on
the unfinished ones) and is compared at equal expected *realised* suffix tokens:
``budget_ratio`` of the full cost, reached by bisection on each rule's budget
(:func:`pairht.audit.allocations.matched_allocation`). Fixed-size rows use
:class:`~pairht.designs.MixedSize` (sizes ``n`` and ``n + 1`` mixed, exact joints), so
their size is taken over the unfinished candidates at any budget.

PAIR's default
--------------
The ``pair`` row is what :func:`pairht.step.plan_continuations` runs by default (the same
allocator, :data:`pairht.step.plan.DEFAULT_SIZE` and ``DEFAULT_PROXY``, the same designs via
:func:`pairht.step.group_design`, HT weights from the plan's joints), so the summary line
compares PAIR's default with the best baseline. The paper's Bernoulli design is
``pair_bernoulli`` (the weighting rows ``adaptive_unweighted``, ``marginal_only``,
``pair_clip*``, ``pair_hajek`` use its probabilities); ``pair_cps``, ``pair_energy_cps``,
``pair_drr`` and ``marginal_only_cps`` are the same fixed-size allocation with conditional HT.

Direct edge HT: documented choice
---------------------------------
Edges are drawn independently, ``I_e ~ Bernoulli(q_e)``, weighted ``1/(M q_e)``, and every
endpoint of a drawn edge must be completed, so vertex ``i`` is paid for with probability
``1 - prod_{e ∋ i} (1 - q_e)`` (finished vertices are free and their mutual edges always
observed). We use the variance-optimal independent-edge shape
``q_e = clip(lambda sqrt(a_e), pi_min^2, 1)`` (minimises ``sum_e a_e / q_e`` for a fixed
expected edge count; the floor ``pi_min^2`` mirrors the vertex designs' smallest
``rho_ij``) and report two rows: ``direct_edge_ht`` picks ``lambda`` per prompt so that its
expected *realised* vertex cost is ``budget_ratio`` of the prompt's full cost, and
``direct_edge_ht_edges`` picks ``lambda`` so that its expected number of observed edges
equals PAIR's, and reports the higher cost that buys (the paper's 0.61-vs-0.46 row).
"""

from __future__ import annotations

import abc
import dataclasses
import time
from typing import Any, TypeVar

import numpy as np

from pairht.allocation import edge_proxy
from pairht.audit.allocations import allocator_pi, matched_allocation, matched_pi
from pairht.audit.base import (
    AuditConfig,
    Plan,
    finished_mask,
    full_cost,
    prefix_tokens,
    suffix_costs,
    two_phase_accounting,
)
from pairht.audit.population import Population
from pairht.audit.two_stage import (
    MAX_SUBSETS,
    narrow_width,
    plan_two_stage,
    whole_group_ratio,
)
from pairht.audit.width import (
    CONFIDENCE,
    DEFAULT_CONFIDENCE,
    DEFAULT_MAX_RATIO,
    DEFAULT_OPTIONS,
    PREFIX_OPTIONS,
)
from pairht.designs import MixedSize, make_design
from pairht.registry import Registry
from pairht.step import group_design
from pairht.step.embedding import below_fixed_size
from pairht.step.plan import DEFAULT_PROXY, DEFAULT_SIZE, info_group_design

#: Row groups, in table order: the trivial designs a user would try instead of PAIR are
#: ``"baseline"`` (the summary line compares PAIR with the best of them).
GROUPS = ("paper", "baseline", "proxy", "fixed_size", "practical", "extra")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class AuditRow(abc.ABC):
    """One row of the audit matrix (a design plus an estimator), as data.

    A row is an instance of a small family (:class:`VertexRow`, :class:`EdgeRow`,
    :class:`ChoiceRow`, :class:`TwoStageRow`, and the rows with a plan of their own) with its
    fields set; the family's :meth:`plan` reads them.
    """

    #: Registry key (also the CSV key), e.g. ``"pair"``.
    key: str = ""
    #: Human-readable label for tables and figures.
    label: str = ""
    #: One of :data:`GROUPS`.
    group: str = "extra"
    #: Whether the estimator is claimed exactly design-unbiased (tested: exact bias <= 1e-12).
    unbiased: bool = False
    #: How the estimate is formed (:data:`pairht.audit.base.ESTIMATORS`).
    estimator: str = "ht"
    #: Edge-weighting variant (:data:`pairht.estimators.VARIANTS`) and its clipping level.
    weighting: str = "exact"
    w_max: float | None = None
    #: Which candidates get prefixes: ``"all"``, a uniform ``"subset"``, ``"none"`` (whole
    #: completions, small-group GRPO) or ``"auto"`` (chosen from history), as the step's width.
    width: str = "all"
    #: Conditional HT only: a sample of fewer than two candidates estimates 0 (GRPO with one
    #: completion) instead of falling back to the mixture's joints.
    empty_below_two: bool = False
    #: Realised accounting: the expected realised suffix tokens equal ``budget_ratio`` times
    #: the full cost (solved to 1e-9; tested). False for rows that buy whole rollouts (an
    #: integer count cannot hit it; their achieved ratio is in ``tokens``) or generate all.
    cost_matched: bool = True
    #: Finished candidates (prefix ended) are kept with probability 1 at no cost (tested).
    keeps_finished: bool = True

    @abc.abstractmethod
    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        """Choose the design of every prompt (``cache`` shares allocations between rows)."""

    def __repr__(self) -> str:
        return f"<audit row {self.key!r}: {self.label}>"


#: Registry of audit rows, key -> row, in registration (= table) order.
ROWS: Registry[AuditRow] = Registry("audit row")

_R = TypeVar("_R", bound="AuditRow | type[AuditRow]")


def register_row(row: _R) -> _R:
    """Register an :class:`AuditRow` by its ``key``: an instance (a row as data), or a
    subclass whose class attributes set the fields (instantiated with them).

    Examples
    --------
    >>> from pairht.audit.rows import ROWS, VertexRow, register_row
    >>> _ = register_row(VertexRow(key="pair_clip5", label="PAIR, clipped w_max=5",
    ...                            group="practical", weighting="clipped", w_max=5.0))
    >>> ROWS["pair_clip5"].label, ROWS["pair_clip5"].allocation
    ('PAIR, clipped w_max=5', 'pair')
    >>> del ROWS["pair_clip5"]
    """
    if isinstance(row, type):
        if not issubclass(row, AuditRow):
            raise TypeError(f"register_row takes an AuditRow or a subclass; got {row!r}")
        # a subclass body sets fields as class attributes; a field with no class attribute
        # (a default factory) keeps its default
        fields = {f.name: getattr(row, f.name) for f in dataclasses.fields(row)
                  if f.name in vars(row) or hasattr(row, f.name)}
        inst = row(**fields)
    elif isinstance(row, AuditRow):
        inst = row
    else:
        raise TypeError(f"register_row takes an AuditRow or a subclass; got {row!r}")
    if not inst.key:
        raise ValueError(f"{type(inst).__name__}.key must be a non-empty string")
    if inst.group not in GROUPS:
        raise ValueError(f"{type(inst).__name__}.group must be one of {GROUPS}; got "
                         f"{inst.group!r}")
    ROWS.register(inst.key, inst)
    return row


def _build_designs(kind: str, pi: np.ndarray, cfg: AuditConfig, cache: dict[str, Any],
                   key: str, finished: np.ndarray | None = None
                   ) -> tuple[list[Any], np.ndarray, float]:
    """One design per prompt (cached under ``key``) and their joints; untimed JIT warm-up.

    A ``mixed_size`` kind over a group whose unfinished candidates' expected size is below
    two is drawn Bernoulli, as the step does (:func:`pairht.step.unfinished_design`);
    ``finished=None`` (small-group GRPO: no prefixes) keeps the mixture at any size."""
    if key in cache:
        return cache[key]

    def build(q: int) -> Any:
        kwargs: dict[str, Any] = {}
        rdr = "randomized_dependent_rounding"
        if kind == rdr or (kind.startswith("mixed_size") and kind.endswith(rdr)):
            kwargs = {"n_orders": cfg.n_orders, "rng": np.random.SeedSequence([cfg.seed, 7, q])}
        if kind.startswith("mixed_size"):
            if finished is not None and below_fixed_size(pi[q][~finished[q]]):
                return group_design("bernoulli", pi[q], finished[q])
            kwargs["base"] = kind.partition(":")[2] or "conditional_poisson"
            return make_design("mixed_size", pi[q], **kwargs)
        return make_design(kind, pi[q], **kwargs)

    return _timed_designs(build, pi.shape[0], cache, key)


# ---------------------------------------------------------------------- vertex rows
@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class VertexRow(AuditRow):
    """A vertex design (allocation + design kind) with an edge-weighting variant.

    Fields: ``allocation`` (an allocator name, see
    :mod:`pairht.audit.allocations`), ``proxy`` (edge proxy of ``pair``; ``None``: the
    config's), ``size`` (``pair`` only: ``None``, the Bernoulli program; ``"auto"``, the
    program at the two sizes neighbouring uniform SRSWOR's, mixed), ``design``
    (``"bernoulli"``, a kind of :func:`pairht.designs.make_design`, or
    ``"mixed_size:<fixed-size kind>"``), ``step_design`` (build each prompt's design exactly
    as :func:`pairht.step.plan_continuations` does, :func:`pairht.step.group_design`),
    ``weighting`` and ``w_max``.
    """

    allocation: str = "pair"
    proxy: str | None = None
    design: str = "bernoulli"
    size: str | None = None
    step_design: bool = False

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        pi, info, scale, notes = matched_allocation(self.allocation, pop, cfg, cache,
                                                    self.proxy, self.size)
        tag = f"{self.allocation}:{self.proxy}:{self.size}"
        if f"seconds:{tag}" not in cache:
            # What a training step pays: one allocation at the solved budget (the audit's
            # bisection to match realised cost is not part of a step).
            t0 = time.perf_counter()
            allocator_pi(self.allocation, pop, scale, cfg, self.proxy, self.size)
            cache[f"seconds:{tag}"] = time.perf_counter() - t0
        timed = cache[f"seconds:{tag}"]
        key = f"designs:{tag}:{self.design}:{self.step_design}"
        if self.step_design:
            designs, joint, build_seconds = _step_designs(self.design, pi, info, pop, cfg,
                                                          cache, key)
        elif self.size is not None:
            designs, joint, build_seconds = _component_designs(self.design, pi, info, pop,
                                                               cfg, cache, key)
        else:
            designs, joint, build_seconds = _build_designs(self.design, pi, cfg, cache, key,
                                                           finished_mask(pop))
        return Plan(pi=np.stack([d.pi for d in designs]), alloc_seconds=timed,
                    cost=suffix_costs(pop), build_seconds=build_seconds, designs=designs,
                    joint=joint, budget_scale=scale, notes=list(notes),
                    **two_phase_accounting(pop))


def _timed_designs(build: Any, n: int, cache: dict[str, Any], key: str
                   ) -> tuple[list[Any], np.ndarray, float]:
    """``build(q)`` for every prompt and their joints, timed after an untimed JIT warm-up."""
    warm = build(0)
    warm.joint()
    warm.sample(np.random.default_rng(0), size=2)
    t0 = time.perf_counter()
    designs = [build(q) for q in range(n)]
    joint = np.stack([d.joint() for d in designs])
    cache[key] = (designs, joint, time.perf_counter() - t0)
    return cache[key]


def _step_designs(kind: str, pi: np.ndarray, info: dict[str, Any], pop: Population,
                  cfg: AuditConfig, cache: dict[str, Any], key: str
                  ) -> tuple[list[Any], np.ndarray, float]:
    """The step's design of every prompt (:func:`pairht.step.group_design`), as
    :func:`pairht.step.plan_continuations` builds it from the allocator's ``info``: the two
    solved sizes mixed where the group has them, Bernoulli where a sized rule's group affords
    no size of at least two, else ``kind`` over the unfinished candidates."""
    if key in cache:
        return cache[key]
    fin = finished_mask(pop)
    base = kind.partition(":")[2] or kind

    def build(q: int) -> Any:
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 7, q]))
        return info_group_design(base, pi[q], fin[q], info, q, rng)

    return _timed_designs(build, pop.n_prompts, cache, key)


def _component_designs(kind: str, pi: np.ndarray, info: dict[str, Any], pop: Population,
                       cfg: AuditConfig, cache: dict[str, Any], key: str
                       ) -> tuple[list[Any], np.ndarray, float]:
    """:class:`~pairht.designs.MixedSize` over all ``G`` candidates of the allocator's two
    solved sizes (finished candidates at 1 in both), for conditional HT, which reads the
    component a sample came from. A prompt that affords no fixed size of two (the step draws
    it Bernoulli) gets its Bernoulli program's ``pi`` drawn by the mixture of the two
    neighbouring sizes (``MixedSize(pi)``, as ``plan_continuations(size=None,
    design="conditional_poisson")`` does), and below an expected size of two over the
    unfinished candidates the step's Bernoulli draw (sizes 0 and 1 would never observe a pair
    of unfinished candidates: :func:`pairht.step.unfinished_design`)."""
    if key in cache:
        return cache[key]
    fixed = np.asarray(info["fixed_size"], dtype=bool)
    fin = finished_mask(pop)
    base = kind.partition(":")[2] or "conditional_poisson"

    def build(q: int) -> Any:
        kw: dict[str, Any] = {}
        if base == "randomized_dependent_rounding":
            kw = {"n_orders": cfg.n_orders, "rng": np.random.SeedSequence([cfg.seed, 7, q])}
        if not fixed[q]:
            if below_fixed_size(pi[q][~fin[q]]):
                return group_design("bernoulli", pi[q], fin[q])
            return make_design("mixed_size", pi[q], base=base, **kw)
        return MixedSize.from_components(info["pi_lo"][q], info["pi_hi"][q],
                                         float(info["weight_hi"][q]), base=base, **kw)

    return _timed_designs(build, pop.n_prompts, cache, key)


register_row(VertexRow(
    key="full", label="Full candidate graph", group="paper", unbiased=True, allocation="full"))
register_row(VertexRow(
    key="uniform_ht", label="Uniform among unfinished (Bernoulli)", group="baseline",
    unbiased=True, allocation="uniform"))
# Fixed-size uniform among unfinished: SRSWOR of sizes n and n+1 mixed (finished in);
# conditional HT, the weights of the size drawn, i.e. SRSWOR's own HT weights.
register_row(VertexRow(
    key="srswor", label="Fixed-size uniform among unfinished (SRSWOR)", group="baseline",
    unbiased=True, allocation="srswor", design="mixed_size:conditional_poisson",
    estimator="conditional_ht"))
register_row(VertexRow(
    key="pointwise_ht", label="Pointwise p(1-p) HT", group="baseline", unbiased=True,
    allocation="pointwise"))


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
    # Hand-written: scipy.optimize.brentq finds the same q (to 3e-16, tested) but solves one
    # prompt per Python call, 2x slower at P = 1000, G = 16; this bisects all P at once.
    for _ in range(100):  # bisection to ~2^-100 of the bracket: float64 exact
        mid = 0.5 * (lo + hi)
        above = value(q_of(np.exp(mid))) > target
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return q_of(np.exp(lo))


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class EdgeRow(AuditRow):
    """Direct edge HT: independent edge sampling, weights ``1/(M q_e)``, every endpoint paid."""

    unbiased: bool = True
    estimator: str = "edge"
    #: ``"cost"`` (match the expected realised vertex cost) or ``"edges"`` (PAIR's edges).
    match: str = "cost"

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        t0 = time.perf_counter()
        fin = finished_mask(pop)
        a = edge_proxy(pop.p_hat, kind="disagreement")
        C = suffix_costs(pop)
        notes: list[str] = []
        if self.match == "cost":
            target = cfg.budget_ratio * C.sum(axis=1)
        else:
            pair_pi, _, notes = matched_pi("pair", pop, cfg, cache)  # Bernoulli PAIR
            # Bernoulli PAIR observes sum_{i<j} pi_i pi_j edges in expectation.
            target = (pair_pi.sum(axis=1) ** 2 - (pair_pi**2).sum(axis=1)) / 2.0
        q = edge_probabilities(a, C, floor=cfg.pi_min**2, target=target, match=self.match)
        # Two finished endpoints: the edge is observed for free, always.
        both = fin[:, :, None] & fin[:, None, :] & ~np.eye(pop.group_size, dtype=bool)
        q = np.where(both, 1.0, q)
        off = ~np.eye(pop.group_size, dtype=bool)
        pi = 1.0 - np.prod(np.where(off, 1.0 - q, 1.0), axis=2)
        return Plan(pi=pi, alloc_seconds=time.perf_counter() - t0, cost=C, q=q,
                    notes=list(notes), **two_phase_accounting(pop))


# at the matched expected realised suffix cost (the fair comparison), and drawing as many
# edges as PAIR observes (reports the higher cost that buys)
register_row(EdgeRow(key="direct_edge_ht", label="Direct edge HT", group="paper", match="cost"))
register_row(EdgeRow(key="direct_edge_ht_edges", label="Direct edge HT (PAIR's edge count)",
                     group="paper", match="edges"))


# ---------------------------------------------------------------------- small-group GRPO
@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class SmallGroupGRPO(AuditRow):
    r"""Small-group GRPO: ``G'`` full completions, no prefix phase, RLOO / pair average.

    **Cost.** PAIR generates every prefix and then the selected suffixes; its expected total
    is ``sum_i prefix_i + budget_ratio * sum_{i unfinished} C_i`` (pooled over prompts).
    GRPO generates ``G'`` whole sequences of expected length ``mean_i (prefix_i + C_i)``,
    ``G'`` chosen so that both totals are equal. A non-integer ``G'`` mixes the sizes
    ``floor(G')`` and ``ceil(G')`` (:class:`~pairht.designs.MixedSize` of uniform
    ``pi = G'/G``).

    **What it estimates.** A fresh group of ``G'`` completions is modelled as a uniform
    ``G'``-subset of the population's ``G`` candidates (SRSWOR; the candidates are i.i.d.
    draws of the policy, so this is exact in distribution). Its estimate, the pair average
    ``(1/M') sum_{i<j in J} h_ij`` (``M' = G'(G'-1)/2``; proportional to the RLOO / LOO
    gradient of the ``G'`` completions by the pairwise representation), has design
    expectation the pair average over all ``G`` candidates, because each pair is in the
    subset with probability ``M'/M``: it is unbiased for the *same* target as every other
    row, ``g_pair`` of the prompt's candidates, itself an unbiased estimate of the
    prompt-level expected pair gradient ``E[h_12]``. So MSEs are comparable. (A component of
    size ``G' < 2`` has no pair: its estimate is 0 and the row is then biased, which the
    audit reports.)
    """

    key: str = "grpo_small"
    label: str = "Small-group GRPO (G' full completions)"
    group: str = "baseline"
    unbiased: bool = True
    estimator: str = "conditional_ht"
    empty_below_two: bool = True
    width: str = "none"

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        t0 = time.perf_counter()
        whole = pop.prefix_len + suffix_costs(pop)
        ratio = whole_group_ratio(pop, cfg.budget_ratio)
        G = pop.group_size
        pi = np.full(pop.p_hat.shape, min(ratio, 1.0))
        designs, joint, build = _build_designs("mixed_size:conditional_poisson", pi, cfg, cache,
                                               "designs:grpo")
        notes = [f"G' = {ratio * G:.3f} full completions per prompt"]
        if ratio * G < 2:
            notes.append("G' < 2: groups of one completion have no pair (estimate 0, biased)")
        return Plan(pi=np.stack([d.pi for d in designs]), alloc_seconds=time.perf_counter() - t0,
                    cost=whole.astype(np.float64), build_seconds=build, designs=designs,
                    joint=joint, budget_scale=ratio, notes=notes,
                    token_scale=float(whole.sum()), prefix_tokens=0.0)


register_row(SmallGroupGRPO())


# ---------------------------------------------------------------------- PAIR and variants
# PAIR's probabilities, no inverse weights, complete-pair denominator (biased)
register_row(VertexRow(key="adaptive_unweighted", label="Adaptive unweighted", group="paper",
                       weighting="unweighted"))
# PAIR's probabilities with per-vertex weights 1/(pi_i pi_j): unbiased under the Bernoulli
# design, where rho_ij = pi_i pi_j exactly
register_row(VertexRow(key="marginal_only", label="Marginal-only weighting", group="paper",
                       weighting="marginal_only", unbiased=True))


def default_design_row(**fields: Any) -> VertexRow:
    """A rule of PAIR's program on PAIR's default design, as the step draws it: the two sizes
    around the budget's uniform size (mixed) over the unfinished candidates, conditional
    Poisson components, HT weights from the mixture's joints. ``fields`` name the rule
    (``allocation``), the proxy, the key and the label."""
    return VertexRow(size=DEFAULT_SIZE, design="conditional_poisson", step_design=True,
                     **fields)


# PAIR at full width, exactly as pairht.step.plan_continuations runs it by default (the prefix
# rule "pair"; what PAIR runs by default in training is the row "default"): the fixed-size
# program at the two sizes neighbouring uniform SRSWOR's (mixed; a prompt that affords no size
# of two is Bernoulli), the step's own designs over the unfinished candidates and exact HT
# weights from the mixture's joints (what pairht.pair_advantages gets from plan.joint).
register_row(default_design_row(key="pair", label="PAIR, full width (fixed size)",
                                group="paper", unbiased=True, proxy=DEFAULT_PROXY))


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class ChoiceRow(AuditRow):
    """A row that runs, per prompt, one of other rows chosen from history (cross-fitted).

    ``options`` are row keys, in order of preference on ties. The runner evaluates the options
    and takes each prompt's exact MSE from the option chosen on the *other* folds of prompts
    (:func:`pairht.audit.width.cross_fitted_choice`); there is no design of its own to plan.
    """

    estimator: str = "choice"
    width: str = "auto"
    options: tuple[str, ...] = ()
    #: :func:`~pairht.audit.width.cross_fitted_choice`'s ``confidence`` (None: the argmin).
    confidence: float | None = CONFIDENCE
    #: :func:`~pairht.audit.width.choose_option`'s margin (1: none).
    max_ratio: float = 1.0
    # Its options are cost-matched; the choice spends their pooled generated tokens only up to
    # how per-prompt totals differ between the options (reported as ``generated``).
    cost_matched: bool = False

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        # A choice has no design: run_audit evaluates its options and selects per prompt.
        raise TypeError(f"row {self.key!r} chooses among {self.options}; run_audit evaluates "
                        f"it from their results, it has no plan of its own")


# PAIR deciding its prefix width from history (pairht.audit.width): per fold of prompts,
# small-group GRPO or one of PAIR's prefix rules (pairht.step.PREFIX_RULES) or the difference
# estimator at a narrower width (pair_dr_narrow; audit only), whichever had the lowest exact
# MSE on the other folds, a prefix option only when confidently below GRPO; all at the same
# total generated tokens. GRPO first: on a tie the prefixes are not worth generating.
register_row(ChoiceRow(key="pair_width", label="PAIR, width from history", group="practical",
                       unbiased=True, options=("grpo_small", *PREFIX_OPTIONS)))
# What PAIR runs by default (PairGRPOConfig(): width="auto"): per fold of prompts, small-group
# GRPO, pair_dr_narrow or pair_dr (DEFAULT_OPTIONS), whichever history puts lowest, a prefix
# option only when confidently below GRPO (DEFAULT_CONFIDENCE) by a margin
# (DEFAULT_MAX_RATIO). The trainer makes the same choice with choose_option.
register_row(ChoiceRow(key="default", label="PAIR's default (width from history)",
                       group="paper", unbiased=True, options=DEFAULT_OPTIONS,
                       confidence=DEFAULT_CONFIDENCE, max_ratio=DEFAULT_MAX_RATIO))
# PAIR's Bernoulli design (size=None): the paper's; shared by the weighting rows
register_row(VertexRow(key="pair_bernoulli", label="PAIR, Bernoulli", group="paper",
                       unbiased=True))
register_row(default_design_row(key="pair_length_energy",
                                label="PAIR (full width), length-energy proxy", group="proxy",
                                unbiased=True, proxy="length_energy"))
# one budget for the batch: split across prompts by PAIR's value curves, then the default
# program in each prompt
register_row(default_design_row(key="pair_batch",
                                label="PAIR (full width), one budget for the batch",
                                group="practical", unbiased=True, allocation="pair_batch"))
# predicted successes and failures among unfinished drawn apart, SRSWOR within each at
# Neyman's sizes (the step's Stratified design, finished kept), exact HT weights
register_row(VertexRow(key="pair_strata", label="PAIR, predicted outcomes as strata",
                       group="practical", unbiased=True, allocation="pair_strata",
                       design="stratified", step_design=True))
# the difference estimator at Neyman's allocation, one budget for the batch: Bernoulli over
# the unfinished, HT advantages corrected by the predictions as baselines
register_row(VertexRow(key="pair_dr", label="PAIR, difference estimator (Neyman, batch)",
                       group="practical", unbiased=True, allocation="pair_dr",
                       estimator="difference"))


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class TwoStageRow(AuditRow):
    """An inner prefix row run on a uniform subset of ``width(...)`` candidates, the only ones
    given prefixes, at the suffix budget that spends full-width PAIR's total generated tokens
    (:mod:`pairht.audit.two_stage`; exact by enumerating the subsets). Subclasses name the
    ``inner`` row; the width is :func:`~pairht.audit.two_stage.narrow_width`."""

    estimator: str = "two_stage"
    width: str = "subset"
    inner: str = ""
    # Its total generated tokens are matched (as small-group GRPO's), not the suffix ratio:
    # narrowing spends on suffixes what it saves on prefixes.
    cost_matched: bool = False
    # A candidate outside the subset is not generated at all, finished prefix or not.
    keeps_finished: bool = False

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        t0 = time.perf_counter()
        P, G = pop.n_prompts, pop.group_size
        # the width rule reads only token counts; at most MAX_SUBSETS subsets, which the audit
        # enumerates
        g_prime = G * whole_group_ratio(pop, cfg.budget_ratio)
        w = narrow_width(G, g_prime, max_subsets=MAX_SUBSETS)
        ts = plan_two_stage(pop, cfg, w, ROWS[self.inner])
        n = ts.n_subsets
        # a candidate's inclusion: P(i in S) E[pi_i(S) | i in S] = (1/n) sum_{S ni i} pi_i(S)
        pi = np.zeros((P, G))
        for s, S in enumerate(ts.subsets):
            pi[:, S] += ts.plan.pi[s::n]
        return Plan(pi=pi / n, alloc_seconds=time.perf_counter() - t0, cost=suffix_costs(pop),
                    build_seconds=ts.plan.build_seconds, budget_scale=ts.config.budget_ratio,
                    notes=[f"width {w} of G = {G} (G' = {g_prime:.3f}); "
                           f"{self.inner} among them at suffix budget "
                           f"{ts.config.budget_ratio:.4f}"],
                    token_scale=full_cost(pop), prefix_tokens=w / G * prefix_tokens(pop),
                    stages=ts)


# the difference estimator with prefixes for a uniform subset only, half way from G toward
# small-group GRPO's G' (narrow_width), its suffixes bought with the prefixes it does not
# generate
register_row(TwoStageRow(key="pair_dr_narrow",
                         label="PAIR, difference estimator at a narrower width",
                         group="practical", unbiased=True, inner="pair_dr"))
register_row(default_design_row(key="pair_score_norm_cps",
                                label="PAIR (full width), score-norm proxy", group="proxy",
                                unbiased=True, proxy="score_norm"))
register_row(VertexRow(key="pair_score_norm", label="PAIR, Bernoulli, score-norm proxy",
                       group="proxy", unbiased=True, proxy="score_norm"))
register_row(VertexRow(key="pair_energy", label="PAIR, Bernoulli, length-energy proxy",
                       group="proxy", unbiased=True, proxy="length_energy"))
# PAIR's fixed-size program at sizes n and n+1 (mixed) with conditional HT (the weights of the
# size drawn; unavailable where a prompt affords no size of two)
for _key, _label, _proxy, _design in (
        ("pair_cps", "PAIR, conditional Poisson", None, "conditional_poisson"),
        ("pair_energy_cps", "PAIR, length-energy, conditional Poisson", "length_energy",
         "conditional_poisson"),
        ("pair_drr", "PAIR, dependent rounding (rand. order)", None,
         "randomized_dependent_rounding")):
    register_row(VertexRow(key=_key, label=_label, group="fixed_size", unbiased=True,
                           proxy=_proxy, design=f"mixed_size:{_design}", size="auto",
                           estimator="conditional_ht"))
register_row(VertexRow(key="marginal_only_cps", label="Marginal-only, conditional Poisson",
                       group="fixed_size", design="mixed_size:conditional_poisson",
                       weighting="marginal_only", size="auto"))
# inverse pair weights clipped (biased), and self-normalised (Hajek: a ratio, biased)
for _w in (10.0, 20.0, 50.0):
    register_row(VertexRow(key=f"pair_clip{_w:.0f}", label=f"PAIR, clipped w_max={_w:.0f}",
                           group="practical", weighting="clipped", w_max=_w))
register_row(VertexRow(key="pair_hajek", label="PAIR, Hajek", group="practical",
                       weighting="hajek"))


#: The paper's Table audit-matrix rows, in its order.
PAPER_ROWS = tuple(k for k, r in ROWS.items() if r.group == "paper")
#: The trivial designs a user would try instead of PAIR (the summary's comparators).
BASELINE_ROWS = tuple(k for k, r in ROWS.items() if r.group == "baseline")


def select_rows(keys: list[str] | tuple[str, ...] | None = None) -> list[AuditRow]:
    """Rows by key (``None``: all registered rows), validating every key."""
    if keys is None:
        return list(ROWS.values())
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        raise ValueError(f"unknown audit rows {unknown}; registered rows are {list(ROWS)}")
    return [ROWS[k] for k in keys]
