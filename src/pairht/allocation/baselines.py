r"""Pointwise allocations PAIR is compared against, at the same expected suffix cost.

Both return ``pi`` in ``[pi_min, 1]`` with ``sum_i c_i pi_i = budget`` exactly (up to float
rounding) whenever ``budget <= sum_i c_i``; above the full cost they return ``pi = 1``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite
from pairht.allocation.solver import uniform_share, validate_costs, validate_problem


def water_fill(w: ArrayLike, c: ArrayLike, budget: ArrayLike, pi_min: float) -> np.ndarray:
    r"""``pi_i = clip(t w_i, pi_min, 1)`` with the scalar ``t`` that spends ``budget`` exactly.

    The cost ``C(t) = sum_i c_i clip(t w_i, pi_min, 1)`` is piecewise linear and nondecreasing
    in ``t`` with breakpoints ``pi_min / w_i`` and ``1 / w_i``; the segment containing
    ``budget`` is found among the sorted breakpoints and ``t`` solved linearly on it (no
    bisection, so the cost is matched to rounding). Units with ``w_i = 0`` stay at ``pi_min``;
    if the budget exceeds what the others can absorb (all at 1), the remainder is spread
    uniformly over the zero-weight units (the same rule with ``w = 1`` on them).

    Parameters
    ----------
    w : (m, G) array_like    nonnegative finite weights
    c : (m, G) array_like    positive costs
    budget : (m,) or float   at least the floor's cost ``pi_min * sum(c)``
    pi_min : float           floor in (0, 1]

    Returns
    -------
    (m, G) ndarray

    Examples
    --------
    >>> water_fill([[1.0, 3.0]], [[100.0, 100.0]], 100.0, 0.1).tolist()
    [[0.25, 0.75]]
    """
    c, budget, pi_min = validate_costs(c, budget, pi_min, name="c")
    w = check_finite("w", w)
    if c.ndim != 2 or w.shape != c.shape:
        raise ValueError(f"w and c must both have shape (m, G) (a flat batch); got w "
                         f"{w.shape}, c {c.shape}")
    if np.any(w < 0):
        raise ValueError(f"w must be nonnegative (allocation weights); got min "
                         f"{float(w.min())!r}")
    return fill_to_budget(w, c, budget, pi_min)


def fill_to_budget(w: np.ndarray, c: np.ndarray, budget: np.ndarray,
                   floor: float | np.ndarray) -> np.ndarray:
    r"""The water-filling of :func:`water_fill` on checked flat arrays: Neyman's allocation
    ``pi_i = clip(t w_i, floor_i, 1)`` at the ``t`` that spends ``budget``, the one
    implementation every Neyman-type rule calls.

    The arguments are trusted (callers validate them): ``w`` ``(m, G)`` finite and
    nonnegative, ``c`` ``(m, G)`` finite and nonnegative (a zero-cost unit is free),
    ``budget`` ``(m,)`` at least ``sum_i c_i floor_i``, ``floor`` a float or ``(m, G)`` in
    ``[0, 1]`` (``0`` allowed: no floor). Units with ``w_i = 0`` stay at their floor unless
    the others are all at 1, when the rest of the budget lifts them by one common amount.

    Examples
    --------
    >>> import numpy as np
    >>> fill_to_budget(np.array([[1.0, 3.0]]), np.array([[100.0, 100.0]]), np.array([100.0]),
    ...                0.0).tolist()
    [[0.25, 0.75]]
    """
    m, G = c.shape
    lo = np.broadcast_to(np.asarray(floor, dtype=np.float64), (m, G))
    budget = np.minimum(budget, c.sum(axis=1))
    pos = w > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        bps = np.concatenate([np.where(pos, lo / w, np.inf), np.where(pos, 1.0 / w, np.inf)],
                             axis=1)
    bps = np.sort(bps, axis=1)
    bps_f = np.where(np.isfinite(bps), bps, 0.0)
    # Cost at every breakpoint, (m, 2G): O(G^2) per problem, vectorised.
    lv = np.clip(bps_f[:, :, None] * w[:, None, :], lo[:, None, :], 1.0)
    cost_bp = np.einsum("mkg,mg->mk", lv, c)
    cost_bp = np.where(np.isfinite(bps), cost_bp, np.inf)
    k = np.sum(cost_bp <= budget[:, None], axis=1) - 1  # last breakpoint at or under budget
    k = np.clip(k, 0, 2 * G - 1)
    tk = bps_f[np.arange(m), k]
    ck = cost_bp[np.arange(m), k]
    # Units strictly inside the box on the segment, judged at its midpoint: at a breakpoint
    # itself, (floor / w) * w can round below the floor.
    tn = bps[np.arange(m), np.minimum(k + 1, 2 * G - 1)]
    tmid = np.where(np.isfinite(tn) & (tn > tk), 0.5 * (tk + tn), 2.0 * tk + 1.0)
    mid = pos & (tmid[:, None] * w > lo) & (tmid[:, None] * w < 1.0)
    slope = np.sum(np.where(mid, c * w, 0.0), axis=1)
    below = budget < cost_bp[:, 0]  # budget before the first breakpoint: all at the floor
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(slope > 0, tk + (budget - ck) / slope, tk)
    t = np.where(below, 0.0, t)
    pi = np.where(pos, np.clip(t[:, None] * w, lo, 1.0), lo)
    # Remainder (only when every positive-weight unit is at 1): over the zero-weight units.
    rest = budget - np.einsum("mg,mg->m", c, pi)
    zero_c = np.sum(np.where(pos, 0.0, c), axis=1)
    # A positive remainder beyond rounding means the positive-weight units are saturated.
    need = (rest > 1e-13 * budget) & (zero_c > 0)
    if need.any():
        lvl = np.minimum(1.0, lo[need] + (rest[need] / zero_c[need])[:, None])
        pi[need] = np.where(pos[need], pi[need], lvl)
    return pi


def uniform_allocation(c_hat: ArrayLike, budget: ArrayLike, pi_min: float = 0.08) -> np.ndarray:
    r"""Uniform continuation probability at the budget: ``pi_i = min(1, budget / sum_j c_j)``.

    Parameters
    ----------
    c_hat : (..., G) array_like     predicted suffix costs, positive
    budget : float or (...)         expected suffix-token budget (at least ``pi_min sum c``)
    pi_min : float                  floor in (0, 1]

    Returns
    -------
    (..., G) ndarray with ``sum_i c_i pi_i = min(budget, sum_i c_i)``.

    Examples
    --------
    >>> uniform_allocation([100.0, 300.0], budget=200.0).tolist()
    [0.5, 0.5]
    """
    c, bud, _lo = validate_costs(c_hat, budget, pi_min)
    t = uniform_share(bud, c.sum(axis=-1))
    return np.broadcast_to(t[..., None], c.shape).copy()


def pointwise_allocation(
    p_hat: ArrayLike, c_hat: ArrayLike, budget: ArrayLike, pi_min: float = 0.08
) -> np.ndarray:
    r"""Neyman-style pointwise allocation ``pi_i ∝ sqrt(p_i (1 - p_i) / c_i)`` at the budget.

    This minimises ``sum_i p_i (1 - p_i) / pi_i`` subject to ``sum_i c_i pi_i = budget``
    (Neyman allocation of per-vertex Bernoulli variances) and ignores the pair structure.
    Probabilities are clipped into ``[pi_min, 1]`` by exact water-filling
    (:func:`water_fill`), so the expected cost equals ``min(budget, sum c)``.

    Examples
    --------
    >>> pointwise_allocation([0.5, 0.5], [100.0, 400.0], budget=250.0).round(4).tolist()
    [0.8333, 0.4167]
    """
    p, c, bud, lo = validate_problem(p_hat, c_hat, budget, pi_min)
    G = c.shape[-1]
    w = np.sqrt(p * (1.0 - p) / c)
    pi = fill_to_budget(w.reshape(-1, G), c.reshape(-1, G), bud.reshape(-1), lo)
    return pi.reshape(c.shape)
