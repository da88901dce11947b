r"""Batched solver for the PAIR probability design (Eqs. convex-objective and budget).

The paper writes the program in ``x = -log(pi)``:

    min_x  Phi(x) = sum_{i<j} a_ij e^{x_i + x_j} + sum_i b_i e^{x_i}
    s.t.   sum_i c_i e^{-x_i} <= budget,   0 <= x_i <= -log(pi_min).

The map ``pi = e^{-x}`` is a monotone bijection of the box, so the same minimiser solves

    min_pi f(pi) = sum_{i<j} a_ij / (pi_i pi_j) + sum_i b_i / pi_i
    s.t.   c . pi <= budget,  pi_min <= pi_i <= 1     [,  sum_i pi_i = n   (fixed-size route)]

and this is the form solved here: ``f`` is convex in ``pi`` (each ``1/(pi_i pi_j)`` has Hessian
determinant ``3/(pi_i pi_j)^4 > 0``) and strictly convex in every vertex with an edge, and all
constraints are *linear*, including the size equality ``sum pi = n`` that is not convex in
``x``. See :func:`allocate` for the algorithm and the exact definition of the KKT residual.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite, check_probabilities
from pairht.allocation._ipm_kernel import ipm_batch
from pairht.allocation.proxies import ProxyKind, edge_proxy, shared_vertex_term

#: Default stopping tolerance on the relative KKT residual (see :func:`kkt_residual`).
KKT_TOL = 1e-8
#: Relative tolerance under which a budget counts as exactly the floor's cost.
_EDGE_RTOL = 1e-12
#: Fraction of the cost room (floor -> budget) the cold start spends.
_START_ROOM = 0.95


@dataclasses.dataclass(frozen=True)
class AllocationResult:
    """Solution of a batch of PAIR allocation problems; every field has the batch shape.

    Attributes
    ----------
    pi : (..., G) ndarray
        Continuation probabilities ``pi_i`` in ``[pi_min, 1]``.
    objective : (...) ndarray
        Variance proxy ``sum_{i<j} a_ij/(pi_i pi_j) + sum_i b_i/pi_i`` at ``pi``.
    kkt_residual : (...) ndarray
        Relative KKT residual of ``pi`` with the reported multipliers (:func:`kkt_residual`).
    iterations : (...) ndarray of int
        Interior-point iterations (0 for problems solved in closed form).
    status : (...) ndarray of str
        ``"optimal"`` (interior point), ``"full"`` (``pi = 1``: the budget affords every
        suffix), ``"floor"`` (``pi = pi_min``: budget exactly the floor's cost),
        ``"min_cost"`` (size route with the budget exactly the least cost of ``n`` units: the
        only feasible point), ``"degenerate"`` (``a = 0``: every feasible ``pi`` is optimal,
        tie-break documented in :func:`allocate`), ``"max_iterations"``, ``"fallback_uniform"``.
    converged : (...) ndarray of bool
        ``kkt_residual <= tol``.
    fallback_used : (...) ndarray of bool
        Whether the uniform fallback replaced a failed solve (only with ``fallback=True``).
    expected_cost : (...) ndarray
        Predicted expected suffix cost ``sum_i c_i pi_i``.
    budget_multiplier : (...) ndarray
        Lagrange multiplier ``lambda >= 0`` of the budget (objective units per token).
    size_multiplier : (...) ndarray
        Multiplier ``nu`` of ``sum pi = n`` (NaN without ``size``).
    size : (...) ndarray of int
        The ``n`` imposed (``-1`` without ``size``).
    """

    pi: np.ndarray
    objective: np.ndarray
    kkt_residual: np.ndarray
    iterations: np.ndarray
    status: np.ndarray
    converged: np.ndarray
    fallback_used: np.ndarray
    expected_cost: np.ndarray
    budget_multiplier: np.ndarray
    size_multiplier: np.ndarray
    size: np.ndarray


# ---------------------------------------------------------------------------------- objective
def proxy_value(pi: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    r"""Variance proxy ``f(pi) = sum_{i<j} a_ij/(pi_i pi_j) + sum_i b_i/pi_i``, shape ``(...)``.

    Examples
    --------
    >>> import numpy as np
    >>> float(proxy_value(np.array([0.5, 1.0]), np.array([[0, 2.0], [2.0, 0]]), np.ones(2)))
    7.0
    """
    u = 1.0 / pi
    au = np.einsum("...ij,...j->...i", a, u)
    return 0.5 * np.einsum("...i,...i->...", u, au) + np.einsum("...i,...i->...", b, u)


def proxy_gradient(pi: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Gradient of :func:`proxy_value` in ``pi``: ``-(A u + b)_i / pi_i^2`` with ``u = 1/pi``."""
    u = 1.0 / pi
    q = np.einsum("...ij,...j->...i", a, u) + b
    return -q * u * u


def kkt_residual(
    pi: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    budget: np.ndarray,
    pi_min: float,
    lam: np.ndarray,
    nu: np.ndarray | None = None,
    size: np.ndarray | None = None,
) -> np.ndarray:
    r"""Relative KKT residual of ``pi`` for the program in ``pi`` with multipliers ``lam, nu``.

    With ``g = grad f(pi)``, ``gamma = max(max_i |g_i|, 1e-300)``, ``w = g + lam c + nu 1`` and
    ``c_max = max_i c_i`` the residual is the largest of

    * stationarity with the box (natural residual, in probability units):
      ``max_i |pi_i - clip(pi_i - w_i / gamma, pi_min, 1)|`` -- zero iff ``w_i = 0`` where
      ``pi_i`` is interior, ``w_i >= 0`` at ``pi_min`` and ``w_i <= 0`` at 1;
    * dual feasibility ``max(0, -lam) c_max / gamma``;
    * complementary slackness ``(lam c_max / gamma) |1 - c . pi / budget|``;
    * primal feasibility ``max(0, c . pi / budget - 1)``, ``max(0, pi_min - pi_i)``,
      ``max(0, pi_i - 1)`` and, with a size, ``|sum pi - n| / n``.

    Every term is invariant to rescaling ``a, b`` (objective units) and ``c, budget`` (tokens).
    """
    g = proxy_gradient(pi, a, b)
    gamma = np.maximum(np.max(np.abs(g), axis=-1), 1e-300)
    nu_ = np.zeros_like(lam) if nu is None else np.where(np.isnan(nu), 0.0, nu)
    w = g + lam[..., None] * c + nu_[..., None]
    stat = np.max(np.abs(pi - np.clip(pi - w / gamma[..., None], pi_min, 1.0)), axis=-1)
    cmax = np.max(c, axis=-1)
    rel_cost = np.einsum("...i,...i->...", c, pi) / budget
    dual = np.maximum(-lam, 0.0) * cmax / gamma
    comp = np.abs(lam) * cmax / gamma * np.abs(1.0 - rel_cost)
    feas = np.maximum(rel_cost - 1.0, 0.0)
    box = np.maximum(np.max(np.maximum(pi_min - pi, pi - 1.0), axis=-1), 0.0)
    out = np.maximum.reduce([stat, dual, comp, feas, box])
    if size is not None:
        out = np.maximum(out, np.abs(pi.sum(axis=-1) - size) / size)
    return out


# ---------------------------------------------------------------------------------- helpers
def _min_cost_point(c: np.ndarray, lo: float, n: np.ndarray) -> np.ndarray:
    """Cheapest ``pi`` in the box with ``sum pi = n``: cheapest units raised to 1 first.

    Equal costs share equally (sorting is stable and the fractional remainder is spread over
    the tied group), so the point is deterministic. Shape ``(m, G)``.
    """
    m, G = c.shape
    order = np.argsort(c, axis=1, kind="stable")
    extra = (n - G * lo) / (1.0 - lo) if lo < 1 else np.zeros(m)  # units of (1 - lo) to add
    k = np.floor(extra + 1e-12).astype(np.int64)
    frac = np.clip(extra - k, 0.0, 1.0)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(G)[None, :].repeat(m, 0), axis=1)
    level = np.where(ranks < k[:, None], 1.0, np.where(ranks == k[:, None], frac[:, None], 0.0))
    # Spread the fractional level over units tied in cost with the marginal one.
    cs = np.take_along_axis(c, order, axis=1)
    kk = np.minimum(k, G - 1)
    cm = cs[np.arange(m), kk]
    tied = np.isclose(c, cm[:, None], rtol=0, atol=0) & (frac[:, None] > 0)
    tot = np.where(tied, level, 0.0).sum(axis=1)
    cnt = tied.sum(axis=1)
    level = np.where(tied, (tot / np.maximum(cnt, 1))[:, None], level)
    return lo + (1.0 - lo) * level


def _restore_size(y: np.ndarray, c: np.ndarray, lo: float, n: np.ndarray) -> np.ndarray:
    """Make ``sum y = n`` hold to rounding without changing the cost ``c . y``.

    The interior-point method meets the linear size equality only up to its tolerance
    (``~1e-10``) after damped steps. The residual is removed by the smallest slack-weighted
    correction ``delta = s (k1 + k2 c)`` with ``sum delta = n - sum y`` and ``c . delta = 0``,
    ``s_i = min(y_i - lo, 1 - y_i)`` so bound-active coordinates do not move.
    """
    r = n - y.sum(axis=1)
    s = np.maximum(np.minimum(y - lo, 1.0 - y), 0.0)
    s0, s1, s2 = s.sum(axis=1), (s * c).sum(axis=1), (s * c * c).sum(axis=1)
    det = s0 * s2 - s1 * s1
    two = det > 1e-12 * np.maximum(s0 * s2, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        k1 = np.where(two, s2 * r / det, r / s0)
        k2 = np.where(two, -s1 * r / det, 0.0)
    delta = s * (k1[:, None] + k2[:, None] * c)
    ok = np.isfinite(delta).all(axis=1) & (s0 > 0)
    return np.where(ok[:, None], np.clip(y + delta, lo, 1.0), y)


def _uniform_with_size(
    n: np.ndarray, full: np.ndarray, bud: np.ndarray, mincost: np.ndarray, mc: np.ndarray
) -> np.ndarray:
    """``pi = n/G`` if affordable, else its convex mix with the least-cost point ``mc`` that
    spends exactly the budget (both have ``sum pi = n``, so the mix does too)."""
    G = mc.shape[1]
    uni = n / G
    ucost = uni * full
    theta = np.clip((ucost - bud) / np.maximum(ucost - mincost, 1e-300), 0.0, 1.0)
    return (1 - theta)[:, None] * uni[:, None] + theta[:, None] * mc


def _start_point(
    cs: np.ndarray, lo: float, n: np.ndarray | None, mc: np.ndarray | None,
    warm: np.ndarray | None
) -> np.ndarray:
    """Strictly interior start (scaled budget 1) that satisfies ``sum y = n`` exactly.

    Cold: without a size, the constant vector spending 95% of the room between the floor's
    cost and ``min(1, full cost)``; with a size, the mix of ``n/G`` and the least-cost point
    ``mc`` whose cost lies 95% of the way from the least cost to ``min(1, cost(n/G))``.
    (The budget binds at the optimum unless ``pi = 1`` is affordable, so starting near it
    saves 15-20% of the iterations against starting halfway; measured at G = 8..64.) Warm: the
    previous ``pi`` moved 1e-3 inside the box, given the sum ``n`` by shrinking towards the
    floor or towards 1 (both keep the box), then pulled towards the cold start just enough
    to keep 1% of the cost room as budget slack. Every step keeps ``sum y`` fixed, so the
    Newton steps (which conserve it) never have to restore the size equality.
    """
    m, G = cs.shape
    full = cs.sum(axis=1)
    if n is None:
        lower, upper = lo * full, np.minimum(1.0, full)
        theta = _START_ROOM * (upper - lower) / np.maximum(full - lower, 1e-300)
        y0 = lo + theta[:, None] * (1.0 - lo) * np.ones((1, G))
    else:
        assert mc is not None  # the least-cost point always comes with a size
        uni = np.broadcast_to((n / G)[:, None], (m, G))
        cu = np.einsum("bi,bi->b", cs, uni)
        lower = np.einsum("bi,bi->b", cs, mc)
        upper = np.minimum(1.0, cu)
        target = lower + _START_ROOM * (upper - lower)
        th = np.where(cu > lower, (cu - target) / np.maximum(cu - lower, 1e-300), 0.0)
        y0 = (1.0 - th)[:, None] * uni + th[:, None] * mc
    if warm is None:
        return y0
    w = np.clip(warm, lo + 1e-3 * (1 - lo), 1 - 1e-3 * (1 - lo))
    if n is not None:
        sw = w.sum(axis=1)
        down = sw > n
        with np.errstate(divide="ignore", invalid="ignore"):
            k_dn = (n - G * lo) / (sw - G * lo)
            k_up = (G - n) / (G - sw)
        w = np.where(down[:, None], lo + (w - lo) * k_dn[:, None], 1.0 - (1.0 - w) * k_up[:, None])
    c0 = np.einsum("bi,bi->b", cs, y0)
    cw = np.einsum("bi,bi->b", cs, w)
    cap = lower + 0.99 * (np.minimum(1.0, full if n is None else 1.0) - lower)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(cw <= cap, 1.0, np.clip((cap - c0) / (cw - c0), 0.0, 1.0))
    return y0 + t[:, None] * (w - y0)


def _as_int_sizes(size: Any, batch: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(size)
    integral = np.issubdtype(arr.dtype, np.integer) or (
        np.issubdtype(arr.dtype, np.floating) and bool(np.all(np.isfinite(arr)))
        and bool(np.all(arr == np.round(arr))))
    if arr.dtype == bool or not integral:
        raise ValueError(f"size must be None, 'auto', an int or an array of ints (the fixed "
                         f"sample size n); got {size!r}")
    try:
        return np.broadcast_to(arr.astype(np.int64), batch).copy()
    except ValueError:
        raise ValueError(f"size must be an int or have the batch shape {batch}; got shape "
                         f"{arr.shape}") from None



def resolve_sizes(
    size: int | str | ArrayLike | None, c: np.ndarray, bud: np.ndarray, lo: float
) -> np.ndarray | None:
    """Validated fixed sizes ``n`` of shape ``c.shape[:-1]`` (or ``None`` for no size).

    ``size`` is ``None``, ``"auto"`` (:func:`auto_size`) or integers with
    ``max(2, G * pi_min) <= n <= G``, and each ``n`` must be affordable: the cheapest ``n``
    units at 1 and the rest at ``pi_min`` must cost at most the budget. Shared by
    :func:`allocate` and :func:`~pairht.allocation.reference_slsqp` so both solve the same
    problems. ``c`` and ``bud`` are validated (:func:`validate_problem`).
    """
    if size is None:
        return None
    batch, G = c.shape[:-1], c.shape[-1]
    auto = isinstance(size, str)
    if auto:
        if size != "auto":
            raise ValueError(f"size must be None, 'auto' or an int; got {size!r}")
        sizes = auto_size(c, bud, lo)
    else:
        sizes = _as_int_sizes(size, batch)
        badn = (sizes < 2) | (sizes > G) | (sizes < G * lo - 1e-12)
        if badn.any():
            v = int(np.atleast_1d(sizes)[np.argmax(np.atleast_1d(badn))])
            raise ValueError(f"size must satisfy max(2, G * pi_min) <= n <= G = {G} "
                             f"(G * pi_min = {G * lo:g}); got n = {v}")
    m = int(np.prod(batch, dtype=np.int64))
    n = np.broadcast_to(sizes, batch).reshape(m)
    cf, bf = c.reshape(m, G), np.broadcast_to(bud, batch).reshape(m)
    mincost = np.einsum("bi,bi->b", cf, _min_cost_point(cf, lo, n.astype(np.float64)))
    short = mincost > bf * (1 + _EDGE_RTOL)
    if short.any():
        i = int(np.argmax(short))
        hint = ("size='auto' cannot go below max(2, ceil(G * pi_min)); raise the budget or "
                "use size=None (Bernoulli design)" if auto else "lower n or use size='auto'")
        raise ValueError(
            f"size n = {int(n[i])} is infeasible with this budget: the cheapest n units "
            f"(the rest at pi_min = {lo}) cost {float(mincost[i])!r} > budget = "
            f"{float(bf[i])!r}; {hint}")
    return sizes


def uniform_fallback(
    c: np.ndarray, bud: np.ndarray, lo: float, n: np.ndarray | None
) -> np.ndarray:
    """The appendix's fallback for flat ``(m, G)`` problems: uniform probabilities at the
    same expected cost, ``min(1, budget / sum c)`` (kept in ``[pi_min, 1]``); with sizes ``n``,
    ``n / G`` where affordable, else its mix with the least-cost point (sum stays ``n``)."""
    full = c.sum(axis=1)
    if n is None:
        return np.clip(np.minimum(1.0, bud / full), lo, 1.0)[:, None] * np.ones_like(c)
    nf = n.astype(np.float64)
    mc = _min_cost_point(c, lo, nf)
    return _uniform_with_size(nf, full, bud, np.einsum("bi,bi->b", c, mc), mc)

def auto_size(c_hat: np.ndarray, budget: np.ndarray, pi_min: float) -> np.ndarray:
    r"""Fixed sample size chosen from the budget: ``n = floor(G budget / sum c)``, in ``[2, G]``.

    ``n / G`` is then the largest uniform probability the budget affords, so the uniform
    allocation ``pi = n/G`` is feasible and so is the program with ``sum pi = n``. The size is
    raised to ``max(2, ceil(G pi_min))`` when the budget is below that (at least one pair, and
    the floor forces ``sum pi >= G pi_min``); :func:`allocate` raises ``ValueError`` if even
    that is not affordable.
    """
    c_hat = check_finite("c_hat", c_hat)
    budget = check_finite("budget", budget)
    if c_hat.ndim < 1 or np.any(c_hat <= 0) or np.any(budget <= 0):
        raise ValueError("auto_size needs c_hat of shape (..., G) with every cost > 0 and a "
                         "positive budget")
    G = c_hat.shape[-1]
    n = np.floor(G * budget / c_hat.sum(axis=-1) * (1 + 1e-12)).astype(np.int64)
    lower = max(2, int(np.ceil(G * pi_min - 1e-12)))
    return np.clip(n, lower, G)


# ---------------------------------------------------------------------------------- public
def validate_problem(
    p_hat: ArrayLike | None, c_hat: ArrayLike, budget: ArrayLike, pi_min: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Check an allocation problem; return ``p``, ``c`` (both ``(..., G)``), ``budget``, ``pi_min``.

    ``p_hat`` may be None (baselines that ignore it); then ``p`` is returned as zeros.
    Raises ``ValueError`` naming the argument, the value and the rule.
    """
    c = check_finite("c_hat", c_hat)
    if p_hat is None:
        p = np.zeros_like(c)
    else:
        p = check_probabilities("p_hat", p_hat)
    if p.ndim < 1 or p.shape[-1] < 2:
        raise ValueError(f"p_hat/c_hat must have shape (..., G) with G >= 2 candidates; got "
                         f"{p.shape}")
    if c.shape != p.shape:
        raise ValueError(f"c_hat must have the shape of p_hat {p.shape}; got {c.shape}")
    if np.any(c <= 0):
        idx = tuple(int(i) for i in np.argwhere(c <= 0)[0])
        raise ValueError(f"c_hat must be positive (predicted suffix tokens); c_hat{list(idx)} = "
                         f"{c[idx]!r}")
    if isinstance(pi_min, bool) or not isinstance(pi_min, numbers.Real) or not (
            0.0 < float(pi_min) <= 1.0):
        raise ValueError(f"pi_min must be a float in (0, 1] (positivity floor); got {pi_min!r}")
    lo = float(pi_min)
    batch = p.shape[:-1]
    bud = check_finite("budget", budget)
    try:
        bud = np.broadcast_to(bud, batch).astype(np.float64)
    except ValueError:
        raise ValueError(f"budget must be a scalar or have the batch shape {batch}; got shape "
                         f"{bud.shape}") from None
    floor = lo * c.sum(axis=-1)
    bad = bud < floor * (1.0 - _EDGE_RTOL)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(np.atleast_1d(bad))[0])[: len(batch)]
        raise ValueError(
            f"budget is infeasible: it must be at least the floor's cost pi_min * sum(c_hat) = "
            f"{float(floor[idx])!r} (pi_min = {lo}); got budget{list(idx)} = {float(bud[idx])!r}")
    return p, c, bud, lo


def allocate(
    p_hat: ArrayLike,
    c_hat: ArrayLike,
    budget: ArrayLike,
    pi_min: float = 0.08,
    proxy: ProxyKind = "disagreement",
    covariance_term: bool = True,
    warm_start: ArrayLike | None = None,
    size: int | str | ArrayLike | None = None,
    fallback: bool = False,
    score_norm: ArrayLike | None = None,
    energy: ArrayLike | None = None,
    *,
    tol: float = KKT_TOL,
    max_iter: int = 100,
) -> AllocationResult:
    r"""PAIR continuation probabilities: solve Eqs. (convex-objective)-(budget), batched.

    Solves, for every problem of the batch,

        min  sum_{i<j} a_ij / (pi_i pi_j) + sum_i b_i / pi_i
        s.t. sum_i c_i pi_i <= budget,   pi_min <= pi_i <= 1   [,  sum_i pi_i = n],

    which is the paper's program in ``x = -log pi`` written in ``pi`` (same minimiser; the
    objective is convex in ``pi`` and the constraints become linear, so the fixed-size
    equality stays convex). ``a`` is :func:`~pairht.allocation.edge_proxy` and ``b`` is
    :func:`~pairht.allocation.covariance_term` (zero when ``covariance_term=False``).

    **Algorithm.** A Mehrotra predictor-corrector primal-dual interior-point method with a
    barrier-merit line search, one compiled (numba) loop over the problems of the batch
    (:mod:`pairht.allocation._ipm_kernel`; no Python loop per problem). Each iteration
    factorises one ``(G+1)``- or ``(G+2)``-square augmented Newton system (vertices, budget
    row, size row) once and reuses it for predictor and corrector. Chosen over a dual method
    (bisection / Newton on the budget multiplier with an inner projected Newton in ``pi``)
    because one Newton system handles the budget, the bounds and the size equality together
    with quadratic local convergence (6.4-8.7 iterations on average from a cold start at
    ``G = 8..64``, at most ~15), needs no active-set guessing and never leaves the box. The
    merit check (Armijo on ``f - t sum log slacks``, falling back to the pure centring
    direction, a descent direction because ``f`` is convex) is what makes it converge on
    every problem: plain Mehrotra steps can cycle on strongly curved ``1/(pi_i pi_j)``. The
    objective is normalised to ``f(1) = 1`` and the budget to 1; the start point satisfies
    ``sum pi = n`` exactly, which every Newton step conserves.

    **Closed-form cases** (``iterations = 0``): ``budget >= sum c`` without a size gives
    ``pi = 1`` (``f`` is nonincreasing in every ``pi_i``); a budget within ``1e-12`` (relative)
    of the floor's cost ``pi_min sum c`` gives ``pi = pi_min``; ``size = G`` gives ``pi = 1``
    and ``size = G pi_min`` gives ``pi = pi_min``; a budget equal (1e-12) to the least cost of
    ``n`` units gives that least-cost point (cheapest units at 1; status ``"min_cost"``).

    **Tie-breaks** (where the minimiser is not unique). ``f`` is strictly convex in the vertices
    that have an edge (``a_ij > 0`` for some ``j``), so those are unique. An *isolated* vertex
    (all ``a_ij = 0``, hence ``b_i = 0``) does not enter ``f``: without a size it gets
    ``pi_min`` (the proxy values it at zero, so nothing beyond the positivity floor is spent
    on it); with a size it is left to the interior-point path (the analytic centre of the
    optimal face). If *every* vertex is isolated (``a = 0``: all ``p_hat`` equal 0 or all
    equal 1 under the disagreement proxy) the proxy carries no information and the result is
    the uniform allocation at the budget, ``pi = min(1, budget / sum c)`` (the appendix's
    fallback rule), or with a size ``pi = n / G`` if affordable, else the cheapest mix of
    ``n/G`` with the least-cost point; status ``"degenerate"``.

    **KKT residual** (:func:`kkt_residual`, with the multipliers reported in the result): the
    largest of the natural (projected-gradient) residual with the gradient scaled by its
    max-norm, the scaled complementarity and dual feasibility of the budget multiplier, and
    the relative primal infeasibilities; invariant to the units of ``a, b`` and of the costs.
    ``converged`` means ``<= tol`` (default ``1e-8``; the interior point stops at ``tol/10``).
    In the closed-form cases with a single feasible point or ``a = 0`` only feasibility is
    measured (every feasible point is optimal there).

    **Warm start.** ``warm_start`` (previous step's ``pi``) is moved 1e-3 inside the box,
    given the sum ``n`` (size route) by shrinking towards the floor or towards 1, then pulled
    towards the cold start only as far as needed to keep 1% of the budget room slack.
    Measured in ``benchmarks/bench_allocation.py`` (previous solution perturbed by 5%, B =
    128, budget half the full cost): mean iterations 6.4 -> 5.5 (G = 8), 6.7 -> 5.8 (16),
    7.7 -> 6.3 (32), 8.7 -> 6.7 (64), i.e. 15-22% fewer; the solution is the same.

    **Fallback.** With ``fallback=True`` a problem whose solve fails (residual above ``tol``
    after ``max_iter`` iterations) gets the uniform allocation with the same expected cost
    (``pi = min(1, budget / sum c)``, or ``n / G`` with a size), status ``"fallback_uniform"``
    and ``fallback_used = True``. It is never used on a solved problem.

    Parameters
    ----------
    p_hat : (..., G) array_like
        Predicted success probabilities in [0, 1], ``G >= 2``.
    c_hat : (..., G) array_like
        Predicted remaining suffix tokens, all ``> 0``.
    budget : float or (...) array_like
        Expected suffix-token budget, at least the floor's cost ``pi_min * sum(c_hat)``.
    pi_min : float
        Probability floor in (0, 1]; establishes positivity and caps inverse weights.
    proxy : {"disagreement", "score_norm", "energy"}
        Edge proxy (see :func:`~pairht.allocation.edge_proxy`).
    covariance_term : bool
        Include the shared-vertex term ``b_i``.
    warm_start : (..., G) array_like, optional
        Previous probabilities to start from.
    size : None, int, (...) ints or "auto"
        Adds ``sum_i pi_i = n`` (fixed-size designs). ``"auto"`` uses :func:`auto_size`.
    fallback : bool
        Replace a failed solve by the uniform allocation at the same expected cost (reported
        in ``fallback_used``). Never used unless the solver fails.
    score_norm, energy : array_like, optional
        Inputs of the ``"score_norm"`` and ``"energy"`` proxies.
    tol : float
        KKT tolerance. ``max_iter`` caps interior-point iterations.

    Returns
    -------
    AllocationResult

    Raises
    ------
    ValueError
        Infeasible or malformed input: budget below the floor's cost (the message reports
        it), non-positive costs, ``p_hat`` outside [0, 1], ``pi_min`` outside (0, 1], NaN,
        shape mismatch, a size that cannot be met.

    Examples
    --------
    >>> import numpy as np
    >>> res = allocate([0.1, 0.5, 0.9, 0.5], [100.0, 400.0, 200.0, 300.0], budget=500.0)
    >>> bool(res.converged), round(float(res.expected_cost), 9)
    (True, 500.0)
    >>> res.pi.round(3).tolist()
    [0.888, 0.385, 0.609, 0.452]
    """
    p, c, bud, lo = validate_problem(p_hat, c_hat, budget, pi_min)
    batch, G = p.shape[:-1], p.shape[-1]
    if not isinstance(tol, numbers.Real) or not tol > 0:
        raise ValueError(f"tol must be a positive float; got {tol!r}")
    a = edge_proxy(p, kind=proxy, score_norm=score_norm, energy=energy)
    b = shared_vertex_term(a) if covariance_term else np.zeros(p.shape)
    warm = None
    if warm_start is not None:
        warm = check_probabilities("warm_start", warm_start)
        if warm.shape != p.shape:
            raise ValueError(f"warm_start must have the shape of p_hat {p.shape}; got "
                             f"{warm.shape}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive int; got max_iter={max_iter!r}")
    if not (isinstance(tol, (int, float, np.floating)) and 0 < float(tol) < 1):
        raise ValueError(f"tol must be a number in (0, 1) (a relative KKT residual); got {tol!r}")
    sizes = resolve_sizes(size, c, bud, lo)
    m = int(np.prod(batch, dtype=np.int64))
    out = _solve_flat(
        p.reshape(m, G), c.reshape(m, G), bud.reshape(m), lo, a.reshape(m, G, G),
        b.reshape(m, G), None if warm is None else warm.reshape(m, G),
        None if sizes is None else sizes.reshape(m), fallback, float(tol), int(max_iter))
    return AllocationResult(**{k: (v.reshape(*batch, G) if k == "pi" else v.reshape(batch))
                               for k, v in out.items()})


def _solve_flat(
    p: np.ndarray, c: np.ndarray, bud: np.ndarray, lo: float, a: np.ndarray, b: np.ndarray,
    warm: np.ndarray | None, n: np.ndarray | None, fallback: bool, tol: float, max_iter: int,
) -> dict[str, np.ndarray]:
    """:func:`allocate` on validated, flattened ``(m, G)`` problems; returns the fields."""
    m, G = c.shape
    full = c.sum(axis=1)
    floor = lo * full
    pi = np.full((m, G), np.nan)
    lam = np.zeros(m)
    nu = np.full(m, np.nan) if n is None else np.zeros(m)
    iters = np.zeros(m, dtype=np.int64)
    status = np.full(m, "optimal", dtype=object)
    todo = np.ones(m, dtype=bool)
    isolated = ~np.any(a > 0, axis=2)
    degenerate = isolated.all(axis=1)
    if n is None:
        at_full = (bud >= full) & todo
        pi[at_full] = 1.0
        status[at_full] = "full"
        todo &= ~at_full
        at_floor = (bud <= floor * (1 + _EDGE_RTOL)) & todo
        pi[at_floor] = lo
        status[at_floor] = "floor"
        todo &= ~at_floor
        deg = degenerate & todo
        pi[deg] = np.minimum(1.0, bud[deg] / full[deg])[:, None]
        status[deg] = "degenerate"
        todo &= ~deg
    else:
        nf = n.astype(np.float64)
        mincost_pt = _min_cost_point(c, lo, nf)
        mincost = np.einsum("bi,bi->b", c, mincost_pt)
        at_full = (n == G) & todo
        pi[at_full] = 1.0
        status[at_full] = "full"
        todo &= ~at_full
        # n = G pi_min forces every unit to the floor.
        at_floor = (nf <= G * lo * (1 + _EDGE_RTOL)) & todo
        pi[at_floor] = lo
        status[at_floor] = "floor"
        todo &= ~at_floor
        tight = (mincost >= bud * (1 - _EDGE_RTOL)) & todo
        pi[tight] = mincost_pt[tight]
        status[tight] = np.where(np.abs(nf[tight] - G * lo) <= 1e-12, "floor", "min_cost")
        todo &= ~tight
        deg = degenerate & todo
        if deg.any():
            pi[deg] = _uniform_with_size(nf[deg], full[deg], bud[deg], mincost[deg],
                                         mincost_pt[deg])
            status[deg] = "degenerate"
            todo &= ~deg
    idx = np.flatnonzero(todo)
    if idx.size:
        every = idx.size == m  # the common case: no fancy-index copies
        A_, B_ = (a, b) if every else (a[idx], b[idx])
        C_ = c[idx] / bud[idx, None]
        # Normalise f(1) = 1, in two steps so subnormal proxies do not overflow 1/f(1).
        amax = A_.max(axis=(1, 2))
        A_ = A_ / amax[:, None, None]
        B_ = B_ / amax[:, None]
        s2 = 1.0 / (0.5 * A_.sum(axis=(1, 2)) + B_.sum(axis=1))
        A_ *= s2[:, None, None]
        B_ *= s2[:, None]
        fixed = isolated[idx] if n is None else np.zeros((idx.size, G), dtype=bool)
        y0 = _start_point(C_, lo, None if n is None else n[idx].astype(np.float64),
                          None if n is None else mincost_pt[idx],
                          None if warm is None else warm[idx])
        mu_scale = 0.1
        y, zc, nu_s, it, _ = ipm_batch(
            np.ascontiguousarray(A_), np.ascontiguousarray(B_), np.ascontiguousarray(C_),
            lo, np.zeros(idx.size) if n is None else n[idx].astype(np.float64),
            n is not None, np.ascontiguousarray(fixed), np.ascontiguousarray(y0),
            mu_scale, 0.1 * tol, max_iter)
        y = np.clip(y, lo, 1.0)
        if n is not None:
            y = _restore_size(y, C_, lo, n[idx].astype(np.float64))
        pi[idx] = y
        lam[idx] = zc * amax / s2 / bud[idx]
        if n is not None:
            nu[idx] = nu_s * amax / s2
        iters[idx] = it
    # Multipliers for the closed-form cases.
    fl_mask = status == "floor"
    if fl_mask.any() and n is None:
        g = proxy_gradient(pi[fl_mask], a[fl_mask], b[fl_mask])
        lam[fl_mask] = np.maximum(np.max(-g / c[fl_mask], axis=1), 0.0)
    full_mask = status == "full"
    if n is not None and full_mask.any():
        nu[full_mask] = -np.max(proxy_gradient(pi[full_mask], a[full_mask], b[full_mask]),
                                axis=1)
    res = kkt_residual(pi, a, b, c, bud, lo, lam, nu if n is not None else None,
                       None if n is None else n.astype(np.float64))
    # Every feasible point is optimal when a = 0, and the tight size cases have a single
    # feasible point: only feasibility is measurable there.
    special = (status == "degenerate") | (status == "min_cost")
    if n is not None:
        special |= status == "floor"
    if special.any():
        cost_rel = np.einsum("bi,bi->b", c, pi) / bud
        feas = np.maximum(cost_rel - 1.0, 0.0)
        if n is not None:
            feas = np.maximum(feas, np.abs(pi.sum(axis=1) - n) / n)
        res = np.where(special, feas, res)
        lam[special] = np.nan
        if n is not None:
            nu[special] = np.nan
    converged = res <= tol
    failed = ~converged & (status == "optimal")
    status[failed] = "max_iterations"
    fb = np.zeros(m, dtype=bool)
    if fallback and failed.any():
        fb = failed
        pi[fb] = uniform_fallback(c[fb], bud[fb], lo, None if n is None else n[fb])
        status[fb] = "fallback_uniform"
        # The solver's multipliers and residual belong to the discarded iterate: report the
        # fallback point's feasibility only (cost within budget, sum pi = n).
        feas = np.maximum(np.einsum("bi,bi->b", c[fb], pi[fb]) / bud[fb] - 1.0, 0.0)
        if n is not None:
            feas = np.maximum(feas, np.abs(pi[fb].sum(axis=1) - n[fb]) / n[fb])
            nu[fb] = np.nan
        res = res.copy()
        res[fb] = feas
        lam[fb] = np.nan
    return {
        "pi": pi,
        "objective": proxy_value(pi, a, b),
        "kkt_residual": res,
        "iterations": iters,
        "status": status.astype(str),
        "converged": converged,
        "fallback_used": fb,
        "expected_cost": np.einsum("bi,bi->b", c, pi),
        "budget_multiplier": lam,
        "size_multiplier": nu,
        "size": np.full(m, -1, dtype=np.int64) if n is None else n.astype(np.int64),
    }
