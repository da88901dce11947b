r"""The framework-neutral PAIR step: predictions -> plan (``pi``, draw, exact joints, metrics).

After phase 1 (prefixes), one call turns the batch's predictions into the design of phase 2::

    inputs  = StepInputs(p_hat, c_hat, finished, budget)        # or StepInputs.from_ratio
    plan    = plan_continuations(inputs, rng=rng)               # pi, selected, joint, metrics
    ... continue plan.selected, score them -> rewards (NaN where not selected) ...
    adv     = pairht.pair_advantages(rewards, plan.selected, plan.joint)

Every probability in the plan exists before any reward does, which is what makes the
pair Horvitz-Thompson estimator design-unbiased (PAIR paper, Theorem 2) for every group whose
pairs all have ``rho_ij > 0``. The rules of this package keep every unfinished ``pi`` at or
above ``pi_min`` and draw designs with every joint positive, with any design of the registry.
The prompt-level comparators (``"vip"``, ``"hora"``, ``"duet"``) run with ``min_rollouts=1``
by default in the step (every prompt continues at least one candidate, so every pair is
positive: exact); 0 is the rule as read from the paper, and the step refuses a plan it leaves
with a prompt of no continuation (:mod:`pairht.comparators.allocators`). In general
:func:`plan_continuations` refuses (``ValueError``) any plan with a group whose joint of two
candidates is 0, unless ``anchor_pair=True`` repairs it: such a group's estimate would be
biased.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pairht._validation import RNGLike, as_generator, check_pairs_positive
from pairht.allocation.inputs import StepInputs, check_inputs
from pairht.designs import Design
from pairht.designs.anchored import AnchoredPair
from pairht.designs.registry import step_design_kind
from pairht.estimators import n_pairs
from pairht.step.allocators import ALLOCATORS, expected_cost, get_allocator
from pairht.step.embedding import WithFinished, fixed_base, unfinished_design, unfinished_mixture
from pairht.step.inputs import shrink_predictions

#: PAIR's default rule (issue 14, chosen by the audit at equal realised cost; docs/step.md):
#: the fixed-size program at the two sizes neighbouring uniform SRSWOR's, mixed, with the
#: disagreement proxy; the audit's ``pair`` row reads these.
DEFAULT_SIZE = "auto"
DEFAULT_PROXY = "disagreement"


@dataclass
class ContinuationPlan:
    r"""The logged design of one batch, before any reward exists.

    Attributes
    ----------
    pi : (B, G) ndarray
        Exact first-order inclusion probabilities of the design drawn from (finished: 1).
    selected : (B, G) ndarray of bool
        The realised draw ``J`` (finished: True): continue these.
    joint : (B, G, G) ndarray
        Exact ``rho_ij = P(J_i = J_j = 1)``, diagonal ``pi``; feed it to
        :func:`pairht.pair_advantages` with ``selected``.
    status : (B,) ndarray of str
        The allocator's per-prompt status (``"optimal"``, ``"symmetric"``, ``"full"``,
        ``"fallback_uniform"``, ``"all_finished"``, ...).
    converged : (B,) ndarray of bool
    metrics : dict of str to float
        The step's logged quantities (:func:`plan_metrics`).
    allocator : str
    design : str
        The registry name of the design over the unfinished candidates (after
        :func:`~pairht.designs.registry.step_design_kind`).
    pi_alloc : (B, G) ndarray
        The allocator's ``pi`` (equal to ``pi`` unless ``anchor_pair`` raised it).
    info : dict
        The allocator's per-prompt info (``kkt_residual``, ``fallback_used``,
        ``unspent_budget``, ...).
    inputs : StepInputs
        The inputs the allocator saw (after shrinkage).
    """

    pi: np.ndarray
    selected: np.ndarray
    joint: np.ndarray
    status: np.ndarray
    converged: np.ndarray
    metrics: dict[str, float]
    allocator: str
    design: str = "bernoulli"
    pi_alloc: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)
    inputs: StepInputs | None = None


def plan_continuations(
    inputs: StepInputs,
    *,
    allocator: str = "pair",
    design: str | None = None,
    rng: RNGLike,
    pi_min: float = 0.08,
    size: int | str | None = DEFAULT_SIZE,
    proxy: str = DEFAULT_PROXY,
    covariance_term: bool = True,
    anchor_pair: bool = False,
    skill_success: float = 1.0,
    skill_cost: float = 1.0,
    **allocator_options: Any,
) -> ContinuationPlan:
    r"""Allocate, build the design and draw which candidates to continue, for a whole batch.

    1. Shrink the predictions toward the group mean by the heads' skill
       (:func:`~pairht.step.inputs.shrink_predictions`; skill 0 makes every allocator uniform
       among the unfinished candidates).
    2. ``pi = allocator.pi(inputs)`` (:data:`~pairht.step.ALLOCATORS`), realised accounting:
       finished candidates ``pi = 1`` at no cost, ``sum_{i unfinished} c_i pi_i <= budget``.
       The default, ``"pair"`` at ``size="auto"``, solves PAIR's program at the two sizes
       neighbouring uniform SRSWOR's expected size over the unfinished candidates
       (:class:`~pairht.step.allocators.PairAllocator`).
    3. Per prompt, the design over the *unfinished* candidates, embedded with the finished
       ones always in (:class:`~pairht.step.embedding.WithFinished`: ``rho_ij = pi_j`` for
       finished ``i``): where the allocator solved two sizes, the exact mixture of its two
       components (:func:`~pairht.step.embedding.unfinished_mixture`); otherwise ``design``
       over them (:func:`~pairht.step.embedding.unfinished_design`: a fixed-size kind takes
       its size over them, mixing the two neighbouring sizes at a non-integer expected size);
       a group of a sized rule that affords no size of at least two is drawn Bernoulli.
       Optionally a uniformly drawn anchor pair (:class:`~pairht.designs.anchored.AnchoredPair`)
       over the ``G`` candidates.
    4. ``selected ~ design`` with ``rng``; ``joint = design.joint()`` (exact).

    Parameters
    ----------
    inputs : StepInputs
    allocator : str
        A name of :data:`~pairht.step.ALLOCATORS` (``"pair"``, ``"uniform"``, ``"srswor"``,
        ``"pointwise"``, ``"full"``, the comparators ...).
    design : str, optional
        A design registry name (:data:`pairht.designs.DESIGNS` or
        :data:`~pairht.designs.registry.STEP_ALIASES`); ``None``: the allocator's own
        (``"pair"`` with a size and ``"srswor"``: conditional Poisson over the unfinished
        candidates; ``"pair"`` with ``size=None``: Bernoulli).
    rng : int, numpy.random.Generator or None
        The only source of randomness (random orders, the draw, the anchor).
    pi_min : float
        Floor of every unfinished candidate's ``pi`` (positivity), in (0, 1].
    size : "auto" (default), None or int
        ``"auto"``: each rule's own size; for ``"pair"`` the fixed-size program at the two
        sizes neighbouring ``S = k min(1, budget / sum_u c_u)`` (``k`` unfinished), mixed
        (PAIR's default; with a ``design`` that is not fixed-size, the Bernoulli program).
        ``None``: ``"pair"``'s Bernoulli program (with a fixed-size ``design``, its ``pi``
        drawn by the mixture of the two neighbouring sizes). An int ``n``: ``"pair"`` with
        ``sum_{unfinished} pi = n`` per prompt, clipped to the unfinished count and to the
        largest affordable size. Rules without a size refuse an int.
    proxy, covariance_term
        ``"pair"``'s edge proxy and shared-vertex term (:func:`pairht.allocation.allocate`).
    anchor_pair : bool
        Force a uniformly drawn pair of the ``G`` candidates into every draw (exact joints):
        every ``rho_ij > 0``, whatever the allocator's ``pi``.
    skill_success, skill_cost : float in [0, 1]
        Measured held-out skill of the success and cost heads.
    **allocator_options
        Passed to the allocator (e.g. ``warm_start``, ``score_norm``, ``rollout_budget``).

    Returns
    -------
    ContinuationPlan

    Raises
    ------
    ValueError
        If a group of the plan has two candidates with ``rho_ij = 0`` (its pair-HT estimate
        would be biased) and ``anchor_pair`` is off: e.g. a prompt-level comparator run with
        ``min_rollouts=0`` that continues ``k_b = 0`` of a prompt's ``U_b >= 1`` unfinished
        candidates. The message names the allocator, the prompt ``b``, ``k_b``, ``U_b`` and
        the fix (``min_rollouts >= 1``, the comparators' default in the step, or
        ``anchor_pair=True``).

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.step import StepInputs, plan_continuations
    >>> inputs = StepInputs.from_ratio(
    ...     p_hat=[[0.1, 0.5, 0.9, 0.5]], c_hat=[[100.0, 400.0, 0.0, 300.0]],
    ...     finished=[[False, False, True, False]], budget_ratio=0.5)
    >>> plan = plan_continuations(inputs, rng=0)
    >>> plan.pi[0, 2], bool(plan.selected[0, 2])     # finished: kept, free
    (np.float64(1.0), True)
    >>> round(plan.metrics["expected_suffix_cost"], 6), plan.metrics["budget"]
    (400.0, 400.0)
    >>> plan.info["fixed_size"].tolist()  # 3 unfinished: S = 1.5 < 2, no fixed size, Bernoulli
    [False]
    """
    check_inputs(inputs)
    if not isinstance(anchor_pair, (bool, np.bool_)):
        raise TypeError(f"anchor_pair must be a bool; got {anchor_pair!r}")
    alloc = get_allocator(allocator)
    gen = as_generator(rng)
    used = shrink_predictions(inputs, skill_success, skill_cost)
    sized = ALLOCATORS.capabilities(allocator).takes_size
    if isinstance(size, str) and size == "auto" and design is not None and sized and \
            fixed_base(step_design_kind(design)) is None:
        size = None  # "auto" with a design of random size: the program of that design
    size_opt = {"size": size} if sized or not (isinstance(size, str) and size == "auto") else {}
    pi_alloc, info = alloc.pi(used, pi_min=pi_min, proxy=proxy,
                              covariance_term=covariance_term, **size_opt, **allocator_options)
    pi_alloc = _check_allocator_pi(allocator, pi_alloc, used)
    kind = step_design_kind(design if design is not None else
                            str(info.get("design", "bernoulli")))
    B, G = used.shape
    pi = np.empty((B, G))
    joint = np.empty((B, G, G))
    selected = np.empty((B, G), dtype=bool)
    for b in range(B):
        d = info_group_design(kind, pi_alloc[b], used.finished[b], info, b, gen,
                              anchor_pair=bool(anchor_pair))
        pi[b] = d.pi
        joint[b] = d.joint()
        selected[b] = d.sample(gen)
    # never a silent biased group: every pair of every group must be observable
    k = info.get("k")  # a prompt-level rule's continuations per prompt, named in the refusal
    check_pairs_positive(allocator, joint, used.finished,
                         k if k is not None and np.shape(k) == (B,) else None, anchor=True)
    status = np.asarray(info.get("status", np.full(B, "optimal")), dtype=object).reshape(B)
    converged = np.asarray(info.get("converged", np.ones(B, dtype=bool)), dtype=bool).reshape(B)
    plan = ContinuationPlan(pi=pi, selected=selected, joint=joint, status=status,
                            converged=converged, metrics={}, allocator=allocator, design=kind,
                            pi_alloc=pi_alloc, info=info, inputs=used)
    plan.metrics = plan_metrics(plan, skill_success=skill_success, skill_cost=skill_cost)
    return plan


def group_design(kind: str, pi: np.ndarray, finished: np.ndarray, rng: RNGLike = None,
                 anchor_pair: bool = False,
                 components: tuple[np.ndarray, np.ndarray, float] | None = None) -> Design:
    """One group's design over its ``G`` candidates: ``kind`` over the unfinished ones,
    finished ones always in, optionally an anchor pair (see :func:`plan_continuations`).

    ``components`` ``(pi_lo, pi_hi, weight_hi)`` (over the ``G`` candidates, finished 1):
    the fixed-size ``kind`` at sizes ``n`` and ``n + 1`` with these marginals, mixed
    (:func:`~pairht.step.embedding.unfinished_mixture`); ``pi`` is then their mixture."""
    fin = np.asarray(finished, dtype=bool)
    unf = ~fin
    if components is not None and unf.any():
        lo, hi, f = components
        base: Design | None = unfinished_mixture(kind, lo[unf], hi[unf], f, rng)
    else:
        base = unfinished_design(kind, pi[unf], rng) if unf.any() else None
    design: Design = WithFinished(base, fin)
    if anchor_pair:
        design = AnchoredPair(design)
    return design


def info_group_design(kind: str, pi: np.ndarray, finished: np.ndarray, info: dict[str, Any],
                      b: int, rng: RNGLike = None, anchor_pair: bool = False) -> Design:
    """Prompt ``b``'s design as the step builds it from an allocator's ``info`` (the one
    per-group design choice, shared with the audit): the two solved sizes of a fixed-size
    ``kind`` mixed where the group has them (``info["fixed_size"][b]``), Bernoulli where a
    sized rule's group affords no size of at least two, else ``kind`` over the unfinished
    candidates (:func:`group_design`). ``pi`` and ``finished`` are the group's ``(G,)``."""
    two_sizes = fixed_base(kind) is not None and "pi_lo" in info
    fixed = info.get("fixed_size")
    if two_sizes and fixed is not None and bool(np.asarray(fixed)[b]):
        comps = (info["pi_lo"][b], info["pi_hi"][b], float(info["weight_hi"][b]))
        return group_design(kind, pi, finished, rng, anchor_pair=anchor_pair, components=comps)
    if two_sizes and info.get("sized", False):
        kind = "bernoulli"  # a sized rule's group that affords no size >= 2
    return group_design(kind, pi, finished, rng, anchor_pair=anchor_pair)


def _check_allocator_pi(name: str, pi: Any, inputs: StepInputs) -> np.ndarray:
    arr = np.asarray(pi, dtype=np.float64)
    if arr.shape != inputs.shape:
        raise ValueError(f"allocator {name!r} returned pi of shape {arr.shape}; it must be "
                         f"(B, G) = {inputs.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ValueError(f"allocator {name!r} returned pi outside [0, 1]")
    if np.any(arr[inputs.finished] != 1.0):
        raise ValueError(f"allocator {name!r} returned pi < 1 for a finished candidate; "
                         f"realised accounting keeps every finished candidate (pi = 1)")
    return arr


def plan_metrics(plan: ContinuationPlan, skill_success: float = 1.0,
                 skill_cost: float = 1.0) -> dict[str, float]:
    r"""The step's logged quantities, all known before any reward.

    Token accounting (sums over the batch, realised rule: finished candidates cost 0):
    ``budget``, ``expected_suffix_cost`` = ``sum pi_i c_i`` over unfinished,
    ``unspent_budget`` (the allocator's), ``full_suffix_cost`` = ``sum c_i`` over unfinished,
    ``predicted_suffix_fraction`` = expected / full, ``selected_suffix_cost`` = ``sum c_i``
    over selected unfinished, ``prefix_tokens`` (if given). Design (means per group):
    ``completed_vertices`` = ``E|J| = sum pi``, ``selected`` = ``|J|``, ``expected_edges`` =
    ``sum_{i<j} rho_ij``, ``observed_edges``; ``min_joint`` = ``min_{i<j} rho_ij``,
    ``max_weight`` = ``max 1/rho_ij`` over observed edges (``M W_ij`` of the exact weights),
    ``ess`` (Kish, mean per group), ``pi_mean``, ``pi_min`` (over unfinished). Solver:
    ``solver_residual`` (max KKT residual), ``fallbacks``, ``unconverged``, ``sizes_clipped``
    (groups whose requested fixed size was not affordable). Inputs:
    ``finished_free`` (fraction of finished candidates), ``skill_success``, ``skill_cost``.
    """
    from pairht.estimators import edge_weights, ess

    inp = plan.inputs
    assert inp is not None  # set by plan_continuations
    pi, joint, sel = plan.pi, plan.joint, plan.selected
    B, G = pi.shape
    unf = inp.unfinished
    exp_cost = expected_cost(inp, plan.pi_alloc if plan.pi_alloc is not None else pi)
    info = plan.info
    unspent = np.asarray(info.get("unspent_budget", inp.budget - exp_cost), dtype=np.float64)
    iu = np.triu_indices(G, 1)
    pairs = joint[:, iu[0], iu[1]]
    k = sel.sum(axis=1)
    obs = sel[:, iu[0]] & sel[:, iu[1]]
    weights = edge_weights(sel, joint)
    full = float(inp.full_cost.sum())
    exp_total = float(exp_cost.sum())
    kkt = np.asarray(info.get("kkt_residual", np.zeros(B)), dtype=np.float64)
    out = {
        "budget": float(inp.budget.sum()),
        "expected_suffix_cost": exp_total,
        "unspent_budget": float(unspent.sum()),
        "full_suffix_cost": full,
        "predicted_suffix_fraction": exp_total / full if full > 0 else 0.0,
        "selected_suffix_cost": float(np.where(sel & unf, inp.c_hat, 0.0).sum()),
        "completed_vertices": float(pi.sum(axis=1).mean()),
        "selected": float(k.mean()),
        "expected_edges": float(pairs.sum(axis=1).mean()),
        "observed_edges": float(n_pairs(k).mean()),
        "min_joint": float(pairs.min()),
        "max_weight": float((1.0 / pairs[obs]).max()) if obs.any() else 0.0,
        "ess": float(np.mean(ess(weights))),
        "pi_mean": float(pi.mean()),
        "pi_min": float(pi[unf].min()) if unf.any() else 1.0,
        "solver_residual": float(kkt.max()),
        "fallbacks": float(np.sum(info.get("fallback_used", np.zeros(B, dtype=bool)))),
        "unconverged": float(np.sum(~plan.converged)),
        "sizes_clipped": float(np.sum(info.get("size_clipped", np.zeros(B, dtype=bool)))),
        "finished_free": float(inp.finished.mean()),
        "skill_success": float(skill_success),
        "skill_cost": float(skill_cost),
    }
    if inp.prefix_tokens is not None:
        out["prefix_tokens"] = float(inp.prefix_tokens.sum())
    return out
