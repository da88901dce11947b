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
    # The scale t: every breakpoint's cost at once is O(m G^2) memory, fine for the step's
    # groups; one prompt-level problem over a whole batch (G in the tens of thousands) takes
    # the O(G log G) sorted route instead. Both find the same exact t.
    if m * G * G <= _DENSE_ENTRIES:
        t = _scale_dense(w, c, budget, lo, pos)
    else:
        t = np.array([_scale_sorted(w[i], c[i], float(budget[i]), lo[i], pos[i])
                      for i in range(m)])
    pi = np.where(pos, np.clip(t[:, None] * w, lo, 1.0), lo)
    # Remainder (only when every positive-weight unit is at 1): over the zero-weight units.
    rest = budget - np.einsum("mg,mg->m", c, pi)
    zero_c = np.sum(np.where(pos, 0.0, c), axis=1)
    # A positive remainder beyond rounding means the positive-weight units are saturated.
    need = (rest > 1e-13 * budget) & (zero_c > 0)
    for r in np.flatnonzero(need):
        z = ~pos[r]
        pi[r, z] = _lift(lo[r, z], c[r, z], float(rest[r]))
    return pi


def _lift(lo: np.ndarray, c: np.ndarray, extra: float) -> np.ndarray:
    """``min(1, lo_i + s)`` at the one common lift ``s`` that spends ``extra`` more:
    ``sum_i c_i min(1 - lo_i, s) = extra`` (units capped at 1 pass the rest to the others)."""
    caps = 1.0 - lo
    order = np.argsort(caps, kind="stable")
    caps_s, c_s = caps[order], c[order]
    before = np.concatenate([[0.0], np.cumsum(c_s * caps_s)])[:-1]  # units already capped
    tail = np.cumsum(c_s[::-1])[::-1]  # cost of the units still lifting
    g = before + caps_s * tail  # spend when the lift reaches each cap
    k = int(np.searchsorted(g, extra, side="left"))
    if k >= caps_s.size:
        return np.ones_like(lo)
    s = (extra - before[k]) / tail[k] if tail[k] > 0 else caps_s[k]
    return np.minimum(1.0, lo + s)


#: Above this many ``m G^2`` entries :func:`fill_to_budget` takes the sorted route per problem.
_DENSE_ENTRIES = 4_000_000


def _scale_dense(w: np.ndarray, c: np.ndarray, budget: np.ndarray, lo: np.ndarray,
                 pos: np.ndarray) -> np.ndarray:
    """The water level ``t`` of every problem, from the cost at every breakpoint at once."""
    m, G = c.shape
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
    return np.asarray(t)


def _scale_sorted(w: np.ndarray, c: np.ndarray, budget: float, lo: np.ndarray,
                  pos: np.ndarray) -> float:
    """The water level ``t`` of one problem in O(G log G): the cost
    ``f(t) = sum_i c_i clip(t w_i, lo_i, 1)`` at the sorted breakpoints from cumulative sums,
    ``f(t) = sum_{a_i > t} c_i lo_i + t sum_{a_i <= t < b_i} c_i w_i + sum_{b_i <= t} c_i``
    with ``a_i = lo_i / w_i``, ``b_i = 1 / w_i`` (zero-weight units sit at their floor)."""
    wp, cp, lp = w[pos], c[pos], lo[pos]
    a, b = lp / wp, 1.0 / wp
    oa, ob = np.argsort(a, kind="stable"), np.argsort(b, kind="stable")
    a_s, b_s = a[oa], b[ob]
    clo_a = np.concatenate([[0.0], np.cumsum((cp * lp)[oa])])
    cw_a = np.concatenate([[0.0], np.cumsum((cp * wp)[oa])])
    cw_b = np.concatenate([[0.0], np.cumsum((cp * wp)[ob])])
    c_b = np.concatenate([[0.0], np.cumsum(cp[ob])])
    fixed = float(np.sum(np.where(pos, 0.0, c * lo)))
    bps = np.sort(np.concatenate([a, b]))
    if bps.size == 0:
        return 0.0
    na = np.searchsorted(a_s, bps, side="right")  # units with a_i <= t
    nb = np.searchsorted(b_s, bps, side="right")  # units with b_i <= t
    cost = fixed + (clo_a[-1] - clo_a[na]) + bps * (cw_a[na] - cw_b[nb]) + c_b[nb]
    if budget < cost[0]:
        return 0.0
    k = int(np.sum(cost <= budget)) - 1
    slope = float(cw_a[na[k]] - cw_b[nb[k]])  # on (t_k, t_k+1): linear units
    t = float(bps[k]) if slope <= 0.0 or k == bps.size - 1 else \
        float(bps[k] + (budget - cost[k]) / slope)
    # The cumulative sums subtract large partial sums; two Newton steps on the direct O(G)
    # cost (exact on a linear segment) bring t to the dense route's rounding.
    for _ in range(2):
        lin = (t * wp > lp) & (t * wp < 1.0)
        d_slope = float(np.sum(cp[lin] * wp[lin]))
        if d_slope <= 0.0:
            break
        direct = fixed + float(np.sum(cp * np.clip(t * wp, lp, 1.0)))
        t += (budget - direct) / d_slope
    return t


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
