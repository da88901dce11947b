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

import numpy as np
from numba import njit

_FAST = {"reassoc", "contract"}


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
def _step(sl, su, sc, zl, zu, zc, cs, cp, alpha, ff, L, xc, xe, s11, s12, s22, rd, rp, tl, tu,
          tc, has_eq, dy, dzl, dzu):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Newton step for complementarity targets ``tl, tu, tc``; returns ``dzc, dnu, c.dy``.

    The augmented system ``[[M, c, e], [c^T, -sc/zc, 0], [e^T, 0, 0]]`` (vertices, budget,
    size) is solved by block elimination with the Cholesky factor ``L`` of ``M``. The budget
    row enters as ``cp = c - alpha e`` with ``alpha = (c . M^-1 e) / (e . M^-1 e)``, i.e.
    orthogonalised against the size row in the ``M^-1`` metric (an exact rewriting: the size
    equation turns ``c . dy`` into ``cp . dy + alpha rp``, and the size multiplier absorbs
    ``alpha dzc``). The Schur complement ``[[cp.xc + sc/zc, cp.xe], [cp.xe, e.xe]]`` with the
    precomputed ``xc = M^-1 cp``, ``xe = M^-1 e`` is then nearly diagonal: computed directly,
    not as ``c.M^-1 c - (c.M^-1 e)^2 / e.M^-1 e``, which cancels to noise when the two rows are
    nearly parallel on the coordinates the barrier leaves free (tied costs, or a unit pressed
    against a bound). Keeping the budget out of ``M`` (rather than adding ``(zc/sc) c c^T``,
    which reaches 1e18 when the budget binds) keeps the factorisation well conditioned.
    """
    G = dy.shape[0]
    for i in range(G):
        if ff[i] > 0:
            dy[i] = -rd[i] + (tl[i] - zl[i] * sl[i]) / sl[i] - (tu[i] - zu[i] * su[i]) / su[i]
        else:
            dy[i] = 0.0
    _chol_solve(L, dy)
    r2 = sc - tc / zc
    cx = 0.0
    ex = 0.0
    for i in range(G):
        cx += cp[i] * dy[i]
        ex += ff[i] * dy[i]
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
    for i in range(G):
        if ff[i] > 0:
            dy[i] = dy[i] - dzc * xc[i] - (dnu * xe[i] if has_eq else 0.0)
            cdy += cs[i] * dy[i]
            dzl[i] = (tl[i] - zl[i] * sl[i] - zl[i] * dy[i]) / sl[i]
            dzu[i] = (tu[i] - zu[i] * su[i] + zu[i] * dy[i]) / su[i]
        else:
            dy[i] = 0.0
            dzl[i] = 0.0
            dzu[i] = 0.0
    return dzc, dnu - alpha * dzc, cdy


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _max_step(sl, su, sc, zl, zu, zc, dy, dzl, dzu, dzc, cdy, ff):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Largest alpha in (0, 1] keeping every slack and dual positive."""
    al = 1.0
    for i in range(dy.shape[0]):
        if ff[i] > 0:
            if dy[i] < 0:
                al = min(al, -sl[i] / dy[i])
            elif dy[i] > 0:
                al = min(al, su[i] / dy[i])
            if dzl[i] < 0:
                al = min(al, -zl[i] / dzl[i])
            if dzu[i] < 0:
                al = min(al, -zu[i] / dzu[i])
    if cdy > 0:
        al = min(al, sc / cdy)
    if dzc < 0:
        al = min(al, -zc / dzc)
    return al


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def _merit_change(A, b, y, sl, su, sc, ff, t, al, dy, cdy, ut, f0):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Change of the barrier merit ``f(y) - t sum log(slacks)`` along ``al * dy``.

    Returns ``f(y + al dy) - f0 - t sum log(1 + al ds / s)`` (inf outside the box). The log
    terms are accumulated as products of 8 ratios per ``log`` call (each ratio lies in
    ``[0.005, 1e3]`` under the fraction-to-boundary rule, so no product over/underflows):
    ``log`` dominated the iteration's cost otherwise. ``ut`` is scratch for the trial ``1/y``.
    """
    G = y.shape[0]
    logs = 0.0
    prod = 1.0
    cnt = 0
    for i in range(G):
        ut[i] = 1.0 / (y[i] + al * dy[i])
        if ff[i] > 0:
            rl = 1.0 + al * dy[i] / sl[i]
            ru = 1.0 - al * dy[i] / su[i]
            if not (rl > 0 and ru > 0):
                return np.inf
            prod *= rl * ru
            cnt += 1
            if cnt == 4:
                logs += np.log(prod)
                prod = 1.0
                cnt = 0
    rc = 1.0 - al * cdy / sc
    if not rc > 0:
        return np.inf
    logs += np.log(prod * rc)
    val = 0.0
    for i in range(G):
        s = b[i]
        for j in range(i + 1, G):
            s += A[i, j] * ut[j]
        val += s * ut[i]
    return (val - f0) - t * logs


@njit(cache=True, error_model="numpy", fastmath=_FAST)
def ipm_batch(a, b, cs, lo, n, has_eq, fixed, y0, mu_scale, tol, max_iter):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
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
    bk = np.empty(G)
    K = np.empty((G, G))
    xc = np.empty(G)
    xe = np.empty(G)
    cp = np.empty(G)
    y = np.empty(G)
    sl = np.empty(G)
    su = np.empty(G)
    zl = np.empty(G)
    zu = np.empty(G)
    ff = np.empty(G)
    u = np.empty(G)
    q = np.empty(G)
    g = np.empty(G)
    rd = np.empty(G)
    dy = np.empty(G)
    dzl = np.empty(G)
    dzu = np.empty(G)
    zero = np.zeros(G)
    tl = np.empty(G)
    tu = np.empty(G)
    ut = np.empty(G)
    for k in range(m):
        ak = a[k]
        amax = 0.0
        for i in range(G):
            for j in range(G):
                amax = max(amax, ak[i, j])
        tot = 0.0
        for i in range(G):
            bk[i] = b[k, i] / amax
            tot += bk[i]
            for j in range(G):
                A[i, j] = ak[i, j] / amax
                tot += 0.5 * A[i, j]
        s2 = 1.0 / tot
        for i in range(G):
            bk[i] *= s2
            for j in range(G):
                A[i, j] *= s2
        amax_out[k] = amax
        s2_out[k] = s2
        c = cs[k]
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
        for i in range(G):
            s = bk[i]
            for j in range(G):
                s += A[i, j] * u[j]
            gi = s * u[i] * u[i]
            if ff[i] > 0 and gi > gam0:
                gam0 = gi
        mu0 = mu_scale * max(gam0, 1e-300)
        cy = 0.0
        for i in range(G):
            cy += c[i] * y[i]
            # Slacks are state variables, not recomputed from y: near a bound y - lo cancels
            # to a few ulps while the true slack (~ mu / z) keeps shrinking geometrically.
            sl[i] = y[i] - lo if ff[i] > 0 else 1.0
            su[i] = 1.0 - y[i] if ff[i] > 0 else 1.0
            zl[i] = mu0 / sl[i] * ff[i]
            zu[i] = mu0 / su[i] * ff[i]
        sc = 1.0 - cy
        zc = mu0 / sc
        nu = 0.0
        ncomp = 2.0 * nf + 1.0
        cmax = 0.0
        for i in range(G):
            cmax = max(cmax, c[i])
        it = 0
        ok = False
        while True:
            # Gradient, Hessian pieces, residuals.
            for i in range(G):
                u[i] = 1.0 / y[i]
            gam = 0.0
            sumy = 0.0
            for i in range(G):
                s = bk[i]
                for j in range(G):
                    s += A[i, j] * u[j]
                q[i] = s
                g[i] = -s * u[i] * u[i]
                if ff[i] > 0:
                    gam = max(gam, abs(g[i]))
                sumy += y[i]
            gam = max(gam, 1e-300)
            err = 0.0
            mu = zc * sc
            for i in range(G):
                if ff[i] > 0:
                    rd[i] = g[i] - zl[i] + zu[i] + zc * c[i] + nu
                    err = max(err, abs(rd[i]) / gam)
                    # Same measure as kkt_residual: projected-gradient residual per coordinate.
                    err = max(err, min(sl[i], zl[i] / gam), min(su[i], zu[i] / gam))
                    mu += zl[i] * sl[i] + zu[i] * su[i]
                else:
                    rd[i] = 0.0
            mu /= ncomp
            err = max(err, zc * cmax * sc / gam)
            rp = (n[k] - sumy) if has_eq else 0.0
            if has_eq:
                err = max(err, abs(rp) / n[k])
            if err <= tol:
                ok = True
                break
            if it >= max_iter:
                break
            it += 1
            # Newton matrix of the vertices (Hessian + barrier diagonal, lower triangle;
            # fixed vertices get identity rows), factorised once per iteration.
            for i in range(G):
                if ff[i] > 0:
                    ui2 = u[i] * u[i]
                    for j in range(i):
                        K[i, j] = A[i, j] * ui2 * u[j] * u[j] * ff[j]
                    K[i, i] = 2.0 * q[i] * ui2 * u[i] + zl[i] / sl[i] + zu[i] / su[i]
                else:
                    for j in range(i):
                        K[i, j] = 0.0
                    K[i, i] = 1.0
            if not _chol(K):
                break
            alpha = 0.0
            s22 = 0.0
            if has_eq:
                for i in range(G):
                    xe[i] = ff[i]
                _chol_solve(K, xe)
                ce = 0.0
                for i in range(G):
                    s22 += ff[i] * xe[i]
                    ce += c[i] * ff[i] * xe[i]
                alpha = ce / s22
            for i in range(G):
                cp[i] = (c[i] - alpha) * ff[i]
                xc[i] = cp[i]
            _chol_solve(K, xc)
            s11 = sc / zc
            s12 = 0.0
            for i in range(G):
                s11 += cp[i] * xc[i]
                if has_eq:
                    s12 += cp[i] * xe[i]
            dzc, dnu, cdy = _step(sl, su, sc, zl, zu, zc, c, cp, alpha, ff, K, xc, xe, s11, s12,
                                  s22, rd, rp, zero, zero, 0.0, has_eq, dy, dzl, dzu)
            al = _max_step(sl, su, sc, zl, zu, zc, dy, dzl, dzu, dzc, cdy, ff)
            mu_aff = (sc - al * cdy) * (zc + al * dzc)
            for i in range(G):
                if ff[i] > 0:
                    mu_aff += ((sl[i] + al * dy[i]) * (zl[i] + al * dzl[i])
                               + (su[i] - al * dy[i]) * (zu[i] + al * dzu[i]))
            mu_aff /= ncomp
            sigma = min(1.0, max(0.0, (mu_aff / mu) ** 3))
            smu = sigma * mu
            for i in range(G):
                tl[i] = smu - dy[i] * dzl[i]
                tu[i] = smu + dy[i] * dzu[i]
            tc = smu + cdy * dzc
            dzc, dnu, cdy = _step(sl, su, sc, zl, zu, zc, c, cp, alpha, ff, K, xc, xe, s11, s12,
                                  s22, rd, rp, tl, tu, tc, has_eq, dy, dzl, dzu)
            al = 0.995 * _max_step(sl, su, sc, zl, zu, zc, dy, dzl, dzu, dzc, cdy, ff)
            # Globalisation: the step must decrease the barrier merit psi_t (Armijo, with a
            # rounding allowance). Otherwise fall back to the pure centring direction, which
            # is a descent direction of psi_t (its matrix is positive definite on the
            # feasible subspace), and backtrack.
            # f(y) = sum_i u_i (b_i + sum_{j>i} a_ij u_j) = sum_i u_i (q_i + b_i) / 2
            f0 = 0.0
            for i in range(G):
                f0 += 0.5 * u[i] * (q[i] + bk[i])
            slack = 1e-13 * (abs(f0) + smu * ncomp)
            dd = smu * cdy / sc
            for i in range(G):
                if ff[i] > 0:
                    dd += (g[i] - smu / sl[i] + smu / su[i]) * dy[i]
            if not (dd < 0 and _merit_change(A, bk, y, sl, su, sc, ff, smu, al, dy, cdy, ut, f0)
                    <= 1e-4 * al * dd + slack):
                for i in range(G):
                    tl[i] = smu
                    tu[i] = smu
                dzc, dnu, cdy = _step(sl, su, sc, zl, zu, zc, c, cp, alpha, ff, K, xc, xe, s11,
                                      s12, s22, rd, rp, tl, tu, smu, has_eq, dy, dzl, dzu)
                al = 0.995 * _max_step(sl, su, sc, zl, zu, zc, dy, dzl, dzu, dzc, cdy, ff)
                dd = smu * cdy / sc
                for i in range(G):
                    if ff[i] > 0:
                        dd += (g[i] - smu / sl[i] + smu / su[i]) * dy[i]
                for _bt in range(40):
                    if _merit_change(A, bk, y, sl, su, sc, ff, smu, al, dy, cdy, ut, f0) <= (
                            1e-4 * al * min(dd, 0.0) + slack):
                        break
                    al *= 0.5
            finite = np.isfinite(al) and np.isfinite(dzc) and np.isfinite(dnu)
            for i in range(G):
                finite = finite and np.isfinite(dy[i])
            if not finite:
                break
            for i in range(G):
                y[i] += al * dy[i]
                sl[i] += al * dy[i]
                su[i] -= al * dy[i]
                zl[i] += al * dzl[i]
                zu[i] += al * dzu[i]
            sc -= al * cdy
            # Floors keep a multiplier of a slack constraint from underflowing to 0 (which
            # would put -sc/zc = -inf into the matrix); 1e-300 changes nothing measurable.
            zc = max(zc + al * dzc, 1e-300)
            nu += al * dnu
            for i in range(G):
                if ff[i] > 0:
                    zl[i] = max(zl[i], 1e-300)
                    zu[i] = max(zu[i], 1e-300)
        for i in range(G):
            y_out[k, i] = y[i]
        zc_out[k] = zc
        nu_out[k] = nu
        it_out[k] = it
        done[k] = ok
    return y_out, zc_out, nu_out, it_out, done, amax_out, s2_out
