r"""The fixed-size route's geometry: least and largest cost of ``n`` units, the least-cost face.

On the slice ``S_n = {pi : sum_i pi_i = n, pi_min <= pi_i <= 1}`` the cost ``c . pi`` ranges
over ``[mincost(n), maxcost(n)]``: the least cost raises the cheapest units to 1 first (the rest
at ``pi_min``), the largest the dearest first. Hence, for a budget ``B``:

* ``B < mincost(n)``: no feasible point (the size is unaffordable);
* ``B >= maxcost(n)``: the budget row is implied by the size row on ``S_n`` and is dropped
  (with tied costs ``mincost = maxcost = n c``: the two rows are parallel);
* ``B = mincost(n)``: the feasible set is the *least-cost face*: units cheaper than the
  marginal cost ``t`` at 1, dearer ones at ``pi_min``, and the units tied at ``t`` free with
  their sum fixed (a single point unless two or more units tie at ``t``);
* otherwise both rows are needed.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite, check_pi_min
from pairht.allocation._checks import broadcast_budget

#: Relative tolerance under which a budget counts as exactly a boundary cost (floor, least or
#: largest cost of ``n`` units): the program is then solved on that boundary, and the point
#: returned may exceed the budget by this relative amount (rounding of the data).
EDGE_RTOL = 1e-12

#: A budget at most this much (relative) above the least cost of ``n`` units is solved on the
#: least-cost face: the feasible set is then a sliver of relative width <= 1e-9, where the
#: interior-point iteration loses the size row to rounding. The face point is feasible; its
#: objective is within that relative slack of the sliver's optimum.
FACE_RTOL = 1e-9


def _levels(n: np.ndarray, G: int, lo: float) -> tuple[np.ndarray, np.ndarray]:
    """Whole and fractional count of units raised from ``pi_min`` to 1 on ``S_n``."""
    extra = (n - G * lo) / (1.0 - lo) if lo < 1 else np.zeros_like(n)
    k = np.floor(extra + 1e-9)
    frac = np.where(extra - k > 1e-9, extra - k, 0.0)
    return k.astype(np.int64), frac


def extreme_cost(c: np.ndarray, lo: float, n: np.ndarray, largest: bool = False) -> np.ndarray:
    """``mincost(n)`` (or ``maxcost(n)``) over ``S_n`` for flat ``(m, G)`` costs, shape ``(m,)``.

    ``pi_min sum c + (1 - pi_min) (sum of the k cheapest (dearest) costs + frac * next)`` with
    ``k + frac = (n - G pi_min) / (1 - pi_min)``.
    """
    m, G = c.shape
    cs = np.sort(c, axis=1)
    if largest:
        cs = cs[:, ::-1]
    cum = np.concatenate([np.zeros((m, 1)), np.cumsum(cs, axis=1)], axis=1)
    k, frac = _levels(n, G, lo)
    k = np.clip(k, 0, G)
    rows = np.arange(m)
    nxt = cs[rows, np.minimum(k, G - 1)]
    return lo * cum[:, -1] + (1.0 - lo) * (cum[rows, k] + frac * nxt)


def min_cost_point(c: np.ndarray, lo: float, n: np.ndarray) -> np.ndarray:
    """The least-cost point of ``S_n`` (flat ``(m, G)``): cheapest units raised to 1 first.

    Units tied in cost with the marginal one share its fractional level equally (sorting is
    stable), so the point is deterministic and lies on the least-cost face.
    """
    point, _, _, _ = least_cost_face(c, lo, n)
    return point


def least_cost_face(
    c: np.ndarray, lo: float, n: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The least-cost face of ``S_n`` for flat ``(m, G)`` costs.

    Returns ``(point, free, t, tied)``: ``t`` is the marginal cost (the mid-point of the two
    neighbouring costs when no unit is fractional and none ties across the boundary: then the
    face is the single vertex ``point``); ``tied`` marks the units whose cost is ``t`` to
    ``EDGE_RTOL`` relative (costs that close count as equal, like budgets that close to a
    boundary cost: a difference of a few ulps must not decide the design); ``point`` has the
    cheaper units at 1, the dearer at ``pi_min`` and the tied group at a common level; ``free``
    marks the tied group where the face has dimension >= 1 (two or more tied units strictly
    between the bounds).
    """
    m, G = c.shape
    cs = np.sort(c, axis=1)
    k, frac = _levels(n, G, lo)
    rows = np.arange(m)
    kk = np.clip(k, 0, G - 1)
    km = np.clip(k - 1, 0, G - 1)
    across = (frac == 0) & (k >= 1) & (k < G) & (
        cs[rows, km] >= cs[rows, kk] * (1 - EDGE_RTOL))
    inside = frac > 0
    t = np.where(inside | across, cs[rows, kk], 0.5 * (cs[rows, km] + cs[rows, kk]))
    tied = np.abs(c - t[:, None]) <= EDGE_RTOL * t[:, None]
    cheaper = (c < t[:, None]) & ~tied
    dearer = (c > t[:, None]) & ~tied
    n_t = n - cheaper.sum(axis=1) - lo * dearer.sum(axis=1)
    cnt = tied.sum(axis=1)
    level = np.where(cnt > 0, n_t / np.maximum(cnt, 1), lo)
    point = np.where(cheaper, 1.0, np.where(dearer, lo, level[:, None]))
    point = np.clip(point, lo, 1.0)
    free = tied & ((cnt >= 2) & (level > lo) & (level < 1.0))[:, None]
    return point, free, t, tied


def _size_table(c: np.ndarray, lo: float) -> tuple[np.ndarray, np.ndarray]:
    """Sizes ``0..G`` and ``mincost`` of each (inf below ``G pi_min``), flat ``(m, G)``."""
    m, G = c.shape
    sizes = np.arange(G + 1, dtype=np.float64)
    ok = sizes >= G * lo * (1 - 1e-12)
    mc = np.full((m, G + 1), np.inf)
    for j in np.flatnonzero(ok):  # G + 1 vectorised evaluations
        mc[:, j] = extreme_cost(c, lo, np.full(m, sizes[j]))
    return sizes, mc


def largest_affordable_size(c_hat: ArrayLike, budget: ArrayLike, pi_min: float) -> np.ndarray:
    r"""Largest size ``n <= G`` whose least-cost point is affordable: ``mincost(n) <= budget``.

    ``mincost(n) = pi_min sum c + (1 - pi_min)(c_(1) + ... + c_(k) + frac c_(k+1))`` with the
    costs sorted increasingly and ``k + frac = (n - G pi_min) / (1 - pi_min)``; exactly the
    sizes ``n`` for which ``sum pi = n`` meets the budget. Returns ``-1`` where even the floor
    ``n = ceil(G pi_min)`` is unaffordable (budget below the floor's cost).

    Parameters
    ----------
    c_hat : (..., G) array_like       positive costs
    budget : float or (...)           positive budget
    pi_min : float                    floor in (0, 1]

    Returns
    -------
    (...) ndarray of int

    Examples
    --------
    >>> int(largest_affordable_size([100.0, 100.0, 100.0, 100.0], 250.0, 0.08))
    2
    >>> int(largest_affordable_size([10.0, 20.0, 400.0, 500.0], 250.0, 0.08))
    2
    >>> int(largest_affordable_size([10.0, 20.0, 30.0, 500.0], 250.0, 0.08))
    3
    """
    c = check_finite("c_hat", c_hat)
    if c.ndim < 1 or c.shape[-1] < 2:
        raise ValueError(f"c_hat must have shape (..., G) with G >= 2; got {c.shape}")
    if np.any(c <= 0):
        raise ValueError(f"c_hat must be positive (predicted suffix tokens); got min "
                         f"{float(c.min())!r}")
    batch, G = c.shape[:-1], c.shape[-1]
    bud = broadcast_budget(budget, batch)
    if np.any(bud <= 0):
        raise ValueError(f"budget must be positive; got min {float(bud.min())!r}")
    lo = check_pi_min(pi_min)
    m = int(np.prod(batch, dtype=np.int64))
    return _largest_affordable(c.reshape(m, G), bud.reshape(m), lo).reshape(batch)


def _largest_affordable(c: np.ndarray, bud: np.ndarray, lo: float) -> np.ndarray:
    sizes, mc = _size_table(c, lo)
    ok = mc <= bud[:, None] * (1 + EDGE_RTOL)
    last = c.shape[1] - np.argmax(ok[:, ::-1], axis=1)  # index of the last affordable size
    return np.where(ok.any(axis=1), sizes[last].astype(np.int64), -1)
