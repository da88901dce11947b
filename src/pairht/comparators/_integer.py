r"""Exact integer allocation of a shared budget over separable per-prompt value curves.

Every prompt-level comparator (VIP, HORA, DUET, the prompt level of ``pair_joint``) solves

.. math:: \max_{n}\ \sum_b U_b(n_b) \quad\text{s.t.}\quad \sum_b n_b \le N,\quad
          \ell_b \le n_b \le u_b,\ n_b \in \mathbb Z,

(a minimisation of ``sum_b V_b`` is ``U_b = -V_b``). Two exact solvers:

* :func:`greedy_allocation` - exact when every curve is *discretely concave*
  (nonincreasing marginal gains ``d_b(m) = U_b(m+1) - U_b(m)``); ``O(K log K)``.
* :func:`dp_allocation` - exact for any curves (dynamic programming over the budget);
  ``O(B N w)`` with ``w = max_b (u_b - l_b)``. Used when a curve is not concave (Dr.GRPO's
  variance ``(n-1)/n^2`` is not convex on ``n = 2..4``).
"""

from __future__ import annotations

import numpy as np

#: Gains within this (relative) tolerance of each other count as equal when checking concavity.
CONCAVITY_TOL = 1e-12


def check_bounds(lower: np.ndarray, upper: np.ndarray, total: int) -> None:
    """Raise ``ValueError`` unless ``0 <= lower <= upper`` and ``sum(lower) <= total``."""
    if np.any(lower < 0) or np.any(upper < lower):
        bad = int(np.argmax((lower < 0) | (upper < lower)))
        raise ValueError(
            f"bounds must satisfy 0 <= lower <= upper; prompt {bad} has lower = {lower[bad]}, "
            f"upper = {upper[bad]}")
    if int(lower.sum()) > total:
        raise ValueError(
            f"budget infeasible: the per-prompt minimums need sum(lower) = {int(lower.sum())} "
            f"rollouts but the budget is {total}; raise the budget or lower the per-prompt "
            f"minimums (a comparator's min_group or min_rollouts)")


def is_concave(gains: np.ndarray, valid: np.ndarray) -> bool:
    """Whether each row of ``gains`` (masked by ``valid``, a prefix per row) is nonincreasing."""
    g = np.where(valid, gains, 0.0)
    scale = max(1.0, float(np.max(np.abs(g), initial=0.0)))
    both = valid[:, 1:] & valid[:, :-1]
    rise = (g[:, 1:] - g[:, :-1])[both]
    return bool(np.all(rise <= CONCAVITY_TOL * scale))


def greedy_allocation(
    gains: np.ndarray, lower: np.ndarray, upper: np.ndarray, total: int, *,
    spend_zero_gain: bool = False,
) -> np.ndarray:
    r"""Greedy marginal allocation; exact for discretely concave curves.

    ``gains[b, m]`` is the gain of the ``(lower_b + m + 1)``-th unit of prompt ``b``
    (``m = 0 .. upper_b - lower_b - 1``; entries beyond are ignored). Starting from ``lower``,
    the units with the largest gains are taken, ties broken by prompt index then level, until
    ``total`` units are placed or no unit with a positive gain is left (with
    ``spend_zero_gain=True`` zero-gain units are also spent).

    **Proof of exactness.** Write ``n_b = l_b + m_b``. Any feasible allocation's value is
    ``sum_b U_b(l_b) + sum_b sum_{m < m_b} d_b(m)``: it takes, in every row, a *prefix* of the
    row's gain list, at most ``N - sum l`` units in all. If every row is nonincreasing
    (concave ``U_b``), the ``N - sum l`` largest positive gains of the whole table, ordered
    by (gain descending, prompt, level), form a prefix in every row (a later level of a row
    never precedes an earlier one: its gain is not larger and ties go to the lower level), so
    they are a feasible allocation; and no feasible allocation can collect more than the sum
    of the ``N - sum l`` largest positive gains. Hence the greedy set is optimal. Without
    concavity the prefix argument fails (take :func:`dp_allocation`).

    Parameters
    ----------
    gains : (B, W) ndarray
        Marginal gains per prompt and level.
    lower, upper : (B,) int ndarrays
        Bounds on the number of units.
    total : int
        Budget in units (``>= sum(lower)``).

    Returns
    -------
    (B,) int ndarray
        The allocation ``n``.
    """
    check_bounds(lower, upper, total)
    width = upper - lower
    W = gains.shape[1] if gains.ndim == 2 else 0
    if W and int(width.max()) > W:
        raise ValueError(f"gains must have at least max(upper - lower) = {int(width.max())} "
                         f"columns; got {W}")
    level = np.arange(W)[None, :]
    valid = level < width[:, None]
    n = lower.astype(np.int64).copy()
    free = int(total - lower.sum())
    if free == 0 or not valid.any():
        return n
    rows, cols = np.nonzero(valid)
    g = gains[rows, cols]
    keep = g >= 0.0 if spend_zero_gain else g > 0.0
    rows, cols, g = rows[keep], cols[keep], g[keep]
    # lexsort: last key is primary -> gain descending, then prompt, then level
    order = np.lexsort((cols, rows, -g))[:free]
    np.add.at(n, rows[order], 1)
    return n


def dp_allocation(values: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                  total: int) -> np.ndarray:
    r"""Exact maximiser of ``sum_b U_b(n_b)`` s.t. ``sum n_b <= total``, any curves.

    ``values[b, m] = U_b(lower_b + m)`` for ``m = 0 .. upper_b - lower_b``. Dynamic
    programming over prompts with the number of extra units spent as state:
    ``F_b(s) = max_m F_{b-1}(s - m) + U_b(l_b + m)``; ties go to the smaller ``m`` of the last
    prompt first (deterministic). ``O(B (N - sum l) w)``.

    Returns
    -------
    (B,) int ndarray
    """
    check_bounds(lower, upper, total)
    B = values.shape[0]
    free = int(total - lower.sum())
    width = upper - lower
    neg = -np.inf
    best = np.full(free + 1, neg)
    best[0] = 0.0
    choice = np.zeros((B, free + 1), dtype=np.int64)
    for b in range(B):
        new = np.full(free + 1, neg)
        arg = np.zeros(free + 1, dtype=np.int64)
        for m in range(int(min(width[b], free)) + 1):
            cand = np.full(free + 1, neg)
            cand[m:] = best[: free + 1 - m] + values[b, m]
            better = cand > new
            new = np.where(better, cand, new)
            arg = np.where(better, m, arg)
        best, choice[b] = new, arg
    s = int(np.argmax(best))  # first (smallest spend) maximiser
    n = np.empty(B, dtype=np.int64)
    for b in range(B - 1, -1, -1):
        m = int(choice[b, s])
        n[b] = lower[b] + m
        s -= m
    return n
