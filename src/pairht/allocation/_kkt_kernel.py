r"""Numba pass that certifies the solver's returned points: objective, KKT residual, cost.

One loop per problem computes, from the returned ``pi`` and multipliers, what
:func:`pairht.allocation.kkt._value_gradient` and :func:`pairht.allocation.kkt._residual`
compute as whole-batch numpy expressions: ``u = 1/pi``, ``A u``, ``f = u . A u / 2 + b . u``,
``g = -(A u + b) u^2`` and the largest of the stationarity (natural residual), dual,
complementarity, budget, box and size terms. Compiled because at a training step's batch
sizes the numpy form is two dozen array passes and temporaries, about a tenth of a
millisecond a call, a tenth of the solver's time. The only fast-math flag is ``reassoc``,
which lets the ``A u`` row sums run across the vector lanes: a NaN still reads as NaN (the
residual is then ``inf``), and every term is the IEEE expression numpy evaluates, only the
order of the sums differs (``tests/allocation/test_kkt_kernel.py`` holds the two to
``1e-14``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def certify(pi, a, b, c, budget, lo, lam, nu, size, shift, room, sized, value, resid, cost):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Fill ``value``, ``resid`` and ``cost`` (each ``(m,)``) for ``m`` flat problems.

    ``pi, b, c`` are ``(m, G)``, ``a`` ``(m, G, G)``, ``budget, lam, nu, size, shift, room``
    ``(m,)``; all C-contiguous float64. ``sized`` selects the size route of
    :func:`~pairht.allocation.kkt._residual` (``nu`` the multiplier of the size row with the
    budget row written ``(c - shift) . pi <= room``; a NaN ``nu`` counts as 0); without it
    ``nu``, ``size``, ``shift`` and ``room`` are ignored. ``cost`` is ``c . pi``.
    """
    m, G = pi.shape
    u = np.empty(G)
    g = np.empty(G)
    for k in range(m):
        bad = False
        for i in range(G):
            u[i] = 1.0 / pi[k, i]
            if pi[k, i] != pi[k, i]:
                bad = True
        f = 0.0
        bu = 0.0
        gamma = 0.0
        for i in range(G):
            s = 0.0
            for j in range(G):
                s += a[k, i, j] * u[j]
            f += u[i] * s
            bu += b[k, i] * u[i]
            g[i] = -(s + b[k, i]) * u[i] * u[i]
            ag = abs(g[i])
            if ag != ag:
                bad = True
            elif ag > gamma:
                gamma = ag
        value[k] = 0.5 * f + bu
        gamma = max(gamma, 1e-300)
        lm = lam[k]
        nk = 0.0
        sh = 0.0
        if sized:
            if nu[k] == nu[k]:
                nk = nu[k]
            sh = shift[k]
        stat = 0.0
        box = 0.0
        cmax = 0.0
        cp = 0.0
        cwp = 0.0
        tot = 0.0
        for i in range(G):
            x = pi[k, i]
            ci = c[k, i]
            cw = ci - sh
            w = g[i] + lm * cw + nk
            if w != w:
                bad = True
            t = x - w / gamma
            t = min(max(t, lo), 1.0)
            d = abs(x - t)
            if d != d:
                bad = True
            elif d > stat:
                stat = d
            box = max(box, lo - x, x - 1.0)
            cmax = max(cmax, ci)
            cp += ci * x
            cwp += cw * x
            tot += x
        cost[k] = cp
        if sized:
            rel = 1.0 - (room[k] - cwp) / budget[k]
        else:
            rel = cp / budget[k]
        out = max(stat, max(-lm, 0.0) * cmax / gamma)
        out = max(out, abs(lm) * cmax / gamma * abs(1.0 - rel))
        out = max(out, rel - 1.0, box)
        if sized:
            out = max(out, abs(tot - size[k]) / size[k])
        if bad or out != out or rel != rel or lm != lm:
            out = np.inf
        resid[k] = out
