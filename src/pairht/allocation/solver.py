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
``x``. See :func:`allocate` for the algorithm and the truthfulness contract of the result.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite, check_pi_min, check_probabilities
from pairht.allocation._checks import (
    broadcast_budget,
    check_flag,
    check_max_iter,
    check_tol,
)
from pairht.allocation._free_setup import (
    DEGENERATE,
    FLOOR,
    FULL,
    INTERIOR,
    cold_start_free,
    free_setup,
)
from pairht.allocation._ipm_kernel import ipm_batch
from pairht.allocation._kkt_kernel import certify
from pairht.allocation._pair_tables import isolated_fill
from pairht.allocation.kkt import (
    _gradient,
    _lstsq_multipliers,
    _residual,
    _room,
    _value,
    kkt_residual,
    proxy_gradient,
    proxy_value,
)
from pairht.allocation.proxies import (
    PROXY_KINDS,
    ProxyKind,
    check_pair_table_size,
    proxy_terms,
)
from pairht.allocation.sizes import (
    EDGE_RTOL,
    FACE_RTOL,
    _largest_affordable,
    extreme_cost,
    least_cost_face,
    min_cost_point,
)

__all__ = [
    "KKT_TOL", "AllocationResult", "allocate", "auto_size", "kkt_residual", "proxy_gradient",
    "proxy_value", "resolve_sizes", "uniform_fallback", "validate_costs", "validate_problem",
]

#: Default stopping tolerance on the relative KKT residual (see :func:`kkt_residual`).
KKT_TOL = 1e-8
#: Fraction of the cost room (floor -> budget) the cold start spends.
_START_ROOM = 0.95
#: The same for the cold start without a size, which the kernel then moves to the Neyman
#: allocation at that cost (``ipm_batch``'s ``neyman``). The budget binds at the optimum unless
#: ``pi = 1`` is affordable: at G = 32 (benchmarks/bench_allocation.py's problems) 0.999 took
#: 3.6 iterations on average, 0.99 4.2, 0.97 4.7 and 0.95 5.2; the kernel's centred duals
#: (no dual above ``1e2`` times the gradient's scale) keep the thin slack harmless.
_COLD_ROOM = 0.999


@dataclasses.dataclass(frozen=True)
class AllocationResult:
    """Solution of a batch of PAIR allocation problems; every field has the batch shape.

    For a single problem (``p_hat`` of shape ``(G,)``) every field but ``pi`` is a Python
    scalar of the type named below (``float``, ``int``, ``str`` or ``bool``), not a 0-d array.

    **Truthfulness contract.** ``kkt_residual`` is always measured at the returned ``pi``
    with the returned multipliers (:func:`kkt_residual`, see :func:`allocate` for the one
    rounding caveat), ``converged`` is ``kkt_residual <= tol`` and nothing else, and a ``pi``
    that is not feasible (``c . pi <= budget``, ``pi_min <= pi <= 1``, ``sum pi = n``, each to
    ``1e-12`` relative) is only ever returned with ``status == "max_iterations"`` (a failed
    solve; ``converged`` is then False).

    Attributes
    ----------
    pi : (..., G) ndarray
        Continuation probabilities ``pi_i`` in ``[pi_min, 1]``.
    objective : (...) ndarray or float
        Variance proxy ``sum_{i<j} a_ij/(pi_i pi_j) + sum_i b_i/pi_i`` at ``pi``.
    kkt_residual : (...) ndarray or float
        Relative KKT residual of the returned ``pi`` with the reported multipliers
        (:func:`kkt_residual`); ``inf`` if ``pi`` holds a NaN.
    iterations : (...) ndarray of int, or int
        Interior-point iterations (0 for problems solved in closed form).
    status : (...) ndarray of str, or str
        ``"optimal"`` (interior point), ``"full"`` (``pi = 1``: the budget affords every
        suffix, or ``n = G``), ``"floor"`` (``pi = pi_min``: budget exactly the floor's cost,
        or ``n = G pi_min``), ``"min_cost"`` (size route with the budget exactly the least cost
        of ``n`` units: solved on the least-cost face, a single point unless costs tie at the
        margin), ``"degenerate"`` (``a = 0``: every feasible ``pi`` is optimal, tie-break
        documented in :func:`allocate`), and the two failures: ``"max_iterations"`` (the
        interior point did not reach ``tol``; ``pi`` is its last iterate and may be
        infeasible) and ``"fallback_uniform"`` (that iterate replaced by the uniform fallback,
        which is feasible).
    converged : (...) ndarray of bool, or bool
        ``kkt_residual <= tol``: the KKT conditions hold at ``pi`` (so ``pi`` is optimal).
    fallback_used : (...) ndarray of bool, or bool
        Whether the uniform fallback replaced a failed solve (only with ``fallback=True``).
    expected_cost : (...) ndarray or float
        Predicted expected suffix cost ``sum_i c_i pi_i``.
    unspent_budget : (...) ndarray or float
        ``budget - expected_cost``: predicted tokens the allocation leaves unused. Zero up to
        rounding when the budget binds; positive when it does not (budget above the full
        cost, or a fixed size ``n`` whose optimum costs less than the budget: with tied costs
        ``n`` units cost exactly ``n c`` whatever ``pi``). Negative only by rounding
        (``>= -1e-12 budget``) or with ``status == "max_iterations"``.
    budget_multiplier : (...) ndarray or float
        Lagrange multiplier ``lambda >= 0`` of the budget (objective units per token).
    size_multiplier : (...) ndarray or float
        Multiplier ``nu`` of ``sum pi = n`` (NaN without ``size``).
    size : (...) ndarray of int, or int
        The ``n`` imposed (``-1`` without ``size``).
    """

    pi: np.ndarray
    objective: Any
    kkt_residual: Any
    iterations: Any
    status: Any
    converged: Any
    fallback_used: Any
    expected_cost: Any
    unspent_budget: Any
    budget_multiplier: Any
    size_multiplier: Any
    size: Any

    @classmethod
    def from_flat(
        cls, fields: dict[str, np.ndarray], batch: tuple[int, ...], G: int
    ) -> AllocationResult:
        """The result of flat ``(m, G)`` solves, given the batch shape ``batch``.

        ``pi`` becomes ``(*batch, G)`` and every other field ``batch``; for a single problem
        (``batch == ()``) those are Python scalars (``float``, ``int``, ``str``, ``bool``),
        not 0-d arrays, so they print, compare and serialise as the values they are.
        """
        out: dict[str, Any] = {}
        for key, value in fields.items():
            if key == "pi":
                out[key] = value.reshape(*batch, G)
            elif batch == ():
                out[key] = value.reshape(()).item()
            else:
                out[key] = value.reshape(batch)
        return cls(**out)


# ---------------------------------------------------------------------------------- helpers
def _restore_size(y: np.ndarray, c: np.ndarray, lo: float, n: np.ndarray) -> np.ndarray:
    """Make ``sum y = n`` hold to rounding without changing the cost ``c . y``.

    The interior-point method meets the linear size equality only up to its tolerance
    (``~1e-10``) after damped steps. The residual is removed by the smallest slack-weighted
    correction ``delta = s (k1 + k2 c)`` with ``sum delta = n - sum y`` and ``c . delta = 0``,
    ``s_i = min(y_i - lo, 1 - y_i)`` so bound-active (and fixed) coordinates do not move.
    ``c`` is the (shifted) cost row the kernel used: zero where the budget was dropped.
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
        y0 = np.empty((m, G))
        cold_start_free(np.ascontiguousarray(cs), lo, _START_ROOM, y0)
        lower = lo * full
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


# ---------------------------------------------------------------------------------- sizes
def _as_int_sizes(size: Any, batch: tuple[int, ...]) -> np.ndarray:
    if isinstance(size, (bool, np.bool_)):
        raise TypeError(f"size must be None, 'auto' or an int (the fixed sample size n), not a "
                        f"bool; got {size!r}")
    try:
        arr = np.asarray(size)
    except (TypeError, ValueError):
        arr = np.asarray(None)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"size must be None, 'auto', an int or an array of ints (the fixed "
                        f"sample size n); got {size!r}")
    integral = arr.dtype.kind in "iu" or (
        bool(np.all(np.isfinite(arr))) and bool(np.all(arr == np.round(arr))))
    if not integral:
        raise ValueError(f"size must be None, 'auto', an int or an array of ints (the fixed "
                         f"sample size n); got {size!r}")
    try:
        return np.broadcast_to(arr.astype(np.int64), batch).copy()
    except ValueError:
        raise ValueError(f"size must be an int or have the batch shape {batch}; got shape "
                         f"{arr.shape}") from None


def _lower_size(G: int, lo: float) -> int:
    """Smallest admissible size: one pair, and no fewer than the floor forces."""
    return max(2, int(np.ceil(G * lo - 1e-12)))


def resolve_sizes(
    size: int | ArrayLike | None, c: np.ndarray, bud: np.ndarray, lo: float
) -> np.ndarray | None:
    """Validated explicit fixed sizes ``n`` of shape ``c.shape[:-1]`` (or ``None``).

    ``size`` is ``None`` or integers with ``max(2, G * pi_min) <= n <= G``, and each ``n``
    must be affordable: the cheapest ``n`` units at 1 and the rest at ``pi_min`` must cost at
    most the budget (:func:`~pairht.allocation.sizes.extreme_cost`). ``"auto"`` is resolved by
    :func:`allocate` (it needs the solver) and raises here. Shared by :func:`allocate` and
    :func:`~pairht.allocation.reference_slsqp` so both solve the same problems. ``c`` and
    ``bud`` are validated (:func:`validate_problem`).
    """
    if size is None:
        return None
    batch, G = c.shape[:-1], c.shape[-1]
    if isinstance(size, str):
        raise ValueError(f"size must be None, 'auto' or an int; got {size!r}")
    sizes = _as_int_sizes(size, batch)
    badn = (sizes < 2) | (sizes > G) | (sizes < G * lo - 1e-12)
    if badn.any():
        v = int(np.atleast_1d(sizes)[np.argmax(np.atleast_1d(badn))])
        raise ValueError(f"size must satisfy max(2, G * pi_min) <= n <= G = {G} "
                         f"(G * pi_min = {G * lo:g}); got n = {v}")
    m = int(np.prod(batch, dtype=np.int64))
    n = sizes.reshape(m)
    cf, bf = c.reshape(m, G), np.broadcast_to(bud, batch).reshape(m)
    mincost = extreme_cost(cf, lo, n.astype(np.float64))
    short = mincost > bf * (1 + EDGE_RTOL)
    if short.any():
        i = int(np.argmax(short))
        raise ValueError(
            f"size n = {int(n[i])} is infeasible with this budget: the cheapest n units "
            f"(the rest at pi_min = {lo}) cost {float(mincost[i])!r} > budget = "
            f"{float(bf[i])!r}; lower n or use size='auto'")
    return sizes


def uniform_share(budget: ArrayLike, full: ArrayLike) -> np.ndarray:
    r"""The uniform probability at a budget, ``min(1, budget / full)`` elementwise (1 where
    ``full = 0``: nothing to pay for): the one formula of every uniform rule (the
    ``uniform``/``srswor`` allocators, a group of one unfinished candidate, a symmetric
    group, the solver's fallback and degenerate groups, :func:`uniform_allocation`).

    Examples
    --------
    >>> uniform_share([200.0, 500.0, 3.0], [400.0, 400.0, 0.0]).tolist()
    [0.5, 1.0, 1.0]
    """
    bud = np.asarray(budget, dtype=np.float64)
    tot = np.asarray(full, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tot > 0, np.minimum(1.0, bud / np.where(tot > 0, tot, 1.0)), 1.0)


def uniform_fallback(
    c: np.ndarray, bud: np.ndarray, lo: float, n: np.ndarray | None
) -> np.ndarray:
    """The appendix's fallback for flat ``(m, G)`` problems: uniform probabilities at the
    same expected cost, ``min(1, budget / sum c)`` (kept in ``[pi_min, 1]``); with sizes ``n``,
    ``n / G`` where affordable, else its mix with the least-cost point (sum stays ``n``)."""
    full = c.sum(axis=1)
    if n is None:
        return np.clip(uniform_share(bud, full), lo, 1.0)[:, None] * np.ones_like(c)
    nf = n.astype(np.float64)
    mc = min_cost_point(c, lo, nf)
    return _uniform_with_size(nf, full, bud, np.einsum("bi,bi->b", c, mc), mc)


# ---------------------------------------------------------------------------------- public
def validate_costs(
    c_hat: ArrayLike, budget: ArrayLike, pi_min: float, shape: tuple[int, ...] | None = None,
    name: str = "c_hat",
) -> tuple[np.ndarray, np.ndarray, float]:
    """Check costs, budget and floor; return ``c`` ``(..., G)``, ``budget`` ``(...)``, ``pi_min``.

    ``c_hat`` finite and positive with ``G >= 2`` (and the ``shape`` given, if any);
    ``pi_min`` in ``(0, 1]``; ``budget`` finite, a scalar or of the batch shape, and at least
    the floor's cost ``pi_min * sum(c_hat)`` (Proposition 2's existence condition). Raises
    ``ValueError``/``TypeError`` naming the argument (``name`` for the costs), the value and
    the rule.
    """
    c = check_finite(name, c_hat)
    if shape is not None and c.shape != shape:
        raise ValueError(f"{name} must have the shape of p_hat {shape}; got {c.shape}")
    if c.ndim < 1 or c.shape[-1] < 2:
        raise ValueError(f"{name} must have shape (..., G) with G >= 2 candidates; got "
                         f"{c.shape}")
    if np.any(c <= 0):
        idx = tuple(int(i) for i in np.argwhere(c <= 0)[0])
        raise ValueError(f"{name} must be positive (predicted suffix tokens); {name}{list(idx)} = "
                         f"{c[idx]!r}")
    lo = check_pi_min(pi_min)
    batch = c.shape[:-1]
    bud = broadcast_budget(budget, batch)
    check_floor_cost(bud, c.sum(axis=-1), lo, f"sum({name})")
    return c, bud, lo


def check_floor_cost(bud: np.ndarray, full: np.ndarray, lo: float, cost: str) -> None:
    """``ValueError`` unless every budget is at least the floor's cost ``lo * full`` (within
    ``EDGE_RTOL``, Proposition 2's existence condition); ``cost`` names the summed costs."""
    floor = lo * full
    bad = bud < floor * (1.0 - EDGE_RTOL)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(np.atleast_1d(bad))[0])[: np.ndim(bud)]
        raise ValueError(
            f"budget is infeasible: it must be at least the floor's cost pi_min * {cost} = "
            f"{float(floor[idx])!r} (pi_min = {lo}); got budget{list(idx)} = {float(bud[idx])!r}")


def check_warm_start(warm_start: ArrayLike | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """``warm_start`` probabilities of the shape of ``p_hat`` (``shape``), or None."""
    if warm_start is None:
        return None
    warm = check_probabilities("warm_start", warm_start)
    if warm.shape != shape:
        raise ValueError(f"warm_start must have the shape of p_hat {shape}; got {warm.shape}")
    return warm


def validate_problem(
    p_hat: ArrayLike, c_hat: ArrayLike, budget: ArrayLike, pi_min: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Check an allocation problem; return ``p``, ``c`` (both ``(..., G)``), ``budget``, ``pi_min``.

    ``p_hat`` must be probabilities in [0, 1] of shape ``(..., G)``, ``G >= 2`` (``None``
    raises ``TypeError``: the proxy needs predictions), small enough that the ``(..., G, G)``
    pair tables fit :data:`~pairht._validation.MAX_TABLE_BYTES` (checked before anything is
    allocated); the rest as :func:`validate_costs`.
    """
    p = check_probabilities("p_hat", p_hat)
    if p.shape[-1] < 2:
        raise ValueError(f"p_hat/c_hat must have shape (..., G) with G >= 2 candidates; got "
                         f"{p.shape}")
    check_pair_table_size(p.shape)
    c, bud, lo = validate_costs(c_hat, budget, pi_min, shape=p.shape)
    return p, c, bud, lo


def _check_proxy_kind(proxy: object) -> None:
    if not isinstance(proxy, str) or proxy not in PROXY_KINDS:
        raise ValueError(f"proxy must be one of {PROXY_KINDS} (the edge proxy registry); got "
                         f"{proxy!r}")


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
    row, size row) once and reuses it for predictor and corrector. With the disagreement proxy
    (the default, also on a sub-group) the vertex block is ``diag + rank 2``
    (``a = p (1-p)^T + (1-p) p^T`` off the diagonal), so it is solved in Woodbury form in
    ``O(G)`` per right-hand side, as are ``f`` and its gradient; each iteration's form is
    checked against its own residual and replaced by a dense Cholesky factorisation when the
    check fails. Other proxies are factorised densely. Chosen over a dual method
    (bisection / Newton on the budget multiplier with an inner projected Newton in ``pi``)
    because one Newton system handles the budget, the bounds and the size equality together
    with quadratic local convergence (3.6-4.1 iterations on average from a cold start at
    ``G = 8..64`` in ``benchmarks/bench_allocation.py``, at most ~15), needs no active-set
    guessing and never leaves the box. The merit check (Armijo on ``f - t sum log slacks``
    plus the size row's exact penalty ``2 |nu| |n - sum pi|``, falling back to the pure
    centring direction, a descent direction because ``f`` is convex) is what makes it
    converge on every problem: plain Mehrotra steps can cycle on strongly curved
    ``1/(pi_i pi_j)``. The objective is normalised to ``f(1) = 1`` and the budget to 1; the
    start point satisfies ``sum pi = n`` exactly, which every Newton step conserves.

    **Size route: parallel rows.** On the slice ``sum pi = n`` the budget row ``c`` and the
    size row ``1`` can be (nearly) parallel: with tied costs every point of the slice costs
    ``n c``. The cost over the slice spans ``[mincost(n), maxcost(n)]``
    (:mod:`pairht.allocation.sizes`), so a budget ``>= maxcost(n)`` (relative ``1e-12``) is
    implied by the size and the budget row is dropped (``budget_multiplier = 0``); a budget
    equal to ``mincost(n)`` leaves only the least-cost face, solved over the units tied at
    the marginal cost with the others fixed (status ``"min_cost"``); otherwise the budget row
    is written ``(c - min c) . pi <= budget - n min c`` (the same constraint on the slice),
    which removes the common part of the two rows from the Newton system, so nearly tied
    costs (``1e-6`` relative jitter) converge like any other problem.

    **Closed-form cases** (``iterations = 0``): ``budget >= sum c`` without a size gives
    ``pi = 1`` (``f`` is nonincreasing in every ``pi_i``); a budget within ``1e-12`` (relative)
    of the floor's cost ``pi_min sum c`` gives ``pi = pi_min``; ``size = G`` gives ``pi = 1``
    and ``size = G pi_min`` gives ``pi = pi_min``; a least-cost face that is a single point.

    **size="auto".** The value ``v(n)`` of the program with ``sum pi = n`` is convex in ``n``
    (the perturbation function of a convex program), and its minimum over real ``n`` is at
    ``s = sum pi*`` of the program without a size. The best integer size is therefore
    ``floor(s)`` or ``ceil(s)``, each clipped to ``[max(2, ceil(G pi_min)), n_max]`` with
    ``n_max`` the largest affordable size
    (:func:`~pairht.allocation.sizes.largest_affordable_size`); both are solved and the one
    with the smaller objective is kept (ties: the larger ``n``, which spends more). Budget the
    best size leaves unspent is reported in ``unspent_budget``. Costs three solves.

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

    **What the result promises** (:class:`AllocationResult`). ``kkt_residual`` is
    :func:`kkt_residual` at the returned ``pi`` with the returned multipliers, in every case
    (closed forms included: their multipliers are computed, e.g. the smallest ``lambda``
    making every bound sign-correct on a least-cost face). The one caveat is rounding: on the
    size route it is evaluated with the budget row shifted by ``k`` (``min c``, or the
    marginal cost on a face), ``w = g + lam (c - k) + (nu + lam k)``, which equals
    ``g + lam c + nu`` in exact arithmetic; recomputing it from the rounded ``nu`` can differ
    by about ``1e-16 lam max(c) / max|g|`` (only visible for costs tied to ``1e-8``).
    ``converged`` is ``kkt_residual <= tol`` (default ``1e-8``; the interior point stops at
    ``tol/10``). A failed solve keeps ``status = "max_iterations"``, its last iterate (which
    may violate a constraint: the residual says by how much) and its multipliers.

    **Warm start.** ``warm_start`` (previous step's ``pi``) is moved 1e-3 inside the box,
    given the sum ``n`` (size route) by shrinking towards the floor or towards 1, then pulled
    towards the cold start only as far as needed to keep 1% of the budget room slack.
    Measured in ``benchmarks/bench_allocation.py`` (previous solution perturbed by 5%, B =
    128, budget half the full cost, no size): mean iterations 4.6 (G = 8), 4.9 (16), 5.4
    (32), 5.9 (64) against 4.1, 3.6, 3.6, 3.8 cold, whose start without a size is the
    Neyman allocation of the gradient at a constant point (``ipm_batch``'s ``neyman``): there
    a perturbed previous solution is no better a start; the solution is the same.

    **Fallback.** With ``fallback=True`` a problem whose solve fails gets the uniform
    allocation with the same expected cost (``pi = min(1, budget / sum c)``, or ``n / G`` with
    a size, mixed with the least-cost point if unaffordable), status ``"fallback_uniform"`` and
    ``fallback_used = True``. Its multipliers are the least-squares ones at that point
    (:func:`~pairht.allocation.estimate_multipliers`) and ``kkt_residual`` is measured there
    (so it is the fallback's distance from optimality, not 0). Never used on a solved problem.

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
        Adds ``sum_i pi_i = n`` (fixed-size designs). ``"auto"``: the best affordable size
        (see above).
    fallback : bool
        Replace a failed solve by the uniform allocation at the same expected cost (reported
        in ``fallback_used``). Never used unless the solver fails.
    score_norm, energy : array_like, optional
        Inputs of the ``"score_norm"`` and ``"energy"`` proxies.
    tol : float
        KKT tolerance in (0, 1). ``max_iter`` (int >= 1) caps interior-point iterations.

    Returns
    -------
    AllocationResult

    Raises
    ------
    ValueError
        Infeasible or malformed input: budget below the floor's cost (the message reports
        it), non-positive costs, ``p_hat`` outside [0, 1], ``pi_min`` outside (0, 1], NaN,
        shape mismatch, a size that cannot be met, an unknown proxy, a batch whose
        ``(..., G, G)`` pair tables would exceed
        :data:`~pairht._validation.MAX_TABLE_BYTES` (refused before allocating them).
    TypeError
        An argument of the wrong kind: ``p_hat=None``, a non-bool ``fallback`` or
        ``covariance_term``, a non-int ``max_iter``, complex or string arrays.

    Examples
    --------
    >>> import numpy as np
    >>> res = allocate([0.1, 0.5, 0.9, 0.5], [100.0, 400.0, 200.0, 300.0], budget=500.0)
    >>> res.converged, round(res.expected_cost, 9)
    (True, 500.0)
    >>> res.pi.round(3).tolist()
    [0.888, 0.385, 0.609, 0.452]

    Tied costs with a size: the budget is implied by the size and the optimum is not uniform.

    >>> res = allocate([0.1, 0.5, 0.9, 0.5, 0.3, 0.7], [100.0] * 6, budget=300.0, size=3)
    >>> res.status, res.converged, round(res.objective, 3)
    ('optimal', True, 156.134)
    """
    p, c, bud, lo = validate_problem(p_hat, c_hat, budget, pi_min)
    _check_proxy_kind(proxy)
    cov = check_flag("covariance_term", covariance_term)
    fb = check_flag("fallback", fallback)
    tol_ = check_tol("tol", tol)
    iters = check_max_iter("max_iter", max_iter)
    a, b = proxy_terms(p, proxy, cov, score_norm, energy)
    # a and b are built here, valid by construction: the program's own checks are skipped,
    # and the kernel is told when a is the disagreement of p (it need not scan a to see it)
    return _solve_checked(p, c, bud, lo, a, b, size, fb, warm_start, tol_, iters,
                          known=proxy == "disagreement")


def solve_program(
    p_hat: ArrayLike,
    c_hat: ArrayLike,
    budget: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    pi_min: float = 0.08,
    *,
    size: int | str | ArrayLike | None = None,
    fallback: bool = False,
    warm_start: ArrayLike | None = None,
    tol: float = 1e-8,
    max_iter: int = 100,
) -> AllocationResult:
    r"""PAIR's program with a given edge proxy ``a`` *and* shared-vertex term ``b``.

    ``min sum_{i<j} a_ij / (pi_i pi_j) + sum_i b_i / pi_i`` s.t. ``sum_i c_i pi_i <= budget``,
    ``pi_min <= pi_i <= 1`` [, ``sum_i pi_i = n``]: the one solver of the package.
    :func:`allocate` is this program with ``a`` from a named proxy and ``b`` derived from it;
    call this one with a ``b`` computed directly
    (:func:`pairht.allocation.energy.length_energy`) or with finished candidates folded in
    (:mod:`pairht.step.pair_program`).

    Parameters
    ----------
    p_hat, c_hat : (..., G) array_like     as in ``allocate`` (``p_hat`` only validated)
    budget : float or (...) array_like
    a : (..., G, G) array_like             symmetric, nonnegative, zero diagonal
    b : (..., G) array_like                nonnegative
    pi_min, size, fallback, warm_start, tol, max_iter : as in ``allocate``

    Returns
    -------
    AllocationResult

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.allocation.proxies import edge_proxy, shared_vertex_term
    >>> p, c = np.array([0.1, 0.5, 0.9, 0.5]), np.array([100.0, 400.0, 200.0, 300.0])
    >>> a = edge_proxy(p)
    >>> res = solve_program(p, c, 500.0, a, shared_vertex_term(a))
    >>> res.pi.round(3).tolist() == allocate(p, c, 500.0).pi.round(3).tolist()
    True
    """
    p, c, bud, lo = validate_problem(p_hat, c_hat, budget, pi_min)
    batch, G = p.shape[:-1], p.shape[-1]
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != (*batch, G, G) or b.shape != p.shape:
        raise ValueError(f"a must have shape {(*batch, G, G)} and b shape {p.shape}; got "
                         f"{a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()) or a.min() < 0 or b.min() < 0:
        raise ValueError("a and b must be finite and nonnegative (expected energies)")
    return _solve_checked(p, c, bud, lo, a, b, size, check_flag("fallback", fallback),
                          warm_start, check_tol("tol", tol), check_max_iter("max_iter", max_iter))


def _solve_checked(p: np.ndarray, c: np.ndarray, bud: np.ndarray, lo: float, a: np.ndarray,
                   b: np.ndarray, size: Any, fb: bool, warm_start: ArrayLike | None,
                   tol_: float, iters: int, known: bool = False) -> AllocationResult:
    """:func:`solve_program` on checked arrays and options (:func:`allocate` builds ``a`` and
    ``b`` itself and skips their checks; ``known``: ``a`` is the disagreement of ``p``)."""
    batch, G = p.shape[:-1], p.shape[-1]
    warm = check_warm_start(warm_start, p.shape)
    auto = isinstance(size, str) and size == "auto"
    sizes = None if auto else resolve_sizes(size, c, bud, lo)
    m = math.prod(batch)
    flat = (p.reshape(m, G), c.reshape(m, G), bud.reshape(m), lo, a.reshape(m, G, G),
            b.reshape(m, G), None if warm is None else warm.reshape(m, G))
    if auto:
        out = _solve_auto(*flat, fb, tol_, iters, known)
    else:
        out = _solve_flat(*flat, None if sizes is None else sizes.reshape(m), fb, tol_, iters,
                          known)
    return AllocationResult.from_flat(out, batch, G)


def auto_size(
    p_hat: ArrayLike,
    c_hat: ArrayLike,
    budget: ArrayLike,
    pi_min: float = 0.08,
    **kwargs: Any,
) -> np.ndarray:
    r"""The fixed size ``size="auto"`` chooses: the best affordable ``n`` (see :func:`allocate`).

    ``floor(s)`` or ``ceil(s)`` with ``s = sum pi*`` of the program without a size (the value
    of the sized program is convex in ``n``), clipped to
    ``[max(2, ceil(G pi_min)), largest affordable size]``, whichever has the smaller objective.
    ``kwargs`` are passed to :func:`allocate` (proxy, covariance_term, ...). Shape ``(...)``.

    Examples
    --------
    >>> int(auto_size([0.1, 0.5, 0.9, 0.5, 0.3, 0.7], [100.0] * 6, 300.0))
    3
    """
    if "size" in kwargs:
        raise TypeError("auto_size chooses the size: do not pass size")
    return allocate(p_hat, c_hat, budget, pi_min, size="auto", **kwargs).size


# ---------------------------------------------------------------------------------- solving
def _solve_auto(
    p: np.ndarray, c: np.ndarray, bud: np.ndarray, lo: float, a: np.ndarray, b: np.ndarray,
    warm: np.ndarray | None, fallback: bool, tol: float, max_iter: int, known: bool = False,
) -> dict[str, np.ndarray]:
    """``size="auto"``: solve without a size, then at ``floor``/``ceil`` of its ``sum pi``."""
    G = c.shape[1]
    lower = _lower_size(G, lo)
    nmax = _largest_affordable(c, bud, lo)
    short = nmax < lower
    if short.any():
        i = int(np.argmax(short))
        cost = float(extreme_cost(c[i:i + 1], lo, np.array([float(lower)]))[0])
        raise ValueError(
            f"size='auto' cannot go below max(2, ceil(G * pi_min)) = {lower}, and that size is "
            f"infeasible with this budget: the cheapest {lower} units (the rest at pi_min = "
            f"{lo}) cost {cost!r} > budget = {float(bud[i])!r}; raise the budget or use "
            f"size=None (Bernoulli design)")
    free = _solve_flat(p, c, bud, lo, a, b, warm, None, False, tol, max_iter, known)
    s = free["pi"].sum(axis=1)
    s = np.where(np.isfinite(s), s, lower)
    n_lo = np.clip(np.floor(s + 1e-9), lower, nmax).astype(np.int64)
    n_hi = np.clip(np.ceil(s - 1e-9), lower, nmax).astype(np.int64)
    out = _solve_flat(p, c, bud, lo, a, b, warm, n_lo, fallback, tol, max_iter, known)
    two = np.flatnonzero(n_hi > n_lo)
    if two.size:
        hi = _solve_flat(p[two], c[two], bud[two], lo, a[two], b[two],
                         None if warm is None else warm[two], n_hi[two], fallback, tol, max_iter,
                         known)
        ok_lo, ok_hi = out["converged"][two], hi["converged"]
        better = hi["objective"] <= out["objective"][two] * (1 + 1e-12)
        take = (ok_hi & (~ok_lo | better)) | (~ok_hi & ~ok_lo & (
            hi["kkt_residual"] < out["kkt_residual"][two]))
        rows = two[take]
        for k, v in hi.items():
            out[k][rows] = v[take]
    return out


def _face_multipliers(
    g: np.ndarray, c: np.ndarray, t: np.ndarray, free: np.ndarray, nu: np.ndarray
) -> np.ndarray:
    """Smallest ``lambda >= 0`` making the fixed units of a least-cost face sign-correct.

    With stationarity written ``w = g + lam (c - t) + nu`` (``nu`` the size multiplier on the
    tied group), units cheaper than ``t`` sit at 1 and need ``w <= 0``, dearer ones sit at
    ``pi_min`` and need ``w >= 0``; both hold for every ``lam`` above the returned value.
    """
    h = g + nu[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        need_up = np.where(c < t[:, None], h / (t[:, None] - c), 0.0)
        need_dn = np.where(c > t[:, None], -h / (c - t[:, None]), 0.0)
    need = np.where(free, 0.0, np.maximum(need_up, need_dn))
    return np.maximum(need.max(axis=1), 0.0)


def _solve_flat(
    p: np.ndarray, c: np.ndarray, bud: np.ndarray, lo: float, a: np.ndarray, b: np.ndarray,
    warm: np.ndarray | None, n: np.ndarray | None, fallback: bool, tol: float, max_iter: int,
    known: bool = False,
) -> dict[str, np.ndarray]:
    """:func:`allocate` on validated, flattened ``(m, G)`` problems; returns the fields.
    ``known``: every ``a[k]`` is the disagreement of ``p[k]`` (see :func:`ipm_batch`)."""
    m, G = c.shape
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)  # one layout for the kernels
    full = c.sum(axis=1)
    pi = np.full((m, G), np.nan)
    lam = np.zeros(m)
    nu = np.zeros(m)  # size multiplier for the budget row written (c - shift)
    shift = np.zeros(m)
    iters = np.zeros(m, dtype=np.int64)
    status = np.full(m, "optimal", dtype="<U16")  # wide enough for "fallback_uniform"
    todo = np.ones(m, dtype=bool)
    isolated = np.empty((m, G), dtype=bool)  # rows of a without a nonzero entry
    isolated_fill(a, isolated)
    # Interior-point set-up per problem: cost row (scaled budget 1; zero = budget dropped),
    # the budget scale that row was divided by (0: dropped), fixed vertices and the start.
    row = np.zeros((m, G))
    scale = np.zeros(m)
    fixed = np.zeros((m, G), dtype=bool)
    y0 = np.full((m, G), np.nan)
    nf = None if n is None else n.astype(np.float64)
    face_t = face_free = face_pt = face_tied = None
    any_face = False  # a problem solved on the least-cost face (status "min_cost")
    if nf is None:  # same as ``n is None``; testing nf lets the type checker narrow it
        # Closed forms (pi = 1 if the budget affords it, pi_min at the floor's cost, the
        # uniform share if a = 0), else the scaled row and the cold start, in one pass.
        code = np.empty(m, dtype=np.int8)
        free_setup(c, bud, full, lo, isolated, EDGE_RTOL, _COLD_ROOM, code, row, scale, fixed,
                   y0)
        todo = code == INTERIOR
        if not todo.all():
            for kind, name in ((FULL, "full"), (FLOOR, "floor"), (DEGENERATE, "degenerate")):
                status[code == kind] = name
            pi[code == FULL] = 1.0
            pi[code == FLOOR] = lo
            deg = code == DEGENERATE
            pi[deg] = uniform_share(bud[deg], full[deg])[:, None]
        if warm is not None and todo.any():
            idx = np.flatnonzero(todo)
            y0[idx] = _start_point(row[idx], lo, None, None, warm[idx])
            y0[fixed] = lo
    else:
        mc = min_cost_point(c, lo, nf)
        mincost = np.einsum("bi,bi->b", c, mc)
        maxcost = extreme_cost(c, lo, nf, largest=True)
        at_full = (n == G) & todo
        pi[at_full] = 1.0
        status[at_full] = "full"
        todo &= ~at_full
        at_floor = (nf <= G * lo * (1 + EDGE_RTOL)) & todo
        pi[at_floor] = lo
        status[at_floor] = "floor"
        todo &= ~at_floor
        deg = isolated.all(axis=1) & todo
        pi[deg] = _uniform_with_size(nf[deg], full[deg], bud[deg], mincost[deg], mc[deg])
        status[deg] = "degenerate"
        todo &= ~deg
        # The budget row is implied by the size row on the slice: drop it (row stays 0).
        implied = todo & (bud >= maxcost * (1 - EDGE_RTOL))
        # Only the least-cost face is feasible. A budget within FACE_RTOL above the least cost
        # leaves an interior sliver the interior-point method cannot resolve in floating point
        # (it ends at max_iterations, or off the size row): solve on the face then; the point
        # costs the least cost, so it is feasible, and optimal up to that relative slack.
        tight = todo & ~implied & (mincost * (1 + FACE_RTOL) >= bud * (1 - EDGE_RTOL))
        inner = todo & ~implied & ~tight
        face_pt, face_free, face_t, face_tied = least_cost_face(c, lo, nf)
        face_free = face_free & tight[:, None]
        status[tight] = "min_cost"
        any_face = bool(tight.any())
        single = tight & ~face_free.any(axis=1)
        pi[single] = face_pt[single]
        todo &= ~single
        shift[tight] = face_t[tight]
        on_face = tight & ~single
        fixed[on_face] = ~face_free[on_face]
        y0[on_face] = face_pt[on_face]
        kmin = c.min(axis=1)
        shift[inner] = kmin[inner]
        scale[inner] = bud[inner] - kmin[inner] * nf[inner]
        row[inner] = (c[inner] - kmin[inner, None]) / scale[inner, None]
        start = implied | inner
        if start.any():
            y0[start] = _start_point(row[start], lo, nf[start], mc[start],
                                     None if warm is None else warm[start])
    idx = np.flatnonzero(todo)
    if idx.size:
        every = idx.size == m  # the common case: no fancy-index copies
        A_, B_ = (a, b) if every else (a[idx], b[idx])
        R_, sc_ = (row, scale) if every else (row[idx], scale[idx])
        y, zc, nu_s, it, _, amax, s2 = ipm_batch(
            A_, B_, np.ascontiguousarray(p if every else p[idx]), R_,
            lo, np.zeros(idx.size) if nf is None else nf[idx], n is not None,
            fixed if every else fixed[idx], y0 if every else y0[idx],
            0.1, 0.1 * tol, max_iter, known, nf is None and warm is None)
        np.minimum(np.maximum(y, lo, out=y), 1.0, out=y)  # the box, as np.clip(y, lo, 1)
        if nf is not None:
            y = _restore_size(y, R_, lo, nf[idx])
        kept = sc_ > 0  # 0: the budget row was dropped, its multiplier is 0
        lam_ = np.where(kept, zc * amax / s2 / np.where(kept, sc_, 1.0), 0.0)
        if every:
            pi, lam, iters = y, lam_, it
        else:
            pi[idx], lam[idx], iters[idx] = y, lam_, it
        if n is not None:
            nu[idx] = nu_s * amax / s2
    # Multipliers of the closed forms (every bound sign-correct, complementarity exact);
    # a batch solved entirely by the interior point (the common case) has none.
    if idx.size < m or any_face:
        g = _gradient(pi, a, b)
        if n is None:
            fl = status == "floor"
            lam[fl] = np.maximum(np.max(-g[fl] / c[fl], axis=1), 0.0)
        else:
            fu = status == "full"
            nu[fu] = -np.max(g[fu], axis=1)
            fl = status == "floor"
            nu[fl] = np.max(-g[fl], axis=1)
            tight = status == "min_cost"
            if tight.any():
                assert face_t is not None and face_tied is not None
                tied = face_tied & tight[:, None]
                cnt = tied.sum(axis=1)
                single = tight & (iters == 0)
                # a single tied unit strictly inside: its stationarity fixes nu
                gsum = np.where(tied, g, 0.0).sum(axis=1)
                nu[single] = np.where(cnt[single] > 0, -gsum[single] / np.maximum(cnt[single], 1),
                                      0.0)
                lam[tight] = _face_multipliers(g[tight], c[tight], face_t[tight], tied[tight],
                                               nu[tight])
    room = None
    c_res = c
    if nf is not None:
        # On the slice the budget row is (c - shift) . pi <= budget - shift n; a budget that
        # counts as the least cost (EDGE_RTOL) is measured as that cost, in the same form.
        room = _room(bud, nf, shift)
        tight = status == "min_cost"
        if any_face:
            assert face_t is not None and face_pt is not None and face_tied is not None
            # ... and costs that count as the marginal cost t are measured as t.
            c_res = np.where(face_tied & tight[:, None], face_t[:, None], c)
            room[tight] = np.einsum("bi,bi->b", c_res[tight] - face_t[tight, None],
                                    face_pt[tight])
    # The certificate of every returned point, in one compiled pass (kkt._residual's terms).
    objective, res, cost = np.empty(m), np.empty(m), np.empty(m)
    zeros = np.zeros(m) if nf is None else nf
    certify(pi, a, b, np.ascontiguousarray(c_res),
            np.ascontiguousarray(bud), lo, lam, nu, zeros, shift,
            zeros if room is None else room, nf is not None, objective, res, cost)
    converged = res <= tol
    failed = ~converged & (iters > 0)
    status[failed] = "max_iterations"
    fb = np.zeros(m, dtype=bool)
    if fallback and failed.any():
        fb = failed
        pi[fb] = uniform_fallback(c[fb], bud[fb], lo, None if n is None else n[fb])
        status[fb] = "fallback_uniform"
        for k in np.flatnonzero(fb):
            lam[k], nu[k] = _lstsq_multipliers(pi[k], a[k], b[k], c[k], float(bud[k]), lo,
                                               None if nf is None else float(nf[k]))
        shift[fb] = 0.0
        objective[fb] = _value(pi[fb], a[fb], b[fb])
        res[fb] = _residual(pi[fb], a[fb], b[fb], c[fb], bud[fb], lo, lam[fb],
                            None if n is None else nu[fb], None if nf is None else nf[fb])
        converged = res <= tol
    if fb.any() or c_res is not c:  # the certificate's cost is c_res . pi before the fallback
        cost = np.einsum("bi,bi->b", c, pi)
    return {
        "pi": pi,
        "objective": objective,
        "kkt_residual": res,
        "iterations": iters,
        "status": status,
        "converged": converged,
        "fallback_used": fb,
        "expected_cost": cost,
        "unspent_budget": bud - cost,
        "budget_multiplier": lam,
        "size_multiplier": np.full(m, np.nan) if n is None else nu - lam * shift,
        "size": np.full(m, -1, dtype=np.int64) if n is None else n.astype(np.int64),
    }
