"""Numba kernel of the batched interior-point solver (see :func:`pairht.allocation.allocate`).

One compiled loop over the problems of a batch; each problem runs a Mehrotra
predictor-corrector primal-dual interior-point method on

    min f(y) = 1/2 u^T A u + b^T u,  u = 1/y
    s.t. cs . y <= 1,  lo <= y_i <= 1  [,  sum_i y_i = n],

with ``f`` and the budget pre-scaled by the caller. Hand-written Cholesky rather than
``np.linalg`` calls: the predictor, the corrector and the budget/size columns share one
factorisation per iteration, and a failed pivot is reported instead of raising inside
compiled code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

_FAST = {"reassoc", "contract"}

# Helpers that only read and write arrays their caller owns are compiled without numba's
# reference counting (its private ``_nrt`` option): a view of a row of ``V`` taken inside a
# counted function costs an atomic increment and decrement, and the iteration takes dozens.
# Where a numba release no longer has the option, the helpers compile with the counting on:
# slower, never wrong, and the package still imports.
try:
    from numba.core.options import TargetOptions as _TargetOptions

    _NO_NRT: dict[str, Any] = {"_nrt": False} if hasattr(_TargetOptions, "_nrt") else {}
except ImportError:  # pragma: no cover - numba's internal layout moved
    _NO_NRT = {}

# Rows of the per-vertex work array ``V`` (one (rows, G) array per batch): passing one array
# instead of two dozen keeps the calls of the iteration cheap (numba counts references to
# every array argument of a call with atomic operations, which cost more than a short
# loop over the vertices).
(_Y, _SL, _SU, _ZL, _ZU, _FF, _U, _Q, _GR, _RD, _DY, _DZL, _DZU, _TL,
 _TU, _UT, _ISL, _ISU, _IZL, _IZU, _DW, _XC, _XE, _CP, _C, _B, _P) = range(27)
_ROWS = 27


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _chol(M):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """In-place Cholesky ``M = L L^T`` reading and writing the lower triangle only.

    The diagonal receives ``1 / L_jj`` rather than ``L_jj``: :func:`_chol_solve` then
    multiplies instead of dividing on its serial chain (a division costs several times a
    multiply's latency, and the solves run three to four times per factorisation).
    Returns False on a non-positive pivot (``M`` is positive definite in exact arithmetic:
    the Hessian of the convex ``f`` plus the positive barrier diagonal).
    """
    n = M.shape[0]
    for j in range(n):
        s = M[j, j]
        for k in range(j):
            s -= M[j, k] * M[j, k]
        if not s > 0.0:  # also catches NaN
            return False
        inv = 1.0 / np.sqrt(s)
        M[j, j] = inv
        for i in range(j + 1, n):
            s = M[i, j]
            for k in range(j):
                s -= M[i, k] * M[j, k]
            M[i, j] = s * inv
    return True


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _chol_solve(L, x):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Solve ``L L^T z = x`` in place (``L`` from :func:`_chol`: inverse diagonal).

    The backward pass runs by rows of ``L`` (an update of the remaining entries per solved
    one) so it reads ``L`` contiguously, as the forward pass does.
    """
    n = L.shape[0]
    for i in range(n):
        s = x[i]
        for k in range(i):
            s -= L[i, k] * x[k]
        x[i] = s * L[i, i]
    for i in range(n - 1, -1, -1):
        xi = x[i] * L[i, i]
        x[i] = xi
        for k in range(i):
            x[k] -= L[i, k] * xi


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _wb_solve(W, x):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Solve ``K z = x`` in place with ``K = D + X S X^T`` in Woodbury form (:func:`_wb_factor`).

    ``z = D^-1 x - D^-1 X C^-1 X^T D^-1 x`` with the 2 x 2 capacitance ``C = S^-1 + X^T D^-1 X``:
    two dot products and one update, ``O(G)``.
    """
    G = x.shape[0]
    h1 = 0.0
    h2 = 0.0
    for i in range(G):
        t = x[i] * W[0, i]
        x[i] = t
        h1 += W[1, i] * t
        h2 += W[2, i] * t
    ci11 = W[3, 0]
    ci12 = W[3, 1]
    ci22 = W[3, 2]
    z1 = ci11 * h1 + ci12 * h2
    z2 = ci12 * h1 + ci22 * h2
    for i in range(G):
        x[i] -= W[0, i] * (W[1, i] * z1 + W[2, i] * z2)


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _solve(L, W, use_wb, x):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``K z = x`` in place: Woodbury form if ``use_wb``, else the Cholesky factor ``L``."""
    if use_wb:
        _wb_solve(W, x)
    else:
        _chol_solve(L, x)


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _wb_factor(d, x1, x2, sig, W):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Woodbury form of ``K = diag(d) + sig (x1 x2^T + x2 x1^T)`` into ``W`` (4, G).

    ``W[0] = 1/d``, ``W[1] = x1``, ``W[2] = x2`` and ``W[3, :3]`` the inverse capacitance
    ``C^-1``, ``C = S^-1 + X^T D^-1 X`` with ``S = sig [[0, 1], [1, 0]]``. Returns False when
    the form is unusable (a diagonal entry not positive, or ``C`` singular to rounding): the
    caller then factorises the dense matrix.
    """
    G = d.shape[0]
    c11 = 0.0
    c12 = 0.0
    c22 = 0.0
    for i in range(G):
        if not d[i] > 0.0:
            return False
        r = 1.0 / d[i]
        W[0, i] = r
        W[1, i] = x1[i]
        W[2, i] = x2[i]
        c11 += x1[i] * x1[i] * r
        c12 += x1[i] * x2[i] * r
        c22 += x2[i] * x2[i] * r
    c12 += 1.0 / sig
    det = c11 * c22 - c12 * c12
    if not abs(det) > 1e-10 * (abs(c11 * c22) + c12 * c12):
        return False
    W[3, 0] = c22 / det
    W[3, 1] = -c12 / det
    W[3, 2] = c11 / det
    return True


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _wb_accurate(d, x1, x2, sig, r, z):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Whether ``z`` solves ``(diag(d) + sig (x1 x2^T + x2 x1^T)) z = r`` to ``1e-10``.

    The residual is measured against the size of the terms it sums (normwise), so a solve
    the Woodbury form lost to cancellation is caught and redone with the dense factor.
    """
    G = z.shape[0]
    h1 = 0.0
    h2 = 0.0
    for i in range(G):
        h1 += x1[i] * z[i]
        h2 += x2[i] * z[i]
    err = 0.0
    scale = 0.0
    for i in range(G):
        dz = d[i] * z[i]
        lr = sig * (x1[i] * h2 + x2[i] * h1)
        err = max(err, abs(r[i] - dz - lr))
        scale = max(scale, abs(r[i]), abs(dz), abs(lr))
    return err <= 1e-10 * scale


@njit(cache=True, error_model="numpy", fastmath=_FAST, **_NO_NRT)
def _newton(mode, smu, tc, V, W, L, sc, zc, alpha, use_wb, s11, s12, s22, rp, has_eq):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Newton step for the complementarity targets of ``mode``, in three passes over the vertices.

    ``mode`` 0 is Mehrotra's predictor (targets 0), 1 his corrector (targets
    ``tl = smu - dy dzl``, ``tu = smu + dy dzu`` from the predictor's step held in
    ``dy, dzl, dzu``), 2 the pure centring direction (targets ``smu``); ``tc`` is the budget
    slack's target. The targets are written to ``tl, tu``; the step to ``dy, dzl, dzu``.
    Returns ``dzc``, ``dnu``, ``c . dy``, the largest step in (0, 1] keeping every slack and
    dual positive, ``sum_i (g_i - smu / sl_i + smu / su_i) dy_i`` (the barrier merit's slope
    without the budget term; not computed for the predictor), ``sum_i dy_i`` and whether
    every ``dy_i`` is finite.

    ``isl, isu`` (``izl, izu``) are the inverse slacks (duals): multiplications on the
    per-vertex loops instead of divisions, which cost several times more and do not
    vectorise; ``izl = izu = 0`` and ``dy = 0`` on fixed vertices.

    The augmented system ``[[M, c, e], [c^T, -sc/zc, 0], [e^T, 0, 0]]`` (vertices, budget,
    size) is solved by block elimination with the Cholesky factor ``L`` of ``M`` (or its
    Woodbury form ``W`` when ``use_wb``, whose two passes are merged with forming the right
    side and with the block elimination's dot products). The budget row enters as
    ``cp = c - alpha e`` with ``alpha = (c . M^-1 e) / (e . M^-1 e)``, i.e. orthogonalised
    against the size row in the ``M^-1`` metric (an exact rewriting: the size equation turns
    ``c . dy`` into ``cp . dy + alpha rp``, and the size multiplier absorbs ``alpha dzc``).
    The Schur complement ``[[cp.xc + sc/zc, cp.xe], [cp.xe, e.xe]]`` with the precomputed
    ``xc = M^-1 cp``, ``xe = M^-1 e`` is then nearly diagonal: computed directly, not as
    ``c.M^-1 c - (c.M^-1 e)^2 / e.M^-1 e``, which cancels to noise when the two rows are
    nearly parallel on the coordinates the barrier leaves free (tied costs, or a unit pressed
    against a bound). Keeping the budget out of ``M`` (rather than adding ``(zc/sc) c c^T``,
    which reaches 1e18 when the budget binds) keeps the factorisation well conditioned.
    """
    isl, isu, izl, izu, zl, zu = V[_ISL], V[_ISU], V[_IZL], V[_IZU], V[_ZL], V[_ZU]
    sl, su = V[_SL], V[_SU]
    cs, cp, ff, xc, xe, rd, g = V[_C], V[_CP], V[_FF], V[_XC], V[_XE], V[_RD], V[_GR]
    tl, tu, dy, dzl, dzu = V[_TL], V[_TU], V[_DY], V[_DZL], V[_DZU]
    G = dy.shape[0]
    h1 = 0.0
    h2 = 0.0
    for i in range(G):
        if mode == 0:
            ti = 0.0
            ui = 0.0
        elif mode == 1:
            ti = smu - dy[i] * dzl[i]
            ui = smu + dy[i] * dzu[i]
        else:
            ti = smu
            ui = smu
        tl[i] = ti
        tu[i] = ui
        r = (-rd[i] + ti * isl[i] - zl[i] - ui * isu[i] + zu[i]) if ff[i] > 0 else 0.0
        if use_wb:
            r *= W[0, i]
            h1 += W[1, i] * r
            h2 += W[2, i] * r
        dy[i] = r
    z1 = W[3, 0] * h1 + W[3, 1] * h2
    z2 = W[3, 1] * h1 + W[3, 2] * h2
    if not use_wb:
        _chol_solve(L, dy)
    cx = 0.0
    ex = 0.0
    for i in range(G):
        if use_wb:
            dy[i] -= W[0, i] * (W[1, i] * z1 + W[2, i] * z2)
        cx += cp[i] * dy[i]
        ex += ff[i] * dy[i]
    r2 = sc - tc / zc
    if has_eq:
        det = s11 * s22 - s12 * s12
        v1 = cx - (r2 - alpha * rp)
        v2 = ex - rp
        dzc = (s22 * v1 - s12 * v2) / det
        dnu = (s11 * v2 - s12 * v1) / det  # multiplier of e in the rewritten system
    else:
        dzc = (cx - r2) / s11
        dnu = 0.0
    cdy = 0.0
    mx = 1.0
    dd = 0.0
    edy = 0.0
    finite = True
    for i in range(G):
        if ff[i] > 0:
            d = dy[i] - dzc * xc[i] - (dnu * xe[i] if has_eq else 0.0)
            dl = (tl[i] - zl[i] * d) * isl[i] - zl[i]
            du = (tu[i] + zu[i] * d) * isu[i] - zu[i]
        else:
            d = 0.0
            dl = 0.0
            du = 0.0
        dy[i] = d
        dzl[i] = dl
        dzu[i] = du
        cdy += cs[i] * d
        # the four ratios first: only one max per vertex on the loop-carried chain
        mx = max(mx, max(max(-d * isl[i], d * isu[i]), max(-dl * izl[i], -du * izu[i])))
        if mode == 0:
            # The vertices' complementarity after a step al, sum (sl + al d)(zl + al dl) +
            # (su - al d)(zu + al du), is quadratic in al: its coefficients, so that Mehrotra's
            # sigma needs no pass of its own.
            dd += sl[i] * dl + d * zl[i] + su[i] * du - d * zu[i]
            edy += d * (dl - du)
        else:
            dd += (g[i] - smu * isl[i] + smu * isu[i]) * d
            edy += d
            finite = finite and np.isfinite(d)
    mx = max(mx, cdy / sc, -dzc / zc)
    return dzc, dnu - alpha * dzc, cdy, 1.0 / mx, dd, edy, finite


@njit(cache=True, error_model="numpy", fastmath=_FAST, **_NO_NRT)
def _reciprocals(V):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Inverse slacks and duals of the start; later iterations take them in the update pass.

    ``izl = izu = 0`` on fixed vertices (whose ``sl = su = 1`` and ``zl = zu = 0``).
    """
    sl, su, zl, zu, ff = V[_SL], V[_SU], V[_ZL], V[_ZU], V[_FF]
    isl, isu, izl, izu = V[_ISL], V[_ISU], V[_IZL], V[_IZU]
    for i in range(sl.shape[0]):
        isl[i] = 1.0 / sl[i]
        isu[i] = 1.0 / su[i]
        izl[i] = 1.0 / zl[i] if ff[i] > 0 else 0.0
        izu[i] = 1.0 / zu[i] if ff[i] > 0 else 0.0


@njit(cache=True, error_model="numpy", fastmath=_FAST, **_NO_NRT)
def _merit_change(A, V, sig, lowrank, sc, t, al, cdy, f0):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Change of the barrier merit ``f(y) - t sum log(slacks)`` along ``al * dy``.

    Returns ``f(y + al dy) - f0 - t sum log(1 + al ds / s)`` (inf outside the box). The log
    terms are accumulated as products of 32 ratios per ``log`` call (each ratio lies in
    ``[0.005, 1e3]`` under the fraction-to-boundary rule, so a product stays within
    ``[1e-74, 1e96]``): ``log`` dominated the iteration's cost otherwise. ``ut`` is scratch
    for the trial ``1/y``; with the disagreement structure the sums of :func:`_value` are
    taken in the same pass.
    """
    b, pk, y, isl, isu, ff, dy, ut = V[_B], V[_P], V[_Y], V[_ISL], V[_ISU], V[_FF], V[_DY], V[_UT]
    G = y.shape[0]
    logs = 0.0
    prod = 1.0
    cnt = 0
    t1 = 0.0
    t2 = 0.0
    dg = 0.0
    val = 0.0
    for i in range(G):
        v = 1.0 / (y[i] + al * dy[i])
        ut[i] = v
        if lowrank:
            t1 += pk[i] * v
            t2 += (1.0 - pk[i]) * v
            dg += pk[i] * (1.0 - pk[i]) * v * v
            val += b[i] * v
    for i in range(G):  # apart from the divisions above, which vectorise
        if ff[i] > 0:
            rl = 1.0 + al * dy[i] * isl[i]
            ru = 1.0 - al * dy[i] * isu[i]
            if not (rl > 0 and ru > 0):
                return np.inf
            prod *= rl * ru
            cnt += 1
            if cnt == 16:
                logs += np.log(prod)
                prod = 1.0
                cnt = 0
    rc = 1.0 - al * cdy / sc
    if not rc > 0:
        return np.inf
    logs += np.log(prod * rc)
    fv = val + sig * (t1 * t2 - dg) if lowrank else _value(A, b, pk, sig, False, ut)
    return (fv - f0) - t * logs


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _l1_size(rho, rp, edy, al):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Change of the size row's exact penalty ``rho |n - sum y|`` along ``al * dy`` and its
    slope at ``al = 0+``; ``rp = n - sum y``, ``edy = sum dy`` (the Newton row makes it ``rp``).

    The barrier merit alone has slope ``-dy M dy - zc (c.dy)^2 / sc - (nu + dnu) rp`` along a
    Newton direction: rounding leaves ``rp ~ 1e-12`` off the row, and with the huge,
    cancelling ``nu`` of nearly parallel budget and size rows the last term makes the slope
    positive, so no step passes the line search. With ``rho > |nu + dnu|`` the sum is a
    descent function again (the l1 merit of Nocedal & Wright, 2006, section 15.4).
    """
    change = rho * (abs(rp - al * edy) - abs(rp))
    if rp > 0.0:
        return change, -rho * edy
    if rp < 0.0:
        return change, rho * edy
    return change, rho * abs(edy)


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _value(A, b, pk, sig, lowrank, u):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``f = sum_{i<j} A_ij u_i u_j + b . u``; ``O(G)`` for the disagreement structure,
    ``sig (T1 T2 - sum_i p_i (1 - p_i) u_i^2) + b . u`` with ``T1 = p . u``,
    ``T2 = (1 - p) . u`` (both sums of nonnegative terms)."""
    G = u.shape[0]
    val = 0.0
    if lowrank:
        t1 = 0.0
        t2 = 0.0
        dg = 0.0
        for i in range(G):
            t1 += pk[i] * u[i]
            t2 += (1.0 - pk[i]) * u[i]
            dg += pk[i] * (1.0 - pk[i]) * u[i] * u[i]
            val += b[i] * u[i]
        return val + sig * (t1 * t2 - dg)
    for i in range(G):
        s = b[i]
        for j in range(i + 1, G):
            s += A[i, j] * u[j]
        val += s * u[i]
    return val


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _au_plus_b(A, b, pk, sig, lowrank, u, q):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``q = A u + b`` (zero diagonal ``A``); ``O(G)`` for the disagreement structure,
    ``q_i = b_i + sig (p_i (T2 - (1 - p_i) u_i) + (1 - p_i) (T1 - p_i u_i))``."""
    G = u.shape[0]
    if lowrank:
        t1 = 0.0
        t2 = 0.0
        for i in range(G):
            t1 += pk[i] * u[i]
            t2 += (1.0 - pk[i]) * u[i]
        for i in range(G):
            q[i] = b[i] + sig * (pk[i] * (t2 - (1.0 - pk[i]) * u[i])
                                 + (1.0 - pk[i]) * (t1 - pk[i] * u[i]))
        return
    for i in range(G):
        s = b[i]
        for j in range(G):
            s += A[i, j] * u[j]
        q[i] = s


@njit(cache=True, error_model="numpy", fastmath=True)
def _structure(a, p):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``max a``, ``sum a`` and the largest ``|a_ij - d_ij|`` (``d`` the disagreement of ``p``,
    0 on the diagonal). Full ``fastmath`` (the maxima vectorise): the caller's ``a`` is finite
    and ``p`` in [0, 1], so no NaN or inf can reach these loops."""
    G = a.shape[0]
    amax = 0.0
    asum = 0.0
    dev = 0.0
    for i in range(G):
        pi = p[i]
        qi = 1.0 - pi
        for j in range(i):
            v = a[i, j]
            amax = max(amax, v)
            asum += v
            dev = max(dev, abs(v - (pi * (1.0 - p[j]) + qi * p[j])))
        v = a[i, i]
        amax = max(amax, v)
        asum += v
        dev = max(dev, abs(v))
        for j in range(i + 1, G):
            v = a[i, j]
            amax = max(amax, v)
            asum += v
            dev = max(dev, abs(v - (pi * (1.0 - p[j]) + qi * p[j])))
    return amax, asum, dev


@njit(cache=True, error_model="numpy", fastmath=_FAST, **_NO_NRT)
def _disagreement_scale(p):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``max a`` and ``sum a`` of the disagreement table ``a_ij = p_i (1 - p_j) + (1 - p_i) p_j``
    (``i != j``) in ``O(G)``: the normalisation of a problem with that structure.

    ``a_ij`` is linear in ``p_j``, so the row maximum is at the largest or the smallest other
    ``p_j``; ``sum a = 2 (sum p sum (1 - p) - sum p (1 - p))`` (kept at least ``2 max a``, which
    it is in exact arithmetic). Any positive scale solves the same program; this one is the
    same whether the caller built ``a`` (``known``) or the kernel recognised it.
    """
    G = p.shape[0]
    i1 = 0
    j1 = 0
    for i in range(G):
        if p[i] > p[i1]:
            i1 = i
        if p[i] < p[j1]:
            j1 = i
    hi2 = -1.0
    lo2 = 2.0
    s1 = 0.0
    q1 = 0.0
    dg = 0.0
    for i in range(G):
        if i != i1:
            hi2 = max(hi2, p[i])
        if i != j1:
            lo2 = min(lo2, p[i])
        s1 += p[i]
        q1 += 1.0 - p[i]
        dg += p[i] * (1.0 - p[i])
    amax = 0.0
    for i in range(G):
        hi = hi2 if i == i1 else p[i1]
        lo = lo2 if i == j1 else p[j1]
        pi = p[i]
        qi = 1.0 - pi
        amax = max(amax, max(pi * (1.0 - hi) + qi * hi, pi * (1.0 - lo) + qi * lo))
    return amax, max(2.0 * (s1 * q1 - dg), 2.0 * amax)


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _scale(a, amax, s2, A):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``A = s2 (a / amax)``, the problem's normalised proxy (see :func:`ipm_batch`)."""
    G = a.shape[0]
    for i in range(G):
        for j in range(G):
            A[i, j] = (a[i, j] / amax) * s2



@njit(cache=True, error_model="numpy", fastmath=_FAST, **_NO_NRT)
def _neyman_start(V, lo):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Move a cold start ``y`` (cost ``T = c . y``, every free ``y_i`` inside the box) to the
    Neyman allocation of the separable problem the gradient at ``y`` describes, at the same
    cost. Returns whether it did (False: ``y`` is left as it was).

    With ``q = A u + b`` at ``y`` (``u = 1/y``, in ``q``), the objective near ``y`` behaves like
    ``sum_i q_i / y_i``, whose minimiser under ``c . y = T`` is ``y_i = t sqrt(q_i / c_i)``
    (Neyman, 1934); each free ``y_i`` is clipped to ``[lo + 1e-3 (y_i - lo),
    1 - 1e-3 (1 - y_i)]`` (a box the start lies in, so the cost ``T`` stays reachable) and
    ``t`` found on the cost, a nondecreasing piecewise-linear function of ``t``, by Newton
    steps safeguarded by bisection. It starts the interior-point iteration where the cost
    pressure ``q_i / (c_i y_i^2)`` is already equal across the vertices.
    """
    y, q, ff, c = V[_Y], V[_Q], V[_FF], V[_C]
    w, bl, bu = V[_TL], V[_TU], V[_UT]  # scratch: written before their use in the iteration
    G = y.shape[0]
    target = 0.0
    base = 0.0
    cw = 0.0
    tlo = np.inf
    thi = 0.0
    for i in range(G):
        target += c[i] * y[i]
        if ff[i] > 0:
            wi = np.sqrt(max(q[i], 0.0) / c[i])
            w[i] = wi
            bl[i] = lo + 1e-3 * (y[i] - lo)
            bu[i] = 1.0 - 1e-3 * (1.0 - y[i])
            cw += c[i] * wi
            if wi > 0.0:
                tlo = min(tlo, bl[i] / wi)
                thi = max(thi, bu[i] / wi)
        else:
            base += c[i] * y[i]
    if not (thi > 0.0 and np.isfinite(thi) and cw > 0.0 and np.isfinite(cw) and target < 1.0):
        return False
    tol = 1e-3 * (1.0 - target)  # the budget slack 1 - T, kept to a thousandth
    lo_t = tlo
    hi_t = thi
    t = min(max((target - base) / cw, lo_t), hi_t)
    for _ in range(60):
        cost = base
        slope = 0.0
        for i in range(G):
            if ff[i] > 0:
                v = t * w[i]
                if v <= bl[i]:
                    cost += c[i] * bl[i]
                elif v >= bu[i]:
                    cost += c[i] * bu[i]
                else:
                    cost += c[i] * v
                    slope += c[i] * w[i]
        if abs(cost - target) <= tol:
            for i in range(G):
                if ff[i] > 0:
                    y[i] = min(max(t * w[i], bl[i]), bu[i])
            return True
        if cost < target:
            lo_t = t
        else:
            hi_t = t
        tn = t + (target - cost) / slope if slope > 0.0 else -1.0
        t = tn if lo_t < tn < hi_t else 0.5 * (lo_t + hi_t)
    return False


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def ipm_batch(a, b, p, cs, lo, n, has_eq, fixed, y0, mu_scale, tol, max_iter, known=False,
              neyman=False):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Solve every problem; returns ``y (m, G)``, ``zc (m,)``, ``nu (m,)``, ``iters``, ``done``,
    ``amax (m,)``, ``s2 (m,)``.

    ``a, b`` are the raw proxy and vertex term; each problem is solved with
    ``A = s2 a / amax`` and ``B = s2 b / amax`` (``amax = max a``,
    ``s2 = 1 / (sum_ij a_ij / 2 + sum_i b_i) * amax``, so ``f(1) = 1``; two steps so that
    subnormal proxies do not overflow ``1/f(1)``), scaled here in the problem's own scratch
    rather than as whole-batch array passes by the caller. ``zc`` and ``nu`` are in those
    units (multiply by ``amax / s2`` for the proxy's). ``fixed[k, i]`` holds vertex ``i`` of
    problem ``k`` at ``y0[k, i]``. A zero cost row ``cs[k]`` drops the budget (its multiplier
    then tends to 0).

    ``p (m, G)`` are the success probabilities: a problem whose ``a`` is their disagreement
    ``a_ij = p_i (1 - p_j) + (1 - p_i) p_j`` (``i != j``, to ``1e-13 max a``; the default
    proxy, also on any sub-group) has the Newton matrix ``diag + rank 2``, solved in ``O(G)``
    per right-hand side in Woodbury form instead of an ``O(G^3)`` Cholesky factorisation;
    each iteration's form is checked on the budget column's solve (:func:`_wb_accurate`) and
    the dense factor is used instead when the check fails. ``known`` says that every ``a[k]``
    is that disagreement (the caller built it from ``p``), which skips the ``G x G`` scan
    that recognises it; either way such a problem is normalised by
    :func:`_disagreement_scale`, so the two give the same iterates. ``neyman`` says that the
    starts are cold ones without a size row (constant on the free vertices): each is moved
    to the Neyman allocation at its cost first (:func:`_neyman_start`), which saves about a
    third of the iterations or more (6.1 to 3.6 on average at G = 32 in the benchmark's
    problems, both starts at 99.9% of the cost room).

    An iteration is fourteen passes over the vertices when the Woodbury form holds and there
    is no size row: the gradient; the Woodbury diagonal and its inverse (vectorised); the
    residuals with the capacitance's sums and the right side of the budget column; that
    column's solve with the dot products of its check and of the Schur complement; the check;
    three per Newton direction (:func:`_newton`; Mehrotra's predicted complementarity comes
    out of the predictor's third); two for the merit (the trial ``1/y`` with ``f``'s sums,
    vectorised, then the slack ratios); and the update, which also forms ``1/y``, the
    next gradient's sums and the inverse slacks and duals.
    """
    m, G = cs.shape
    y_out = np.empty((m, G))
    zc_out = np.zeros(m)
    nu_out = np.zeros(m)
    it_out = np.zeros(m, dtype=np.int64)
    done = np.zeros(m, dtype=np.bool_)
    amax_out = np.empty(m)
    s2_out = np.empty(m)
    A = np.empty((G, G))
    K = np.empty((G, G))
    W = np.zeros((4, G))
    V = np.zeros((_ROWS, G))
    y, sl, su, zl, zu, ff, u, q = V[_Y], V[_SL], V[_SU], V[_ZL], V[_ZU], V[_FF], V[_U], V[_Q]
    g, rd, dy, dzl, dzu, isl, isu = V[_GR], V[_RD], V[_DY], V[_DZL], V[_DZU], V[_ISL], V[_ISU]
    izl, izu, dw, xc, xe, cp, bk, c, pk = (V[_IZL], V[_IZU], V[_DW], V[_XC], V[_XE], V[_CP],
                                           V[_B], V[_C], V[_P])
    for k in range(m):
        ak = a[k]
        for i in range(G):
            pk[i] = p[k, i]
            c[i] = cs[k, i]
        # Disagreement structure (see above): A = sig (p (1-p)^T + (1-p) p^T) off the diagonal.
        # Below amax ~ 1e-140 the Woodbury form multiplies two numbers of the proxy's scale
        # (sig = s2 / amax against p p^T), which leaves the normal doubles; the dense path
        # works on the normalised A and is exact there (p = [0, 1.5e-163, 1.5e-163] stalled).
        # A caller that built a from p says so (known) and saves the G x G scan.
        amax, asum = _disagreement_scale(pk)
        lowrank = known and amax >= 1e-140
        if not lowrank:
            amax_t, asum_t, dev = _structure(ak, pk)
            lowrank = dev <= 1e-13 * amax_t and amax_t >= 1e-140
            if not lowrank:
                amax, asum = amax_t, asum_t
        tot = 0.5 * asum / amax
        for i in range(G):
            bk[i] = b[k, i] / amax
            tot += bk[i]
        s2 = 1.0 / tot
        for i in range(G):
            bk[i] *= s2
        # The dense A = s2 a / amax is built only where it is used: the dense path, or an
        # iteration whose Woodbury form fails its check.
        have_A = not lowrank
        if have_A:
            _scale(ak, amax, s2, A)
        amax_out[k] = amax
        s2_out[k] = s2
        sig = s2 / amax
        nf = 0.0
        for i in range(G):
            ff[i] = 0.0 if fixed[k, i] else 1.0
            nf += ff[i]
            # A fixed vertex keeps its start value (pi_min for an isolated vertex; 1 or
            # pi_min off the tied group on the least-cost face).
            y[i] = y0[k, i]
        # Gradient scale at the start sets the initial barrier parameter.
        gam0 = 0.0
        for i in range(G):
            u[i] = 1.0 / y[i]
        _au_plus_b(A, bk, pk, sig, lowrank, u, q)
        if neyman and _neyman_start(V, lo):
            for i in range(G):
                u[i] = 1.0 / y[i]
            _au_plus_b(A, bk, pk, sig, lowrank, u, q)
        for i in range(G):
            gi = q[i] * u[i] * u[i]
            if ff[i] > 0 and gi > gam0:
                gam0 = gi
        cy = 0.0
        smin = 1.0
        for i in range(G):
            cy += c[i] * y[i]
            # Slacks are state variables, not recomputed from y: near a bound y - lo cancels
            # to a few ulps while the true slack (~ mu / z) keeps shrinking geometrically.
            sl[i] = y[i] - lo if ff[i] > 0 else 1.0
            su[i] = 1.0 - y[i] if ff[i] > 0 else 1.0
            smin = min(smin, sl[i], su[i])
        sc = 1.0 - cy
        smin = min(smin, sc)
        # Centred start z = mu0 / s with no dual above 1e2 gam0: a start pressed against a
        # bound or the budget (the interior a sliver, e.g. a budget 2e-9 above the least cost)
        # would otherwise get duals ~ gam0 / s (1e10 gam0), and the rounding of the huge,
        # cancelling zc c + nu then moves y off the size row by more than the sliver's width.
        mu0 = mu_scale * max(gam0, 1e-300) * min(1.0, smin * (1e2 / mu_scale))
        for i in range(G):
            zl[i] = mu0 / sl[i] * ff[i]
            zu[i] = mu0 / su[i] * ff[i]
        zc = mu0 / sc
        nu = 0.0
        ncomp = 2.0 * nf + 1.0
        cmax = 0.0
        t1 = 0.0
        t2 = 0.0
        sumy = 0.0
        for i in range(G):
            cmax = max(cmax, c[i])
            t1 += pk[i] * u[i]
            t2 += (1.0 - pk[i]) * u[i]
            sumy += y[i]
        _reciprocals(V)
        it = 0
        ok = False
        while True:
            # Gradient g = -(A u + b) u^2 (u = 1/y and, for the disagreement structure, the
            # sums t1 = p . u, t2 = (1 - p) . u come from the previous update) and f.
            if not lowrank:
                _au_plus_b(A, bk, pk, sig, False, u, q)
            gam = 0.0
            f0 = 0.0  # f(y) = sum_i u_i (b_i + sum_{j>i} a_ij u_j) = sum_i u_i (q_i + b_i) / 2
            for i in range(G):
                if lowrank:
                    q[i] = bk[i] + sig * (pk[i] * (t2 - (1.0 - pk[i]) * u[i])
                                          + (1.0 - pk[i]) * (t1 - pk[i] * u[i]))
                gi = -q[i] * u[i] * u[i]
                g[i] = gi
                gam = max(gam, abs(gi) if ff[i] > 0 else 0.0)
                f0 += 0.5 * u[i] * (q[i] + bk[i])
            gam = max(gam, 1e-300)
            igam = 1.0 / gam
            # For the disagreement structure the Newton matrix's Woodbury form (diagonal dw, its
            # inverse in W[0], rank-2 factors x1, x2 in W[1], W[2]), in a loop without
            # reductions or branches so that its division vectorises (the inverse slacks and
            # duals come from the update, :func:`_reciprocals`).
            if lowrank:
                for i in range(G):
                    ui2 = u[i] * u[i]
                    x1 = ui2 * pk[i] if ff[i] > 0 else 0.0
                    x2 = ui2 * (1.0 - pk[i]) if ff[i] > 0 else 0.0
                    d = (2.0 * q[i] * ui2 * u[i] + zl[i] * isl[i] + zu[i] * isu[i]
                         - 2.0 * sig * x1 * x2) if ff[i] > 0 else 1.0
                    dw[i] = d
                    W[1, i] = x1
                    W[2, i] = x2
                    W[0, i] = 1.0 / d
            # Residuals, and the capacitance's sums and the first half of the budget column's
            # solve (right side cp = c on the free vertices; without a size row the
            # orthogonalisation's alpha is 0).
            err = 0.0
            mu_v = 0.0  # the vertices' share of the complementarity
            c11 = c12 = c22 = 0.0  # capacitance sums X^T D^-1 X
            h1 = h2 = 0.0  # X^T D^-1 cp
            dpos = True
            for i in range(G):
                if ff[i] > 0:
                    rd[i] = g[i] - zl[i] + zu[i] + zc * c[i] + nu
                    # Same measure as kkt_residual: projected-gradient residual per coordinate
                    # (one max per vertex on the loop-carried chain).
                    err = max(err, max(abs(rd[i]) * igam, max(min(sl[i], zl[i] * igam),
                                                               min(su[i], zu[i] * igam))))
                    mu_v += zl[i] * sl[i] + zu[i] * su[i]
                else:
                    rd[i] = 0.0
                if lowrank:
                    x1 = W[1, i]
                    x2 = W[2, i]
                    r = W[0, i]
                    dpos = dpos and dw[i] > 0.0
                    c11 += x1 * x1 * r
                    c12 += x1 * x2 * r
                    c22 += x2 * x2 * r
                    t = c[i] * ff[i] * r
                    h1 += x1 * t
                    h2 += x2 * t
            mu = (zc * sc + mu_v) / ncomp
            err = max(err, zc * cmax * sc * igam)
            rp = (n[k] - sumy) if has_eq else 0.0
            if has_eq:
                err = max(err, abs(rp) / n[k])
            if err <= tol:
                ok = True
                break
            if it >= max_iter:
                break
            it += 1
            # Newton matrix of the vertices (Hessian + barrier diagonal; fixed vertices get
            # identity rows), factorised once per iteration: in Woodbury form for the
            # disagreement structure (2 x 2 capacitance C = S^-1 + X^T D^-1 X), else densely
            # (lower triangle) by Cholesky.
            use_wb = False
            if lowrank and dpos:
                c12 += 1.0 / sig
                det = c11 * c22 - c12 * c12
                if abs(det) > 1e-10 * (abs(c11 * c22) + c12 * c12):
                    W[3, 0] = c22 / det
                    W[3, 1] = -c12 / det
                    W[3, 2] = c11 / det
                    use_wb = True
            solved = False
            alpha = 0.0
            s11 = sc / zc
            s12 = 0.0
            s22 = 0.0
            if use_wb and not has_eq:
                # The budget column xc = M^-1 cp, the dot products of its accuracy check
                # (_wb_accurate) and of the Schur complement in one pass, the check in another.
                z1 = W[3, 0] * h1 + W[3, 1] * h2
                z2 = W[3, 1] * h1 + W[3, 2] * h2
                k1 = 0.0
                k2 = 0.0
                for i in range(G):
                    ci = c[i] * ff[i]
                    cp[i] = ci
                    v = ci * W[0, i] - W[0, i] * (W[1, i] * z1 + W[2, i] * z2)
                    xc[i] = v
                    k1 += W[1, i] * v
                    k2 += W[2, i] * v
                    s11 += ci * v
                e = 0.0
                scale = 0.0
                for i in range(G):
                    dz = dw[i] * xc[i]
                    lr = sig * (W[1, i] * k2 + W[2, i] * k1)
                    e = max(e, abs(cp[i] - dz - lr))
                    scale = max(scale, max(abs(cp[i]), max(abs(dz), abs(lr))))
                solved = e <= 1e-10 * scale
                use_wb = solved
            singular = False
            if not solved:
                for _attempt in range(2):
                    if not use_wb:
                        if not have_A:
                            _scale(ak, amax, s2, A)
                            have_A = True
                        for i in range(G):
                            if ff[i] > 0:
                                ui2 = u[i] * u[i]
                                for j in range(i):
                                    K[i, j] = A[i, j] * ui2 * u[j] * u[j] * ff[j]
                                K[i, i] = (2.0 * q[i] * ui2 * u[i] + zl[i] * isl[i]
                                           + zu[i] * isu[i])
                            else:
                                for j in range(i):
                                    K[i, j] = 0.0
                                K[i, i] = 1.0
                        if not _chol(K):
                            singular = True
                            break
                    alpha = 0.0
                    s22 = 0.0
                    if has_eq:
                        for i in range(G):
                            xe[i] = ff[i]
                        _solve(K, W, use_wb, xe)
                        ce = 0.0
                        for i in range(G):
                            s22 += ff[i] * xe[i]
                            ce += c[i] * ff[i] * xe[i]
                        alpha = ce / s22
                    for i in range(G):
                        cp[i] = (c[i] - alpha) * ff[i]
                        xc[i] = cp[i]
                    _solve(K, W, use_wb, xc)
                    if not use_wb or (_wb_accurate(dw, W[1], W[2], sig, cp, xc) and not (
                            has_eq and not _wb_accurate(dw, W[1], W[2], sig, ff, xe))):
                        break
                    use_wb = False
                if singular:
                    break
                s11 = sc / zc
                for i in range(G):
                    s11 += cp[i] * xc[i]
                    if has_eq:
                        s12 += cp[i] * xe[i]
            # Mehrotra predictor, then the corrector aimed at sigma mu with sigma from the
            # predictor's complementarity.
            dzc, dnu, cdy, al, m1, m2, _ = _newton(0, 0.0, 0.0, V, W, K, sc, zc, alpha, use_wb,
                                                   s11, s12, s22, rp, has_eq)
            mu_aff = ((sc - al * cdy) * (zc + al * dzc) + mu_v + al * (m1 + al * m2)) / ncomp
            sigma = min(1.0, max(0.0, (mu_aff / mu) ** 3))
            smu = sigma * mu
            # Fraction to the boundary tau = max(0.995, 1 - mu / gam) (Nocedal & Wright, 2006,
            # section 19.3, with mu relative to the gradient's scale): it tends to 1 as the
            # complementarity vanishes, so the fast local steps are not cut short by the fixed
            # 0.5% (about one iteration fewer at G = 8..64 than tau = 0.995); at most 1 - 1e-6,
            # so that a step to the boundary never rounds a slack to 0.
            tau = min(max(0.995, 1.0 - mu * igam), 1.0 - 1e-6)
            dzc, dnu, cdy, al, dd, edy, finite = _newton(
                1, smu, smu + cdy * dzc, V, W, K, sc, zc, alpha, use_wb, s11, s12, s22, rp, has_eq)
            al *= tau
            # Globalisation: the step must decrease the barrier merit psi_t (Armijo, with a
            # rounding allowance) plus the size row's exact penalty (_l1_size). Otherwise
            # fall back to the pure centring direction, which is a descent direction of
            # psi_t (its matrix is positive definite on the feasible subspace), and backtrack.
            slack = 1e-13 * (abs(f0) + smu * ncomp)
            dd += smu * cdy / sc
            rho = 2.0 * abs(nu + dnu) if has_eq else 0.0
            pen, slope = _l1_size(rho, rp, edy, al)
            dd += slope
            if not (dd < 0 and _merit_change(A, V, sig, lowrank, sc, smu, al, cdy, f0) + pen
                    <= 1e-4 * al * dd + slack):
                dzc, dnu, cdy, al, dd, edy, finite = _newton(
                    2, smu, smu, V, W, K, sc, zc, alpha, use_wb, s11, s12, s22, rp, has_eq)
                al *= tau
                dd += smu * cdy / sc
                rho = 2.0 * abs(nu + dnu) if has_eq else 0.0
                dd += _l1_size(rho, rp, edy, al)[1]
                for _bt in range(40):
                    if _merit_change(A, V, sig, lowrank, sc, smu, al, cdy, f0) + _l1_size(
                            rho, rp, edy, al)[0] <= (
                            1e-4 * al * min(dd, 0.0) + slack):
                        break
                    al *= 0.5
            if not (finite and np.isfinite(al) and np.isfinite(dzc) and np.isfinite(dnu)):
                break
            # The step, and u = 1/y with the sums of the next gradient and the inverse slacks
            # and duals. Floors keep a multiplier of a slack constraint from underflowing to 0
            # (which would put -sc/zc = -inf into the matrix); 1e-300 changes nothing
            # measurable.
            t1 = 0.0
            t2 = 0.0
            sumy = 0.0
            for i in range(G):
                s = al * dy[i]
                y[i] += s
                sl[i] += s
                su[i] -= s
                zl[i] = max(zl[i] + al * dzl[i], 1e-300 * ff[i])
                zu[i] = max(zu[i] + al * dzu[i], 1e-300 * ff[i])
                v = 1.0 / y[i]
                u[i] = v
                t1 += pk[i] * v
                t2 += (1.0 - pk[i]) * v
                sumy += y[i]
                isl[i] = 1.0 / sl[i]
                isu[i] = 1.0 / su[i]
                izl[i] = 1.0 / zl[i] if ff[i] > 0 else 0.0
                izu[i] = 1.0 / zu[i] if ff[i] > 0 else 0.0
            sc -= al * cdy
            zc = max(zc + al * dzc, 1e-300)
            nu += al * dnu
        for i in range(G):
            y_out[k, i] = y[i]
        zc_out[k] = zc
        nu_out[k] = nu
        it_out[k] = it
        done[k] = ok
    return y_out, zc_out, nu_out, it_out, done, amax_out, s2_out
