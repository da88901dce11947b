r"""Allocation rules of the step, one small registered object each.

An allocator maps a batch's :class:`~pairht.step.StepInputs` to continuation probabilities
``pi`` of shape ``(B, G)`` over *all* candidates (finished ones exactly 1) and per-prompt
``info``: ``status`` (str), ``converged`` (bool), and where it applies ``kkt_residual``,
``fallback_used``, ``unspent_budget`` and ``design`` (the registry name of the design the
rule means, used when the caller names none). :data:`ALLOCATORS` is the only source of
allocator names; :func:`register_allocator` adds one.

Every built-in rule spends the budget on the unfinished candidates only (realised
accounting):

* ``"full"`` -- ``pi = 1`` (no generation saved; the budget is ignored);
* ``"uniform"`` -- ``pi_i = min(1, B / sum_u c_u)`` among unfinished, Bernoulli design;
* ``"srswor"`` -- the same ``pi``, fixed-size uniform design (SRSWOR of the unfinished, at a
  non-integer expected size the exact mixture of the two neighbouring sizes);
* ``"pointwise"`` -- Neyman-type ``pi_i ∝ sqrt(p_i (1 - p_i) / c_i)`` among unfinished
  (:func:`pairht.allocation.pointwise_allocation`);
* ``"pair"`` -- PAIR's convex program with the finished candidates fixed at 1 (their edges
  folded into ``b``), by default at fixed size: the two sizes neighbouring uniform SRSWOR's,
  mixed (:mod:`pairht.step.pair_program`);
* ``"pair_batch"`` -- one budget for the batch: split across prompts by their PAIR value
  curves, then ``"pair"`` in each prompt at its share (same sizes, proxies and designs);
* ``"pair_strata"`` -- predicted successes and failures among unfinished as two strata,
  SRSWOR within each at Neyman's sizes (:mod:`pairht.step.strata`, design
  :class:`~pairht.designs.Stratified`);
* ``"pair_dr"`` -- Neyman's rule for the difference estimator, one budget for the batch
  (:mod:`pairht.step.neyman`, Bernoulli design, estimator
  :mod:`pairht.estimators.difference`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pairht._validation import check_pi_min
from pairht.allocation.inputs import StepInputs
from pairht.allocation.solver import check_floor_cost
from pairht.registry import Registry


@runtime_checkable
class Allocator(Protocol):
    """One allocation rule: ``pi(inputs, **options) -> (pi, info)`` (see module doc)."""

    name: str

    def pi(self, inputs: StepInputs, **options: Any) -> tuple[np.ndarray, dict[str, Any]]:
        """``(B, G)`` probabilities over all candidates (finished = 1) and per-prompt info."""
        ...


@dataclasses.dataclass(frozen=True)
class AllocatorCapabilities:
    """What an allocator declares when it registers (read from
    ``ALLOCATORS.capabilities(name)``, never from the object).

    Attributes
    ----------
    takes_size : bool
        A rule of PAIR's program: it takes ``size`` (``plan_continuations`` passes
        ``"auto"``), ``proxy``, ``covariance_term`` and ``warm_start``.
    takes_score_norm : bool
        It weights edges by a predicted score norm, passed as ``score_norm=`` (``(B, G)``).
    takes_known_rewards : bool
        It reads the finished candidates' rewards before the draw, passed as ``known=``.
    estimator : str
        How its draw is estimated, a name of :data:`pairht.step.ESTIMATORS`: ``"ht"``
        (pair-HT with the run's weighting), ``"difference"``
        (:mod:`pairht.estimators.difference`) or ``"dppo"`` (pruned after the rewards).
    """

    takes_size: bool = False
    takes_score_norm: bool = False
    takes_known_rewards: bool = False
    estimator: str = "ht"


#: name -> allocator object; the only source of allocator names. The paper's comparators
#: arrive on the first read (:mod:`pairht.step.comparator_rules`, a loader): importing the
#: step does not import them, and they never import the step.
ALLOCATORS: Registry[Allocator] = Registry(
    "allocator", AllocatorCapabilities, loaders=("pairht.step.comparator_rules",))


def register_allocator(name: str, **capabilities: Any) -> Callable[[Any], Any]:
    """Decorator registering an allocator class (instantiated without arguments) or object
    under ``name``, with its :class:`AllocatorCapabilities` as keywords.

    Examples
    --------
    >>> import numpy as np
    >>> @register_allocator("half_doc_example")
    ... class Half:
    ...     name = "half_doc_example"
    ...     def pi(self, inputs, **options):
    ...         pi = np.where(inputs.finished, 1.0, 0.5)
    ...         return pi, {"status": np.full(pi.shape[0], "optimal")}
    >>> "half_doc_example" in ALLOCATORS, ALLOCATORS.capabilities("half_doc_example").estimator
    (True, 'ht')
    >>> del ALLOCATORS["half_doc_example"]
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str; got {name!r}")

    def add(obj: Any) -> Any:
        inst = obj() if isinstance(obj, type) else obj
        if not isinstance(inst, Allocator):
            raise TypeError(f"allocator {name!r} must have a name and a method "
                            f"pi(inputs, **options)")
        if inst.name != name:
            raise ValueError(f"allocator registered as {name!r} has name {inst.name!r}; they "
                             f"must agree")
        ALLOCATORS.register(name, inst, **capabilities)
        return obj

    return add


def get_allocator(name: str) -> Allocator:
    """The allocator registered as ``name`` (ValueError naming the registered ones)."""
    return ALLOCATORS.get(name)


def program_allocators() -> tuple[str, ...]:
    """The allocators that solve PAIR's program (``takes_size``): they take its ``size``,
    ``proxy``, ``covariance_term``, ``warm_start`` and solver options."""
    return tuple(sorted(ALLOCATORS.names(takes_size=True)))


#: The prefix rules a width choice weighs against small-group GRPO (allocator names, also
#: audit row keys): PAIR's default (each prompt at its own budget), one budget for the batch,
#: predicted outcomes as strata, and the difference estimator at Neyman's allocation
#: (:func:`pairht.audit.width_advice`, the audit's ``pair_width``, the trainer's
#: ``set_width``).
PREFIX_RULES: tuple[str, ...] = ("pair", "pair_batch", "pair_strata", "pair_dr")


def allocator_names() -> list[str]:
    """Every registered allocator name, the paper's comparators included (sorted)."""
    return sorted(ALLOCATORS)


# ------------------------------------------------------------------------------ helpers
def _info(B: int, status: str | np.ndarray, unspent: np.ndarray, design: str,
          **extra: Any) -> dict[str, Any]:
    st = np.broadcast_to(np.asarray(status, dtype=object), (B,)).copy()
    return {"status": st, "converged": np.ones(B, dtype=bool), "kkt_residual": np.zeros(B),
            "fallback_used": np.zeros(B, dtype=bool), "unspent_budget": unspent,
            "design": design, **extra}


#: Options of PAIR's program a rule passes through to the solver (besides its own keywords).
SOLVER_OPTIONS = frozenset({"score_norm", "energy", "tol", "max_iter"})


def check_solver_options(name: str, solver: dict[str, Any]) -> None:
    """TypeError naming the options of ``solver`` that PAIR's program rule ``name`` does not
    take (an unknown option is refused, not ignored)."""
    unknown = sorted(set(solver) - SOLVER_OPTIONS)
    if unknown:
        raise TypeError(f"allocator {name!r} got unexpected options {unknown}")


def check_floor(inputs: StepInputs, pi_min: float) -> float:
    r"""``pi_min`` checked, and every budget at least the floor's cost ``pi_min sum_u c_u``."""
    lo = check_pi_min(pi_min)
    check_floor_cost(inputs.budget, inputs.full_cost, lo, "sum of the unfinished candidates' c_hat")
    return lo


def expected_cost(inputs: StepInputs, pi: np.ndarray) -> np.ndarray:
    """``(B,)`` expected realised suffix cost ``sum_{i unfinished} c_i pi_i``."""
    return np.where(inputs.finished, 0.0, inputs.c_hat * pi).sum(axis=1)


def uniform_pi(inputs: StepInputs) -> np.ndarray:
    """``min(1, budget / sum_u c_u)`` (``inputs.share``) on unfinished candidates, 1 on
    finished ones."""
    return np.where(inputs.finished, 1.0, inputs.share[:, None])


#: Options ``plan_continuations`` passes to every allocator; a rule that does not use one
#: ignores it (they are the plan's defaults), any other option must be the rule's own.
COMMON_OPTIONS = frozenset({"proxy", "covariance_term"})


def _no_size(name: str, size: Any, common: dict[str, Any]) -> None:
    """Refuse a size and unknown options for a rule that has neither."""
    unknown = sorted(set(common) - COMMON_OPTIONS)
    if unknown:
        raise TypeError(f"allocator {name!r} got unexpected options {unknown}")
    if size is not None:
        raise ValueError(f"size must be None for allocator {name!r} (its size follows from the "
                         f"budget; use design='conditional_poisson' or allocator='srswor' for "
                         f"a fixed-size draw); got size={size!r}")


# ------------------------------------------------------------------------------ built-ins
@register_allocator("full")
class FullAllocator:
    """``pi = 1``: every candidate is completed (plain GRPO / RLOO)."""

    name = "full"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           **common: Any) -> tuple[np.ndarray, dict[str, Any]]:
        _no_size(self.name, size, common)
        check_pi_min(pi_min)  # validated for every rule, though pi = 1 never meets the floor
        pi = np.ones(inputs.shape)
        B = inputs.shape[0]
        return pi, _info(B, "full", inputs.budget - expected_cost(inputs, pi), "bernoulli")


@register_allocator("uniform")
class UniformAllocator:
    """Uniform among unfinished, Bernoulli: ``pi_u = min(1, budget / sum_u c_u)``."""

    name = "uniform"
    design = "bernoulli"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           **common: Any) -> tuple[np.ndarray, dict[str, Any]]:
        _no_size(self.name, size, common)
        check_floor(inputs, pi_min)
        pi = uniform_pi(inputs)
        status = np.where(inputs.n_unfinished == 0, "all_finished", "optimal")
        return pi, _info(inputs.shape[0], status, inputs.budget - expected_cost(inputs, pi),
                         self.design)


@register_allocator("srswor")
class SRSWORAllocator(UniformAllocator):
    """Fixed-size uniform among unfinished (SRSWOR; mixed sizes at a non-integer size)."""

    name = "srswor"
    design = "conditional_poisson"


@register_allocator("pointwise")
class PointwiseAllocator:
    """Neyman-type ``pi_i ∝ sqrt(p_i (1 - p_i) / c_i)`` among unfinished, at the budget."""

    name = "pointwise"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           **common: Any) -> tuple[np.ndarray, dict[str, Any]]:
        from pairht.allocation import pointwise_allocation

        _no_size(self.name, size, common)
        lo = check_floor(inputs, pi_min)
        pi = uniform_pi(inputs)  # groups with fewer than two unfinished: the only rule
        n_u = inputs.n_unfinished
        for k in np.unique(n_u[n_u >= 2]):  # one batched call per number of unfinished
            rows = np.flatnonzero(n_u == k)
            unf = inputs.unfinished[rows]
            p = inputs.p_hat[rows][unf].reshape(-1, k)
            c = inputs.c_hat[rows][unf].reshape(-1, k)
            sub = pointwise_allocation(p, c, inputs.budget[rows], lo)
            block = pi[rows]
            block[unf] = sub.reshape(-1)
            pi[rows] = block
        status = np.where(n_u == 0, "all_finished", "optimal")
        return pi, _info(inputs.shape[0], status, inputs.budget - expected_cost(inputs, pi),
                         "bernoulli")


@register_allocator("pair_strata", takes_score_norm=True)
class PairStrataAllocator:
    r"""PAIR's predictions as strata: predicted successes and failures drawn apart (SRSWOR
    within each, independently), sizes by Neyman's rule (:mod:`pairht.step.strata`).

    Among the unfinished candidates, ``p_hat >= 0.5`` and ``p_hat < 0.5`` are the strata;
    stratum ``h`` gets an expected size ``n_h`` proportional to ``N_h sqrt(mean e_i^2) /
    sqrt(mean c_h)`` (``e_i`` the expected number of candidates that disagree with ``i``),
    within its floor (``pi_h >= pi_min`` and a within-stratum joint ``>= pi_min^2``) and
    ``N_h``, at ``sum_h n_h mean(c_h) = budget``; with ``score_norm`` (``(B, G)`` predicted
    ``||s_i||``, the audit's ``m_hat``) ``e_i`` is weighted by it. Its design is
    :class:`~pairht.designs.Stratified` (SRSWOR within each level set of ``pi``), so every
    ``pi_ij`` is exact and positive. One stratum (uninformative predictions), or floors the
    budget cannot pay: uniform among unfinished with the same design, i.e. SRSWOR.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.step import StepInputs
    >>> x = StepInputs.from_ratio([[0.9, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]],
    ...                           np.full((1, 8), 10.0), np.zeros((1, 8), bool), 0.5)
    >>> pi, info = ALLOCATORS["pair_strata"].pi(x)
    >>> pi.round(3).tolist(), info["status"].tolist()   # the rarer class kept more often
    ([[0.802, 0.802, 0.399, 0.399, 0.399, 0.399, 0.399, 0.399]], ['stratified'])
    >>> round(float((pi * 10.0).sum()), 9)                 # the budget, spent exactly
    40.0
    """

    name = "pair_strata"
    design = "stratified"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           score_norm: np.ndarray | None = None, **common: Any
           ) -> tuple[np.ndarray, dict[str, Any]]:
        from pairht.step.strata import stratum_pi

        _no_size(self.name, size, common)
        m = _score_norm(inputs, score_norm)
        lo = check_floor(inputs, pi_min)
        B = inputs.shape[0]
        pi = np.ones(inputs.shape)
        status = np.empty(B, dtype=object)
        c = np.where(inputs.finished, 0.0, inputs.c_hat)
        for b in range(B):
            pi[b], status[b] = stratum_pi(inputs.p_hat[b], c[b], inputs.finished[b],
                                          float(inputs.budget[b]), lo,
                                          None if m is None else m[b])
        return pi, _info(B, status, inputs.budget - expected_cost(inputs, pi), self.design)


def _score_norm(inputs: StepInputs, score_norm: np.ndarray | None) -> np.ndarray | None:
    """``score_norm`` as a finite, nonnegative ``(B, G)`` array (ValueError naming it)."""
    if score_norm is None:
        return None
    m = np.asarray(score_norm, dtype=np.float64)
    if m.shape != inputs.shape or not np.all(np.isfinite(m)) or np.any(m < 0):
        raise ValueError(f"score_norm must be a finite, nonnegative (B, G) = {inputs.shape} "
                         f"array of predicted score norms; got shape {m.shape}"
                         + ("" if m.shape != inputs.shape else
                            " with a negative or non-finite entry"))
    return m


@register_allocator("pair_dr", estimator="difference", takes_score_norm=True,
                    takes_known_rewards=True)
class PairDifferenceAllocator:
    r"""Neyman allocation for the difference estimator, one budget for the batch
    (:mod:`pairht.step.neyman`).

    ``pi_i = clip(sqrt(w_i / (lambda c_hat_i)), pi_min, 1)`` over every unfinished candidate
    of the batch, ``w_i = E[c_i^2] m_i^2`` (the predicted energy of ``i``'s term of the pair
    gradient, ``m_i`` the predicted score norm ``score_norm``, 1 if not given), one
    ``lambda`` spending ``sum_b budget_b`` exactly. Bernoulli design, estimated with
    :func:`~pairht.estimators.difference.difference_advantages` and the predictions as
    baselines (exactly unbiased for any predictions while ``pi_min > 0``). ``known``
    (``(B, G)``, read where finished) gives the finished candidates' rewards.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.step import StepInputs
    >>> x = StepInputs.from_ratio([[0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0]],
    ...                           np.full((2, 4), 10.0), np.zeros((2, 4), bool), 0.5)
    >>> pi, info = ALLOCATORS["pair_dr"].pi(x)
    >>> pi.round(3).tolist()     # the prompt predicted to agree keeps its floor
    [[0.92, 0.92, 0.92, 0.92], [0.08, 0.08, 0.08, 0.08]]
    >>> round(float((pi * 10.0).sum()), 9)   # the batch's budget, spent exactly
    40.0
    """

    name = "pair_dr"
    design = "bernoulli"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           score_norm: np.ndarray | None = None, known: np.ndarray | None = None,
           **common: Any) -> tuple[np.ndarray, dict[str, Any]]:
        from pairht.step.neyman import coefficient_energy, neyman_pi

        _no_size(self.name, size, common)
        m = _score_norm(inputs, score_norm)
        if known is not None:
            kn = np.asarray(known, dtype=np.float64)
            if kn.shape != inputs.shape or not np.all(np.isfinite(kn[inputs.finished])):
                raise ValueError(f"known must be a (B, G) = {inputs.shape} array of rewards, "
                                 f"finite where finished; got shape {kn.shape}")
            known = kn
        lo = check_floor(inputs, pi_min)
        w = coefficient_energy(inputs.p_hat, inputs.finished, known)
        if m is not None:
            w = w * m**2
        c = np.where(inputs.finished, 0.0, inputs.c_hat)
        pi, status = neyman_pi(w, c, ~inputs.finished, float(inputs.budget.sum()), lo)
        B = inputs.shape[0]
        return pi, _info(B, status, inputs.budget - expected_cost(inputs, pi), self.design,
                         prompt_budget=expected_cost(inputs, pi))


@register_allocator("pair", takes_size=True)
class PairAllocator:
    r"""PAIR's convex continuation program with finished candidates fixed at ``pi = 1``.

    Minimises ``sum_{i<j} a_ij/(pi_i pi_j) + sum_i b_i/pi_i`` over the unfinished ``pi``
    with ``sum_u c_u pi_u <= budget`` and ``pi_min <= pi_u <= 1``. A finished ``f`` enters
    with ``pi_f = 1``, so its edges fold into the shared-vertex term: the program is solved
    exactly over the unfinished candidates with ``b'_i = b_i + sum_f a_if``
    (:mod:`pairht.step.pair_program`).

    ``size`` (:func:`~pairht.step.plan_continuations` passes ``"auto"`` by default, PAIR's
    default rule; called directly, the allocator solves what it is asked, ``None`` unless
    given):

    * ``"auto"`` -- fixed size at any budget: the program at the two sizes ``n = floor(S)``
      and ``n + 1`` neighbouring uniform SRSWOR's ``S = k min(1, budget / sum_u c_u)``
      (``k`` unfinished), each at the same budget per completion, mixed with weights
      ``1 - f`` and ``f = S - n``; ``info["pi_lo"]``, ``info["pi_hi"]``, ``info["weight_hi"]``
      hold the components the plan draws from (``MixedSize.from_components``). A group with
      ``S < max(2, ceil(k pi_min))`` gets the Bernoulli program and draw.
    * an int ``n`` -- ``sum_u pi_u = n``, clipped to ``k`` and to the largest affordable size
      (``info["size_clipped"]``); a group that affords no size gets the Bernoulli program.
    * ``None`` -- the Bernoulli program (no size row).

    Closed form (status ``"symmetric"``, no solve): when the unfinished candidates are
    exchangeable (equal ``p_hat``, ``c_hat`` and proxy inputs, e.g. after shrinkage with skill
    0) the program is symmetric and strictly convex, so its optimum is uniform:
    ``min(1, budget / sum_u c_u)`` (Bernoulli) or ``n / k`` (size ``n``).

    Options: ``pi_min``, ``proxy`` (``"disagreement"``, ``"score_norm"``, ``"energy"``,
    ``"length_energy"``: needs ``StepInputs.prefix_tokens``), ``covariance_term``, ``size``,
    ``warm_start`` ``(B, G)``, ``score_norm`` ``(B, G)``, ``energy`` ``(B, G, G)``, ``tol``,
    ``max_iter``.
    """

    name = "pair"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, proxy: str = "disagreement",
           covariance_term: bool = True, size: int | str | None = None,
           warm_start: np.ndarray | None = None, **solver: Any,
           ) -> tuple[np.ndarray, dict[str, Any]]:
        from pairht.step.pair_program import solve_pair

        # refused even when no group needs the solver (all closed form)
        check_solver_options(self.name, solver)
        lo = check_floor(inputs, pi_min)
        sol = solve_pair(inputs, pi_min=lo, proxy=proxy, covariance_term=covariance_term,
                         size=size, warm_start=warm_start, **solver)
        B = inputs.shape[0]
        info = _info(B, sol.status, inputs.budget - expected_cost(inputs, sol.pi),
                     "bernoulli" if size is None else "conditional_poisson",
                     size=sol.size, size_clipped=sol.size_clipped, pi_lo=sol.pi_lo,
                     pi_hi=sol.pi_hi, weight_hi=sol.weight_hi, fixed_size=sol.fixed_size,
                     sized=size is not None)
        for key in ("converged", "kkt_residual", "fallback_used"):
            info[key] = getattr(sol, key)
        return sol.pi, info


@register_allocator("pair_batch", takes_size=True)
class PairBatchAllocator:
    r"""PAIR with one suffix budget for the batch, split across prompts by PAIR's own proxy,
    robustly: never predicted worse than each prompt at its own budget.

    The batch estimator is the sum of independent per-prompt estimators, so its variance is
    the sum of theirs and one budget ``T = sum_b budget_b`` is best spent where a prompt's
    proxy falls fastest -- if the proxy is right. Three levels:

    1. **Batch split.** Prompt ``b``'s value curve ``V_b(beta)`` is the optimal value of PAIR's
       Bernoulli program (the ``"pair"`` rule with ``size=None``, same ``proxy`` and options)
       at budget ``beta``: convex and nonincreasing in ``beta`` (the optimal value of a
       convex program as a function of its right-hand side), on the predictions read through
       a prior on the rate, ``p~ = (G p_hat + w / 2) / (G + w)`` (``w = rate_prior``
       pseudo-outcomes at rate 1/2 beside the ``G`` predictions,
       :func:`pairht.comparators.joint.rate_prior_predictions`): a prompt predicted to agree
       is never valued as sure to. It is evaluated on the grid ``beta_b(m) = min(floor_b + m
       delta, full_b)``, ``floor_b = pi_min sum_u c_u`` (what every prompt must spend),
       ``delta = (min(T, sum_b full_b) - sum_b floor_b) / grid``, and the ``grid`` steps are
       split exactly (:func:`pairht.comparators.joint.split_grid`): ``beta*``.
    2. **Robust move** (:func:`pairht.comparators.joint.robust_split`). From the per-prompt
       split ``beta0_b = min(budget_b, full_b)`` towards ``beta*``, ``beta(lambda) = beta0 +
       lambda (beta* - beta0)``, to the ``lambda`` in ``0, 1/L, ..., 1`` (``L =
       line_steps``) minimising the worst-case variance change

       .. math:: R(\lambda) = \sum_b \max\{\kappa \Delta_b(\lambda),\
                 \Delta_b(\lambda)/\kappa\},\qquad
                 \Delta_b(\lambda) = V_b(\beta_b(\lambda)) - V_b(\beta^0_b),

       the batch's largest change when every prompt's true variance change may be off the
       predicted one by a factor ``kappa`` (a loss up to ``kappa`` times larger, a gain down
       to ``1 / kappa``). ``R(0) = 0``, so ``R(lambda*) <= 0``: under that error model the
       batch's variance is at most the per-prompt split's, and budget moves only where the
       predicted gains exceed ``kappa^2`` times the predicted losses. The value curves are
       predictions: a prompt predicted to agree (``p_hat`` near 0 for every candidate) has a
       flat curve, and the plain split (``kappa = 1``, ``rate_prior = 0``) takes its budget,
       which a prompt with one or two successes of 16 pays for with a many times larger
       variance (its success continued at ``pi`` near ``pi_min``; docs/step.md). ``kappa =
       inf`` is the per-prompt rule ``"pair"`` exactly.
    3. **Within a prompt.** The ``"pair"`` rule at ``budget_b = beta_b(lambda*)``, with its
       ``size`` (``plan_continuations`` passes ``"auto"``: PAIR's default fixed-size design).

    The split is a deterministic function of the predictions and budgets, fixed before any
    suffix is drawn, so every ``pi`` is exact and the pair-HT estimator stays unbiased (``pi
    >= pi_min``). ``beta(lambda)`` is a convex combination of two splits that each respect
    every prompt's floor and full cost and spend at most ``T``, so it does too. With
    ``size=None`` the batch's expected cost is ``sum_b beta_b`` (to the solver's tolerance):
    ``T``, less what the prompts' own budgets leave above their full costs at ``lambda <
    1``; a fixed-size program may leave part of a prompt's share unspent, as ``"pair"`` does
    (the size row binds first; ``info["unspent_budget"]``). Single prompts may spend more or
    less than their own ``budget_b`` (``info["prompt_budget"]`` holds their share;
    ``info["base_budget"]``, ``info["split_budget"]`` and ``info["split_move"]`` hold
    ``beta0``, ``beta*`` and ``lambda*``).

    Options: those of ``"pair"``, ``grid`` (64), ``kappa`` (``None``: 2,
    :data:`pairht.comparators.joint.KAPPA`), ``rate_prior`` (``None``: 1/2,
    :data:`~pairht.comparators.joint.RATE_PRIOR`) and ``line_steps`` (``None``: 16).

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.step import StepInputs
    >>> x = StepInputs.from_ratio([[0.5, 0.5, 0.5, 0.5], [0.99, 0.99, 0.99, 0.99]],
    ...                           np.full((2, 4), 10.0), np.zeros((2, 4), bool), 0.5)
    >>> pi, info = ALLOCATORS["pair_batch"].pi(x, grid=16, kappa=1.0, rate_prior=0.0)
    >>> bool(info["prompt_budget"][0] > info["prompt_budget"][1])  # plain: the uncertain prompt
    True
    >>> round(float((pi * 10.0).sum()), 6)                        # the batch's budget
    40.0
    >>> pi, info = ALLOCATORS["pair_batch"].pi(x, grid=16)         # the default, robust
    >>> info["prompt_budget"].tolist(), info["split_move"]         # gain within 2x: none
    ([20.0, 20.0], 0.0)
    """

    name = "pair_batch"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, proxy: str = "disagreement",
           covariance_term: bool = True, size: int | str | None = None, grid: int = 64,
           kappa: float | None = None, rate_prior: float | None = None,
           line_steps: int | None = None, warm_start: np.ndarray | None = None,
           **solver: Any) -> tuple[np.ndarray, dict[str, Any]]:
        from pairht.comparators.joint import (
            KAPPA,
            LINE_STEPS,
            RATE_PRIOR,
            check_kappa,
            rate_prior_predictions,
            robust_split,
            split_grid,
        )

        kappa = check_kappa(KAPPA if kappa is None else kappa)
        line_steps = LINE_STEPS if line_steps is None else line_steps
        prior = RATE_PRIOR if rate_prior is None else rate_prior

        check_solver_options(self.name, solver)  # before the curves are solved
        if isinstance(grid, (bool, np.bool_)) or not isinstance(grid, (int, np.integer)) \
                or grid < 1:
            raise ValueError(f"grid must be a positive int (steps of the batch's budget split "
                             f"across prompts); got {grid!r}")
        lo = check_floor(inputs, pi_min)
        B = inputs.shape[0]
        full = inputs.full_cost
        floor = lo * full
        total = min(float(inputs.budget.sum()), float(full.sum()))
        delta = max(total - float(floor.sum()), 0.0) / grid
        levels = np.minimum(floor[:, None] + delta * np.arange(grid + 1)[None, :], full[:, None])
        # the value curves read the predictions through the rate prior; the program keeps them
        read = dataclasses.replace(inputs, p_hat=rate_prior_predictions(inputs.p_hat, prior))
        curves = _program_curves(read, levels, lo, proxy, covariance_term, solver)
        target = levels[np.arange(B), split_grid(curves)]
        base = np.clip(inputs.budget, floor, full)
        budgets, move = robust_split(
            lambda lv: _program_curves(read, lv, lo, proxy, covariance_term, solver),
            base, target, kappa=kappa, steps=line_steps)
        share = inputs.with_budget(np.maximum(budgets, floor))
        pi, info = PairAllocator().pi(share, pi_min=lo, proxy=proxy,
                                      covariance_term=covariance_term, size=size,
                                      warm_start=warm_start, **solver)
        info["prompt_budget"] = budgets
        info["base_budget"] = base
        info["split_budget"] = target
        info["split_move"] = move
        info["unspent_budget"] = inputs.budget - expected_cost(inputs, pi)
        info["grid_step"] = delta
        return pi, info


def _program_curves(inputs: StepInputs, levels: np.ndarray, pi_min: float, proxy: str,
                    covariance_term: bool, solver: dict[str, Any]) -> np.ndarray:
    """``(B, W)`` optimal values of PAIR's Bernoulli program at the budgets ``levels``: every
    (level, prompt) one row of a stacked batch, one solve."""
    from pairht.allocation.kkt import proxy_value
    from pairht.step.pair_program import program_terms, solve_pair

    B, W = levels.shape

    def tile(x: Any) -> Any:  # every (level, prompt) as one row of a stacked batch, level-major
        return None if x is None else np.tile(np.asarray(x), (W,) + (1,) * (np.ndim(x) - 1))

    stacked = StepInputs(p_hat=tile(inputs.p_hat), c_hat=tile(inputs.c_hat),
                         finished=tile(inputs.finished), budget=levels.T.reshape(-1),
                         prefix_tokens=tile(inputs.prefix_tokens))
    extra = {k: tile(v) if k in ("score_norm", "energy") else v for k, v in solver.items()}
    sol = solve_pair(stacked, pi_min=pi_min, proxy=proxy, covariance_term=covariance_term,
                     size=None, **extra)
    a, b = program_terms(stacked, proxy, covariance_term, extra.get("score_norm"),
                         extra.get("energy"))
    return np.asarray(proxy_value(sol.pi, a, b)).reshape(W, B).T
