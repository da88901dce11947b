r"""``pair_joint``: one token budget split across prompts *and* within groups.

The batch estimator is the sum of the per-prompt pair-HT estimators, drawn from independent
designs, so its variance is the sum of the per-prompt variances. With PAIR's variance proxy
``f_b(pi_b)`` (:func:`pairht.allocation.allocate`) the joint program is

.. math:: \min_{\pi_1..\pi_B} \sum_b f_b(\pi_b)\quad\text{s.t.}\quad
          \sum_b c_b^\top \pi_b \le T,\quad \pi_{\min} \le \pi_{bi} \le 1,

convex and separable except for the shared budget ``T = sum_b budget_b``. Two levels:

1. **Prompt level.** The value curve ``V_b(beta) = min {f_b(pi) : c_b^T pi <= beta}`` is the
   optimal value of a convex program as a function of its right-hand side, hence convex and
   nonincreasing in ``beta`` (and constant beyond the full cost). It is evaluated on the grid
   ``beta_b(m) = floor_b + m delta``, ``delta = (T - sum floor) / M``, and the grid steps are
   split by the exact integer allocation (greedy marginal decrease; exact for the
   discretely convex sampled curves, with dynamic programming if solver noise breaks
   monotonicity of the gains). The grid optimum is within one step ``delta`` per prompt of
   the continuous optimum.
2. **Group level.** PAIR's continuation program at ``beta_b`` for each prompt, sampled by
   Bernoulli (Poisson) design: ``rho_ij = pi_i pi_j``.

The prompt-level split is a deterministic function of the predictions (``p_hat``, ``c_hat``),
fixed before any suffix is sampled, so its "inclusion probability" is 1 and the
candidate-level ``pi`` are exact: the pair-HT estimator is exactly design-unbiased for every
group's complete pair target (every ``pi >= pi_min > 0``).

Finished candidates are complete and free: they enter the solve with a negligible cost
(``1e-9`` of the group's largest suffix cost) and are then set to ``pi = 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pairht.comparators._integer import dp_allocation, greedy_allocation, is_concave

if TYPE_CHECKING:  # annotation only: pairht.allocation is imported lazily at call time
    from pairht.allocation.proxies import ProxyKind

#: Cost of a finished candidate relative to its group's largest suffix cost (see module doc).
FINISHED_COST = 1e-9


@dataclass(frozen=True)
class JointAllocation:
    """Result of :func:`pair_joint_allocate`; every array has a leading batch axis ``B``."""

    pi: np.ndarray          # (B, G) continuation probabilities (finished = 1)
    budgets: np.ndarray     # (B,) token budget given to each prompt's unfinished candidates
    steps: np.ndarray       # (B,) grid steps m_b
    curves: np.ndarray      # (B, M + 1) V_b on the grid
    objective: np.ndarray   # (B,) PAIR proxy at pi
    status: np.ndarray      # (B,) solver status of the group-level solve
    converged: np.ndarray   # (B,) bool
    delta: float            # grid step in tokens


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
        Number of grid steps ``M`` of the prompt-level split.
    proxy, covariance_term
        Passed to :func:`pairht.allocation.allocate`.

    Returns
    -------
    JointAllocation

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[0.5, 0.5, 0.5], [0.9, 0.9, 0.9]])
    >>> res = pair_joint_allocate(p, np.full((2, 3), 10.0), np.zeros((2, 3), bool), 30.0)
    >>> bool(res.budgets[0] > res.budgets[1])   # the uncertain prompt gets more
    True
    """
    from pairht.allocation import allocate
    from pairht.allocation.proxies import edge_proxy, shared_vertex_term
    from pairht.allocation.solver import proxy_value

    if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)) or grid < 1:
        raise ValueError(f"grid must be a positive int; got {grid!r}")
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
    delta = max(T - floor.sum(), 0.0) / grid
    levels = np.minimum(floor[:, None] + delta * np.arange(grid + 1)[None, :], full[:, None])
    active = unf_cost > 0
    # every finished candidate at pi = 1 costs eps_cost; the floor puts the rest at pi_min
    beta = levels + eps_cost[:, None]
    beta = np.maximum(beta, pi_min * c.sum(axis=1)[:, None])
    curves = np.zeros((B, grid + 1))
    if active.any():
        pa, ca = p_hat[active], c[active]
        res = allocate(np.broadcast_to(pa, (grid + 1, *pa.shape)),
                       np.broadcast_to(ca, (grid + 1, *ca.shape)),
                       beta[active].T, pi_min=pi_min, proxy=proxy,
                       covariance_term=covariance_term, fallback=True)
        curves[active] = res.objective.T
    steps = split_grid(curves)
    budgets = levels[np.arange(B), steps]
    pi = np.ones((B, G))
    status = np.full(B, "full", dtype=object)
    conv = np.ones(B, dtype=bool)
    obj = np.zeros(B)
    a = edge_proxy(p_hat, kind=proxy)
    b = shared_vertex_term(a) if covariance_term else np.zeros(p_hat.shape)
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
    obj = proxy_value(pi, a, b)
    return JointAllocation(pi=pi, budgets=budgets, steps=steps, curves=curves, objective=obj,
                           status=status.astype(str), converged=conv, delta=delta)
