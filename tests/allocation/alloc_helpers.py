"""Shared problem generators and solver-independent checks for the allocation tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from scipy.optimize import linprog


def disagreement_ref(p: np.ndarray) -> np.ndarray:
    """Eq. (disagreement) by explicit loops, zero diagonal."""
    G = len(p)
    d = np.zeros((G, G))
    for i in range(G):
        for j in range(G):
            if i != j:
                d[i, j] = p[i] * (1 - p[j]) + (1 - p[i]) * p[j]
    return d


def b_ref(a: np.ndarray) -> np.ndarray:
    """b_i = 2 sum_{j<k; j,k != i} sqrt(a_ij a_ik), by explicit loops."""
    G = a.shape[0]
    out = np.zeros(G)
    for i in range(G):
        for j in range(G):
            for k in range(j + 1, G):
                if i not in (j, k):
                    out[i] += 2 * np.sqrt(a[i, j] * a[i, k])
    return out


def phi_x(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Paper's objective in x = -log pi: sum_{i<j} a_ij e^{x_i+x_j} + sum_i b_i e^{x_i}."""
    G = len(x)
    iu = np.triu_indices(G, 1)
    return float(np.sum(a[iu] * np.exp(x[iu[0]] + x[iu[1]])) + np.sum(b * np.exp(x)))


def grad_pi(pi: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """d f / d pi from the x-space gradient (chain rule dx/dpi = -1/pi), written independently."""
    x = -np.log(pi)
    e = np.exp(x)
    dphi_dx = e * (a @ e + b)  # a has a zero diagonal
    return -dphi_dx / pi


@st.composite
def problems(draw, min_g=2, max_g=10, allow_extreme_p=True):
    """(p, c, budget, pi_min): p may hit 0/1, costs span up to 3 orders of magnitude."""
    G = draw(st.integers(min_g, max_g))
    p_el = st.floats(0.0, 1.0)
    if allow_extreme_p:
        p_el = st.one_of(p_el, st.sampled_from([0.0, 1.0]))
    p = np.array(draw(st.lists(p_el, min_size=G, max_size=G)))
    logc = np.array(draw(st.lists(st.floats(0.0, 3.0), min_size=G, max_size=G)))
    c = 10.0 * 10.0**logc
    pi_min = draw(st.sampled_from([0.01, 0.08, 0.2, 0.5]))
    frac = draw(st.floats(0.0, 1.2))
    floor, full = pi_min * c.sum(), c.sum()
    budget = floor + frac * (full - floor)
    return p, c, budget, pi_min


def assert_kkt(pi, a, b, c, budget, pi_min, size=None, eps=1e-7, bound_tol=1e-7):
    """Check the KKT conditions of the pi-program without using the solver's multipliers.

    Active sets are read off ``pi`` (within ``bound_tol``); multipliers ``lam >= 0`` (budget)
    and ``nu`` (size) must *exist* with stationarity on free coordinates, the right signs at
    active bounds and complementary slackness, each within ``eps`` relative to ``max |g|``.
    Complementary slackness is the product ``lam (budget - c . pi) = 0``: a budget with
    relative slack ``s`` above ``1e-7`` still admits ``lam`` up to
    ``eps max|g| / (max c s)`` (the scaling of :func:`~pairht.allocation.kkt_residual`'s
    complementarity term), not only ``lam = 0``. Existence is decided by a linear feasibility
    program (HiGHS), independent of the solver.
    """
    G = len(pi)
    assert np.all(pi >= pi_min - 1e-15) and np.all(pi <= 1 + 1e-15), "box violated"
    cost = float(c @ pi)
    assert cost <= budget * (1 + 1e-9), f"budget violated: {cost} > {budget}"
    if size is not None:
        assert abs(pi.sum() - size) <= 1e-12 * max(size, 1), "size violated"
    g = grad_pi(pi, a, b)
    gam = max(np.max(np.abs(g)), 1e-300)
    low = pi <= pi_min + bound_tol
    up = pi >= 1 - bound_tol
    free = ~low & ~up
    binds = cost >= budget * (1 - 1e-7)
    # variables: lam (>= 0, at most lam_max when the budget is slack), nu (free or fixed 0)
    nvar = 2
    A_ub, b_ub = [], []
    # With a size (checked above) the budget row may be written (c - min c) . pi <= budget -
    # n min c: the same constraint on sum pi = n, and free of the cancellation between lam c
    # and nu that nearly tied costs cause in the LP. Without one, c / max c.
    shifted = c - np.min(c) if size is not None else c
    scale_c = np.max(shifted) if np.max(shifted) > 0 else 1.0
    # lam' = lam scale_c; a slack budget bounds it by complementarity, lam max(c) s <= eps gam
    # with s = 1 - cost / budget (a relative slack of 1e-6 next to a multiplier of 1e-3 max|g|
    # is a KKT point to 1e-9; requiring lam = 0 there would demand exact complementarity).
    slack = 1.0 - cost / budget
    lam_max = np.inf if binds else eps * gam * scale_c / (np.max(c) * slack)
    for i in range(G):
        row = np.array([shifted[i] / scale_c, 1.0])  # w_i = g_i + lam' c_i/cmax + nu'
        if free[i] or (low[i] and up[i]):
            A_ub += [row, -row]
            b_ub += [eps * gam - g[i], eps * gam + g[i]]
        elif low[i]:
            A_ub.append(-row)  # w_i >= -eps
            b_ub.append(eps * gam + g[i])
        else:
            A_ub.append(row)  # w_i <= eps
            b_ub.append(eps * gam - g[i])
    if size is not None:
        # Two multipliers and near-parallel rows: decided exactly below, because an LP solver
        # drops matrix entries under 1e-9 (HiGHS) and the shifted row of nearly tied costs
        # has such entries next to multipliers of 1e15.
        gap = _min_interval_gap(np.array(A_ub), np.array(b_ub), lam_max)
        assert gap <= 1e-9 * gam, f"no KKT multipliers exist (gap {gap}); pi={pi}, g={g}"
        return
    bounds = [(0, None if binds else lam_max), (None, None) if size is not None else (0, 0)]
    res = linprog(np.zeros(nvar), A_ub=np.array(A_ub), b_ub=np.array(b_ub), bounds=bounds,
                  method="highs")
    assert res.status == 0, f"no KKT multipliers exist: {res.message}; pi={pi}, g={g}"


def _min_interval_gap(A_ub, b_ub, lam_max):
    """min over 0 <= lam <= lam_max of max_k L_k(lam) - min_k U_k(lam).

    Each row ``A_ub[k] . (lam, nu) <= b_ub[k]`` bounds ``nu`` by a line in ``lam``: upper rows
    ``(r, 1)`` give ``nu <= b - r lam``, lower rows ``(-r, -1)`` give ``nu >= -b - r lam``.
    The gap is the maximum of the lines ``L_i - U_j``, convex and piecewise linear in ``lam``:
    its minimum is at ``lam = 0``, at ``lam_max``, where a rising line crosses a non-rising
    one, or at infinity (``lam_max`` infinite, every line non-rising). Multipliers exist iff
    the gap is <= 0."""
    up = A_ub[:, 1] > 0
    ub_b, ub_r = b_ub[up], A_ub[up, 0]
    lb_b, lb_r = -b_ub[~up], -A_ub[~up, 0]
    if not ub_b.size or not lb_b.size:
        return -np.inf  # nu is unbounded on one side: always feasible
    # lines a + s lam for every (lower i, upper j): L_i - U_j
    a = (lb_b[:, None] - ub_b[None, :]).ravel()
    sl = (-lb_r[:, None] + ub_r[None, :]).ravel()

    def gap(lam):
        return float(np.max(a + sl * lam))

    if lam_max == 0.0:
        return gap(0.0)
    if np.isinf(lam_max) and np.all(sl <= 0):
        flat = sl == 0
        return float(np.max(a[flat])) if flat.any() else -np.inf
    cands = [0.0] if np.isinf(lam_max) else [0.0, float(lam_max)]
    rise, rest = np.flatnonzero(sl > 0), np.flatnonzero(sl <= 0)
    for p_ in rise:
        lam = (a[rest] - a[p_]) / (sl[p_] - sl[rest])
        cands.extend(lam[(lam > 0) & (lam <= lam_max)].tolist())
    return min(gap(lam) for lam in cands)


def feasible_projection(pi, c, budget, pi_min, size=None):
    """Pull an approximately feasible point into the feasible set (raising its objective).

    Shrinks towards the floor until the budget holds; with a size, only checks it.
    """
    pi = np.clip(pi, pi_min, 1.0)
    cost = c @ pi
    if cost > budget:
        t = (budget - pi_min * c.sum()) / (cost - pi_min * c.sum())
        pi = pi_min + t * (pi - pi_min)
    return pi
