r"""The allocation objective, its gradient and the KKT residual that certifies a solution.

With ``u = 1/pi`` the variance proxy (Eq. convex-objective written in ``pi``) is

    f(pi) = sum_{i<j} a_ij / (pi_i pi_j) + sum_i b_i / pi_i,   grad f = -(A u + b)_i / pi_i^2,

and ``pi`` solves ``min f`` s.t. ``c . pi <= budget``, ``pi_min <= pi <= 1`` [, ``sum pi = n``]
iff multipliers ``lam >= 0`` and ``nu`` exist with ``w = grad f + lam c + nu 1`` zero on free
coordinates, ``>= 0`` at ``pi_min``, ``<= 0`` at 1 and ``lam (budget - c . pi) = 0`` (the
constraints are linear, so the KKT conditions are necessary and sufficient for this convex
program). The public functions validate their input; the underscored ones are the same
formulas for arrays the solver built.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite, check_pi_min, check_real
from pairht.allocation.proxies import check_energy


# ------------------------------------------------------------------------- unchecked formulas
def _value_gradient(pi: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """``f`` and ``grad f`` at ``pi`` from one product ``A u`` (the ``(..., G, G)`` pass)."""
    u = 1.0 / pi
    au = np.einsum("...ij,...j->...i", a, u)
    value = 0.5 * np.einsum("...i,...i->...", u, au) + np.einsum("...i,...i->...", b, u)
    return value, -(au + b) * u * u


def _value(pi: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _value_gradient(pi, a, b)[0]


def _gradient(pi: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _value_gradient(pi, a, b)[1]


def _residual(
    pi: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, budget: np.ndarray,
    pi_min: float, lam: np.ndarray, nu: np.ndarray | None = None,
    size: np.ndarray | None = None, shift: np.ndarray | None = None,
    room: np.ndarray | None = None, g: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`kkt_residual` on validated arrays; see there for the terms.

    ``g`` is the gradient at ``pi`` if the caller has it (:func:`_value_gradient`).

    ``shift`` (shape ``(...)``) states that ``nu`` is the multiplier of the size row when the
    budget row is written ``(c - shift) . pi <= budget - shift n`` (the same constraint on
    ``sum pi = n``): stationarity is then ``g + lam (c - shift) + nu``, identical in exact
    arithmetic to ``g + lam c + (nu - lam shift)`` but free of the cancellation between
    ``lam c`` and ``nu`` that nearly tied costs cause (there ``lam`` is huge and
    ``nu ~ -lam c``). The budget slack is then measured on the slice as
    ``room - (c - shift) . pi`` (see :func:`_room`; ``room`` overrides ``budget - shift n``,
    e.g. with the exact least cost when the budget counts as that cost).
    """
    if g is None:
        g = _gradient(pi, a, b)
    gamma = np.maximum(np.max(np.abs(g), axis=-1), 1e-300)
    nu_ = np.zeros_like(lam) if nu is None else np.where(np.isnan(nu), 0.0, nu)
    cw = c if shift is None else c - shift[..., None]
    w = g + lam[..., None] * cw + nu_[..., None]
    stat = np.max(np.abs(pi - np.clip(pi - w / gamma[..., None], pi_min, 1.0)), axis=-1)
    cmax = np.max(c, axis=-1)
    if shift is None or size is None:
        rel_cost = np.einsum("...i,...i->...", c, pi) / budget
    else:
        rm = _room(budget, size, shift) if room is None else room
        rel_cost = 1.0 - (rm - np.einsum("bi,bi->b", cw, pi)) / budget
    dual = np.maximum(-lam, 0.0) * cmax / gamma
    comp = np.abs(lam) * cmax / gamma * np.abs(1.0 - rel_cost)
    feas = np.maximum(rel_cost - 1.0, 0.0)
    box = np.maximum(np.max(np.maximum(pi_min - pi, pi - 1.0), axis=-1), 0.0)
    out = np.maximum.reduce([stat, dual, comp, feas, box])
    if size is not None:
        out = np.maximum(out, np.abs(pi.sum(axis=-1) - size) / size)
    # A NaN anywhere (a failed iterate) must not read as a small residual.
    return np.where(np.isnan(out) | np.isnan(pi).any(axis=-1), np.inf, out)


def _room(budget: np.ndarray, size: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``budget - k n`` per flat problem, exactly rounded (``math.fsum``), ``k = shift``.

    The budget row written on the slice ``sum pi = n`` is ``(c - k) . pi <= budget - k n``.
    Its slack ``room - (c - k) . pi`` equals ``budget - c . pi`` up to ``k (sum pi - n)``, the
    size row's own violation (measured by the size term). The plain ``budget - c . pi`` of a
    float ``pi`` carries an error of ``1e-16 budget`` from the size alone; multiplied by the
    budget multiplier, about ``1 / (relative cost spread)`` for nearly tied costs, that error
    would exceed any tolerance though the point is exact to rounding. ``c - k`` is exact for
    costs within a factor 2 of ``k`` (Sterbenz).
    """
    out = np.empty(budget.shape[0])
    for r in range(budget.shape[0]):
        k, n = float(shift[r]), float(size[r])
        if n == int(n) and 0 < n <= 1e6:
            out[r] = math.fsum([float(budget[r])] + [-k] * int(n))
        else:
            out[r] = float(budget[r]) - k * n
    return out


# ------------------------------------------------------------------------- input checks
def _check_point(pi: ArrayLike, a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, ...]:
    # Not limited to [pi_min, 1]: the residual of an infeasible point is meaningful (its box
    # term measures the violation), and so is the proxy anywhere pi > 0.
    p = check_finite("pi", pi)
    if p.ndim < 1 or p.shape[-1] < 2:
        raise ValueError(f"pi must have shape (..., G) with G >= 2; got {p.shape}")
    if np.any(p <= 0):
        idx = tuple(int(i) for i in np.argwhere(p <= 0)[0])
        raise ValueError(f"pi must be positive (the proxy has 1/pi_i); pi{list(idx)} = "
                         f"{p[idx]!r}")
    aa = check_energy(a, shape=(*p.shape, p.shape[-1]), name="a")
    bb = check_finite("b", b)
    if bb.shape != p.shape:
        raise ValueError(f"b must have the shape of pi {p.shape}; got {bb.shape}")
    if np.any(bb < 0):
        raise ValueError(f"b must be nonnegative (a sum of square roots); got min "
                         f"{float(bb.min())!r}")
    return p, aa, bb


def _batch_array(name: str, x: ArrayLike, batch: tuple[int, ...]) -> np.ndarray:
    arr = check_finite(name, x)
    try:
        return np.broadcast_to(arr, batch).astype(np.float64)
    except ValueError:
        raise ValueError(f"{name} must be a scalar or have the batch shape {batch}; got shape "
                         f"{arr.shape}") from None


# ------------------------------------------------------------------------- public
def proxy_value(pi: ArrayLike, a: ArrayLike, b: ArrayLike) -> np.ndarray:
    r"""Variance proxy ``f(pi) = sum_{i<j} a_ij/(pi_i pi_j) + sum_i b_i/pi_i``, shape ``(...)``.

    Parameters
    ----------
    pi : (..., G) array_like     positive probabilities
    a : (..., G, G) array_like   edge proxy: symmetric, nonnegative (diagonal ignored)
    b : (..., G) array_like      shared-vertex term, nonnegative

    Examples
    --------
    >>> import numpy as np
    >>> float(proxy_value(np.array([0.5, 1.0]), np.array([[0, 2.0], [2.0, 0]]), np.ones(2)))
    7.0
    """
    return _value(*_check_point(pi, a, b))


def proxy_gradient(pi: ArrayLike, a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Gradient of :func:`proxy_value` in ``pi``: ``-(A u + b)_i / pi_i^2`` with ``u = 1/pi``.

    Examples
    --------
    >>> proxy_gradient([0.5, 1.0], [[0, 2.0], [2.0, 0]], [1.0, 1.0]).tolist()
    [-12.0, -5.0]
    """
    return _gradient(*_check_point(pi, a, b))


def kkt_residual(
    pi: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    c: ArrayLike,
    budget: ArrayLike,
    pi_min: float,
    lam: ArrayLike,
    nu: ArrayLike | None = None,
    size: ArrayLike | None = None,
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
    A NaN in ``pi`` gives ``inf``.

    Parameters
    ----------
    pi : (..., G) array_like          the point, positive (outside the box: counted)
    a, b : (..., G, G), (..., G)      edge proxy and shared-vertex term
    c : (..., G) array_like           positive costs
    budget : float or (...)           positive budget
    pi_min : float                    floor in (0, 1]
    lam : float or (...)              budget multiplier (finite)
    nu : float or (...), optional     size multiplier (finite with a size; ignored, and may be
                                      NaN as :func:`~pairht.allocation.allocate` reports it,
                                      without one)
    size : int or (...), optional     the fixed size ``n``

    Returns
    -------
    (...) ndarray

    Examples
    --------
    >>> a = [[0.0, 1.0], [1.0, 0.0]]
    >>> float(kkt_residual([0.5, 0.5], a, [0.0, 0.0], [1.0, 1.0], 1.0, 0.1, 8.0))
    0.0
    """
    p, aa, bb = _check_point(pi, a, b)
    batch = p.shape[:-1]
    cc = check_finite("c", c)
    if cc.shape != p.shape:
        raise ValueError(f"c must have the shape of pi {p.shape}; got {cc.shape}")
    if np.any(cc <= 0):
        raise ValueError(f"c must be positive (token costs); got min {float(cc.min())!r}")
    bud = _batch_array("budget", budget, batch)
    if np.any(bud <= 0):
        raise ValueError(f"budget must be positive; got min {float(bud.min())!r}")
    lo = check_pi_min(pi_min)
    lm = _batch_array("lam", lam, batch)
    nn = None
    if size is not None:
        nn = _batch_array("size", size, batch)
        if np.any((nn < 1) | (nn > p.shape[-1])):
            raise ValueError(f"size must lie in [1, G = {p.shape[-1]}] (a fixed sample size); "
                             f"got {size!r}")
        if nu is None:
            raise ValueError("nu (the size multiplier) is required when size is given")
        nu_arr = _batch_array("nu", nu, batch)
    else:
        nu_arr = None
    return _residual(p, aa, bb, cc, bud, lo, lm, nu_arr, nn)


def estimate_multipliers(
    pi: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    c: ArrayLike,
    budget: float,
    pi_min: float,
    size: float | None = None,
    rtol: float = 1e-6,
) -> tuple[float, float]:
    """Least-squares KKT multipliers ``(lam, nu)`` of one problem from its primal point.

    Interior coordinates (``rtol`` away from both bounds) must satisfy
    ``g_i + lam c_i + nu = 0``; ``lam`` is fitted there when the budget binds (relative slack
    under ``rtol``) and is 0 otherwise (a negative fit is clipped to 0). With no interior
    coordinate, ``lam`` is the smallest value making every lower-bound coordinate
    sign-correct. ``nu`` is 0 without a size.

    Parameters
    ----------
    pi : (G,) array_like; a : (G, G); b, c : (G,); budget : float > 0; pi_min : float in (0, 1]
    size : float, optional      the fixed size ``n``
    rtol : float in (0, 1)      bound / budget activity tolerance

    Examples
    --------
    >>> lam, nu = estimate_multipliers([0.5, 0.5], [[0, 1.0], [1.0, 0]], [0, 0], [1, 1], 1.0,
    ...                                0.1)
    >>> round(lam, 12), nu
    (8.0, 0.0)
    """
    p, aa, bb = _check_point(pi, a, b)
    if p.ndim != 1:
        raise ValueError(f"pi must be 1-d (one problem); got shape {p.shape}")
    cc = check_finite("c", c)
    if cc.shape != p.shape or np.any(cc <= 0):
        raise ValueError(f"c must be positive with the shape of pi {p.shape}; got {c!r}")
    bud = check_real("budget", budget, low=0.0, high=np.inf, high_open=True)
    lo = check_pi_min(pi_min)
    n = None if size is None else check_real("size", size, low=0.0, high=float(p.size))
    tol = check_real("rtol", rtol, low=0.0, high=1.0, high_open=True)
    return _lstsq_multipliers(p, aa, bb, cc, bud, lo, n, tol)


def _lstsq_multipliers(
    p: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, budget: float, lo: float,
    size: float | None, rtol: float = 1e-6,
) -> tuple[float, float]:
    g = _gradient(p, a, b)
    free = (p > lo + rtol) & (p < 1.0 - rtol)
    binds = c @ p >= budget * (1.0 - rtol)
    cols = []
    if binds:
        cols.append(c)
    if size is not None:
        cols.append(np.ones_like(c))
    if not cols:
        return 0.0, 0.0
    if free.any():
        A = np.stack(cols, axis=1)[free]
        sol = np.linalg.lstsq(A, -g[free], rcond=None)[0]
    elif binds and size is None:
        sol = np.array([max(0.0, float(np.max(-g / c)))])
    else:
        sol = np.zeros(len(cols))
    lam = max(float(sol[0]), 0.0) if binds else 0.0
    nu = float(sol[-1]) if size is not None else 0.0
    return lam, nu
