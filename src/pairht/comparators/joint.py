r"""``pair_joint``: one token budget split across prompts *and* within groups.

The batch estimator is the sum of the per-prompt pair-HT estimators, drawn from independent
designs, so its variance is the sum of the per-prompt variances. With PAIR's variance proxy
``f_b(pi_b)`` (:func:`pairht.allocation.allocate`) the joint program is

.. math:: \min_{\pi_1..\pi_B} \sum_b f_b(\pi_b)\quad\text{s.t.}\quad
          \sum_b c_b^\top \pi_b \le T,\quad \pi_{\min} \le \pi_{bi} \le 1,

convex and separable except for the shared budget ``T = sum_b budget_b``. Three steps:

1. **Value curves and the batch split.** The value curve ``V_b(beta) = min {f_b(pi) : c_b^T
   pi <= beta}`` is the optimal value of a convex program as a function of its right-hand
   side, hence convex and nonincreasing in ``beta`` (and constant beyond the full cost). It
   is evaluated on the grid ``beta_b(m) = floor_b + m delta``, ``delta = (T - sum floor) /
   M``, and the grid steps are split by the exact integer allocation (:func:`split_grid`):
   the *batch split* ``beta*``, within one step ``delta`` per prompt of the continuous
   optimum of the curves. The curves are predictions, and a prompt predicted to agree
   (``p_hat`` near 0, or near 1, for every candidate) has a flat one: the split takes its
   budget, which a prompt with one success of 16 pays for with a variance many times larger
   (its success is continued with ``pi`` near ``pi_min``). So the curves read the
   predictions through a prior on the rate (:func:`rate_prior_predictions`): ``p~ = (G p_hat
   + w / 2) / (G + w)``, the ``G`` predictions counted as ``G`` outcomes plus ``w``
   pseudo-outcomes at rate 1/2 (default ``w = 1/2``; a prompt predicted to fail everywhere
   is valued as one expecting a quarter of a success among its 16). The group level keeps
   ``p_hat``.
2. **Robust move** (:func:`robust_split`). The budgets are taken on the segment from the
   per-prompt split ``beta0`` (each prompt at its own budget) to ``beta*``, at the point that
   minimises the worst case of the batch's variance change when every prompt's predicted
   change may be wrong by a factor ``kappa``:

   .. math:: \beta(\lambda) = \beta^0 + \lambda (\beta^* - \beta^0),\qquad
             R(\lambda) = \sum_b \max\{\kappa\, \Delta_b(\lambda),\ \Delta_b(\lambda) / \kappa\},
             \qquad \Delta_b(\lambda) = V_b(\beta_b(\lambda)) - V_b(\beta^0_b),

   ``lambda`` on the grid ``0, 1/L, ..., 1``. ``R`` is convex in ``lambda`` and ``R(0) =
   0``, so ``R(lambda*) <= 0``: if each prompt's true variance loss is at most ``kappa``
   times its predicted loss and each true gain at least ``1 / kappa`` of the predicted gain,
   the batch's true variance is at most the per-prompt split's. Budget moves only where the
   predicted gains exceed ``kappa^2`` times the predicted losses; within the prediction
   noise (``lambda* = 0``) every prompt keeps its own budget, exactly PAIR's per-prompt rule
   (default ``kappa = 2``).
3. **Group level.** PAIR's continuation program at ``beta_b(lambda*)`` for each prompt:
   here (:func:`pair_joint_allocate`) the Bernoulli program and a Bernoulli draw, ``rho_ij =
   pi_i pi_j``; through the step (``size="auto"``,
   :class:`pairht.comparators.allocators.PairJointAllocator`) PAIR's default, the step's
   ``"pair"`` rule at these budgets: the fixed-size program at the two sizes neighbouring
   uniform SRSWOR's, drawn as their exact mixture of conditional Poisson components. (The
   Bernoulli design alone has about 1.36x the default's exact MSE on the SmolLM2 population
   at equal tokens, so only the default can match per-prompt ``pair``.)

The prompt-level split is a deterministic function of the predictions (``p_hat``, ``c_hat``)
and the budgets, fixed before any suffix is sampled, so its "inclusion probability" is 1 and
the candidate-level ``pi`` (and joints) are exact: the pair-HT estimator is exactly
design-unbiased for every group's complete pair target (every ``pi >= pi_min > 0``). The
budgets ``beta(lambda)`` are a convex combination of two splits that each respect every
prompt's floor and full cost and spend at most ``T``, so they do too.

Finished candidates are complete and free: in the value curves they enter with a negligible
cost (``1e-9`` of the group's largest suffix cost) and ``pi = 1``; the group level fixes them
at ``pi = 1`` exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairht.comparators._integer import dp_allocation, greedy_allocation, is_concave

if TYPE_CHECKING:  # annotation only: pairht.allocation is imported lazily at call time
    from pairht.allocation.proxies import ProxyKind

#: Cost of a finished candidate relative to its group's largest suffix cost (see module doc).
FINISHED_COST = 1e-9
#: Default robustness factor of the batch split (:func:`robust_split`): every prompt's
#: predicted variance change may be wrong by this factor.
KAPPA = 2.0
#: Default weight ``w`` of the rate prior of the split's value curves
#: (:func:`rate_prior_predictions`): pseudo-outcomes at rate 1/2 beside the ``G`` predictions.
RATE_PRIOR = 0.5
#: Default number of steps ``L`` of the segment from the per-prompt to the batch split.
LINE_STEPS = 16
#: A robust gain below this fraction of the per-prompt split's predicted variance is noise.
_GAIN_RTOL = 1e-9


@dataclass(frozen=True)
class JointAllocation:
    """Result of :func:`pair_joint_allocate`; every array has a leading batch axis ``B``."""

    pi: np.ndarray          # (B, G) continuation probabilities (finished = 1)
    budgets: np.ndarray     # (B,) token budget given to each prompt's unfinished candidates
    steps: np.ndarray       # (B,) grid steps m_b of the batch split beta*
    curves: np.ndarray      # (B, M + 1) V_b on the grid
    objective: np.ndarray   # (B,) PAIR proxy at pi
    status: np.ndarray      # (B,) solver status of the group-level solve
    converged: np.ndarray   # (B,) bool
    delta: float            # grid step in tokens
    base: np.ndarray | None = None        # (B,) per-prompt split beta0
    target: np.ndarray | None = None      # (B,) batch split beta*
    move: float = 1.0                     # lambda*: budgets = base + move (target - base)


def _costs(c_hat: np.ndarray, finished: np.ndarray) -> np.ndarray:
    cmax = np.where(finished, 0.0, c_hat).max(axis=1, keepdims=True)
    cmax = np.where(cmax > 0, cmax, 1.0)
    return np.where(finished, FINISHED_COST * cmax, c_hat)


def split_grid(curves: np.ndarray) -> np.ndarray:
    r"""The exact split of ``W`` grid steps over prompts with value curves ``curves``.

    ``curves[b, m]`` is prompt ``b``'s variance proxy with ``m`` grid steps of budget
    (``m = 0 .. W``); the split minimises ``sum_b curves[b, m_b]`` subject to
    ``sum_b m_b = W``: greedy on the marginal decreases ``curves[b, m] - curves[b, m + 1]``
    where every curve is discretely convex (exact, :func:`greedy_allocation`; steps of zero
    gain are spent too, so the whole budget is placed), dynamic programming where solver
    noise breaks convexity (:func:`dp_allocation`), whose leftover steps (gains <= 0 at its
    optimum) then go one at a time to the prompt whose next step costs least.

    Examples
    --------
    >>> split_grid(np.array([[4.0, 2.0, 1.0], [1.0, 0.5, 0.4]])).tolist()
    [2, 0]
    """
    B, W1 = curves.shape
    W = W1 - 1
    gains = curves[:, :-1] - curves[:, 1:]
    lower = np.zeros(B, dtype=np.int64)
    upper = np.full(B, W, dtype=np.int64)
    if is_concave(gains, np.ones_like(gains, dtype=bool)):
        return greedy_allocation(gains, lower, upper, W, spend_zero_gain=True)
    steps = dp_allocation(-curves, lower, upper, W)
    while steps.sum() < W:  # the whole budget is spent: top up where it hurts least
        nxt = np.where(steps < W, gains[np.arange(B), np.minimum(steps, W - 1)], -np.inf)
        steps[int(np.argmax(nxt))] += 1
    return steps


def rate_prior_predictions(p_hat: np.ndarray, weight: float = RATE_PRIOR) -> np.ndarray:
    r"""The predictions as the value curves of the batch split read them: ``p~ = (G p_hat + w
    / 2) / (G + w)`` over each group of ``G``.

    Each candidate's prediction counts as ``G`` outcomes of its prompt's rate, beside ``w``
    pseudo-outcomes at rate 1/2 (a ``Beta(w / 2, w / 2)`` prior): no prompt is predicted to
    agree more surely than ``G`` outcomes of it could show. ``w = 0`` leaves ``p_hat``.

    Examples
    --------
    >>> rate_prior_predictions(np.array([[0.0, 0.0, 0.5, 1.0]]), 0.5).round(4).tolist()
    [[0.0556, 0.0556, 0.5, 0.9444]]
    """
    w = check_rate_prior(weight)
    p = np.asarray(p_hat, dtype=np.float64)
    G = p.shape[-1]
    return p if w == 0.0 else (G * p + 0.5 * w) / (G + w)


def check_rate_prior(weight: Any) -> float:
    """``rate_prior`` checked: a finite number ``>= 0``."""
    if isinstance(weight, (bool, np.bool_)) or not isinstance(weight, (int, float, np.number)) \
            or not np.isfinite(weight) or weight < 0:
        raise ValueError(f"rate_prior must be a finite number >= 0 (pseudo-outcomes at rate "
                         f"1/2 in the split's value curves); got {weight!r}")
    return float(weight)


def check_kappa(kappa: Any) -> float:
    """``kappa`` checked: a number ``>= 1`` (``inf`` allowed: the per-prompt split)."""
    if isinstance(kappa, (bool, np.bool_)) or not isinstance(kappa, (int, float, np.number)) \
            or np.isnan(kappa) or kappa < 1:
        raise ValueError(f"kappa must be a number >= 1 (the factor by which a prompt's "
                         f"predicted variance change may be wrong; inf: every prompt at its "
                         f"own budget); got {kappa!r}")
    return float(kappa)


def robust_split(value: Callable[[np.ndarray], np.ndarray], base: np.ndarray,
                 target: np.ndarray, *, kappa: float = KAPPA, steps: int = LINE_STEPS,
                 ) -> tuple[np.ndarray, float]:
    r"""The budgets between the per-prompt split ``base`` and the batch split ``target`` whose
    worst-case variance change is least, when every prompt's predicted change may be wrong by
    a factor ``kappa``.

    On ``beta(lambda) = base + lambda (target - base)``, ``lambda = 0, 1/L, ..., 1`` (``L =
    steps``), with ``Delta_b(lambda) = V_b(beta_b(lambda)) - V_b(base_b)`` (``V = value``),

    .. math:: R(\lambda) = \sum_b \max\{\kappa\,\Delta_b(\lambda),\ \Delta_b(\lambda)/\kappa\}

    is the batch's largest variance change over all true curves whose change from
    ``base`` is, prompt by prompt, at most ``kappa`` times a predicted loss and at least
    ``1 / kappa`` of a predicted gain. ``R`` is convex in ``lambda`` (``V_b`` convex, ``max``
    convex nondecreasing) and ``R(0) = 0``; the smallest minimiser is taken, and ``lambda =
    0`` unless ``R`` falls below ``-1e-9 sum_b V_b(base_b)`` (a gain within solver noise is
    none). Hence ``R(lambda*) <= 0``: the predicted losses ``L`` (the positive ``Delta_b``)
    are at most ``1 / kappa^2`` of the predicted gains ``Q``, so the predicted change
    ``L - Q <= -(1 - kappa^{-2}) Q <= 0`` is never above the per-prompt split's either.
    ``kappa = 1``: ``target`` itself; ``kappa = inf``: ``base``.

    Parameters
    ----------
    value : callable
        ``value(levels)`` with ``levels`` ``(B, W)`` budgets: ``(B, W)`` predicted variances
        (each prompt's value curve, nonincreasing and convex in its budget).
    base, target : (B,) ndarray
        The per-prompt split and the batch split (feasible: floors, full costs, total).
    kappa : float
        Robustness factor ``>= 1``.
    steps : int
        Segment steps ``L >= 1``.

    Returns
    -------
    (budgets, lambda) : ((B,) ndarray, float)

    Examples
    --------
    >>> value = lambda beta: np.array([[4.0], [1.0]]) / beta   # two prompts, V_b = k_b / beta
    >>> base, target = np.array([1.0, 1.0]), np.array([4 / 3, 2 / 3])
    >>> robust_split(value, base, target, kappa=1.0)[1]        # the batch split itself
    1.0
    >>> robust_split(value, base, target, kappa=1.5)[1]        # part of the way
    0.4375
    >>> robust_split(value, base, target, kappa=3.0)[1]        # gains within kappa^2: none
    0.0
    """
    k = check_kappa(kappa)
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) \
            or steps < 1:
        raise ValueError(f"steps must be a positive int; got {steps!r}")
    base = np.asarray(base, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    if k == 1.0:
        return target.copy(), 1.0
    if np.isinf(k) or np.array_equal(base, target):
        return base.copy(), 0.0
    lam = np.arange(steps + 1) / steps
    levels = base[:, None] + lam[None, :] * (target - base)[:, None]
    V = np.asarray(value(levels), dtype=np.float64)
    d = V - V[:, :1]
    R = np.where(d > 0, k * d, d / k).sum(axis=0)
    j = int(np.argmin(R))
    if not R[j] < -_GAIN_RTOL * float(np.abs(V[:, 0]).sum()):
        j = 0
    return levels[:, j].copy(), float(lam[j])


def pair_joint_allocate(
    p_hat: np.ndarray,
    c_hat: np.ndarray,
    finished: np.ndarray,
    total_budget: float,
    *,
    pi_min: float = 0.08,
    grid: int = 64,
    proxy: ProxyKind = "disagreement",
    covariance_term: bool = True,
    prompt_budget: np.ndarray | None = None,
    kappa: float = KAPPA,
    rate_prior: float = RATE_PRIOR,
    line_steps: int = LINE_STEPS,
) -> JointAllocation:
    r"""Two-level PAIR allocation of ``total_budget`` suffix tokens over a batch.

    Parameters
    ----------
    p_hat, c_hat : (B, G) ndarrays
        Predicted success and remaining tokens (``c > 0`` on unfinished candidates).
    finished : (B, G) bool ndarray
        Finished prefixes (complete, free, ``pi = 1``).
    total_budget : float
        Expected suffix tokens for the whole batch, at least ``pi_min`` times the batch's
        unfinished cost.
    pi_min : float
        PAIR's probability floor.
    grid : int
        Number of grid steps ``M`` of the batch split.
    proxy, covariance_term
        Passed to :func:`pairht.allocation.allocate` (value curves) and to the group level.
    prompt_budget : (B,) ndarray, optional
        The per-prompt split ``beta0`` (each prompt's own budget, clipped to its floor and full
        cost); default ``total_budget`` in proportion to each prompt's unfinished cost.
    kappa : float
        Robustness of the move from ``beta0`` to the batch split (module doc, step 2):
        ``1`` the batch split, ``inf`` the per-prompt split, default :data:`KAPPA`.
    rate_prior : float
        Pseudo-outcomes ``w`` at rate 1/2 in the value curves (:func:`rate_prior_predictions`,
        module doc, step 1; ``0``: the predictions as they are), default :data:`RATE_PRIOR`.
    line_steps : int
        Steps ``L`` of that segment.

    Returns
    -------
    JointAllocation

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[0.5, 0.5, 0.5], [0.9, 0.9, 0.9]])
    >>> res = pair_joint_allocate(p, np.full((2, 3), 10.0), np.zeros((2, 3), bool), 30.0,
    ...                           kappa=1.0)
    >>> bool(res.budgets[0] > res.budgets[1])   # the uncertain prompt gets more
    True
    >>> res = pair_joint_allocate(p, np.full((2, 3), 10.0), np.zeros((2, 3), bool), 30.0)
    >>> res.budgets.tolist(), res.move          # within a factor 2 of noise: each its own
    ([15.0, 15.0], 0.0)
    """
    from pairht.allocation import allocate
    from pairht.allocation.proxies import proxy_terms
    from pairht.allocation.solver import proxy_value

    if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)) or grid < 1:
        raise ValueError(f"grid must be a positive int; got {grid!r}")
    check_kappa(kappa)
    p_hat = np.asarray(p_hat, dtype=np.float64)
    p_curve = rate_prior_predictions(p_hat, rate_prior)
    c_hat = np.asarray(c_hat, dtype=np.float64)
    finished = np.asarray(finished, dtype=bool)
    B, G = p_hat.shape
    c = _costs(c_hat, finished)
    unf_cost = np.where(finished, 0.0, c_hat).sum(axis=1)
    eps_cost = np.where(finished, c, 0.0).sum(axis=1)
    floor = pi_min * unf_cost
    full = unf_cost
    T = float(total_budget)
    if T < floor.sum() * (1 - 1e-12):
        raise ValueError(f"total_budget must be at least the floor's cost pi_min * (unfinished "
                         f"cost) = {floor.sum()!r}; got {T!r}")
    if prompt_budget is None:
        tot = float(full.sum())
        base = full * (T / tot) if tot > 0 else np.zeros(B)
    else:
        base = np.asarray(prompt_budget, dtype=np.float64)
        if base.shape != (B,) or not np.all(np.isfinite(base)) or \
                np.any(base < floor * (1 - 1e-12)):
            raise ValueError(f"prompt_budget must be (B,) = ({B},) finite budgets, each at "
                             f"least its prompt's floor pi_min * (unfinished cost)")
    base = np.clip(base, floor, full)
    delta = max(T - floor.sum(), 0.0) / grid
    levels = np.minimum(floor[:, None] + delta * np.arange(grid + 1)[None, :], full[:, None])
    active = unf_cost > 0

    def value(lv: np.ndarray) -> np.ndarray:
        """Predicted variance (Bernoulli program value) of every prompt at budgets ``lv``."""
        out = np.zeros(lv.shape)
        if active.any():
            # every finished candidate at pi = 1 costs eps_cost; the floor puts the rest at
            # pi_min
            beta = np.maximum(lv + eps_cost[:, None], pi_min * c.sum(axis=1)[:, None])
            W = lv.shape[1]
            pa, ca = p_curve[active], c[active]
            res = allocate(np.broadcast_to(pa, (W, *pa.shape)),
                           np.broadcast_to(ca, (W, *ca.shape)),
                           beta[active].T, pi_min=pi_min, proxy=proxy,
                           covariance_term=covariance_term, fallback=True)
            out[active] = res.objective.T
        return out

    curves = value(levels)
    steps = split_grid(curves)
    target = levels[np.arange(B), steps]
    budgets, move = robust_split(value, base, target, kappa=kappa, steps=line_steps)
    pi = np.ones((B, G))
    status = np.full(B, "full", dtype=object)
    conv = np.ones(B, dtype=bool)
    a, b = proxy_terms(p_hat, proxy, covariance_term)
    if active.any():
        sol = allocate(p_hat[active], c[active],
                       np.maximum(budgets[active] + eps_cost[active],
                                  pi_min * c[active].sum(axis=1)),
                       pi_min=pi_min, proxy=proxy, covariance_term=covariance_term,
                       fallback=True)
        pi[active] = sol.pi
        status[active] = sol.status
        conv[active] = sol.converged
    pi = np.where(finished, 1.0, pi)
    return JointAllocation(pi=pi, budgets=budgets, steps=steps, curves=curves,
                           objective=proxy_value(pi, a, b), status=status.astype(str),
                           converged=conv, delta=delta, base=base, target=target, move=move)
