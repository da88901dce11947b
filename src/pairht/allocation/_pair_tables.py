"""Numba fills of the ``(m, G, G)`` pair tables of :mod:`pairht.allocation.proxies`.

Written in place, one problem at a time, rather than as numpy expressions: at the batch
sizes of a training step the tables are 0.25-1 MB each, and every temporary of that size a
numpy expression allocates is returned to the operating system when freed (glibc trims
the heap), so the next call pays a page fault per 4 KiB page again; at ``B = 128, G = 32``
that made the three temporaries of the disagreement formula cost 1.3 ms against 0.1 ms for
the arithmetic. No ``fastmath`` in the disagreement fill: each entry is the same IEEE expression
numpy evaluates.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def disagreement_fill(p, out):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``out[k, i, j] = p_i (1 - p_j) + (1 - p_i) p_j`` for ``i != j`` and 0 on the diagonal.

    ``p`` is ``(m, G)``, ``out`` ``(m, G, G)`` (both C-contiguous float64).
    """
    m, G = p.shape
    for k in range(m):
        for i in range(G):
            pi = p[k, i]
            for j in range(G):
                pj = p[k, j]
                out[k, i, j] = pi * (1.0 - pj) + (1.0 - pi) * pj
            out[k, i, i] = 0.0


@njit(cache=True, fastmath={"reassoc"})
def vertex_term_fill(a, out):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``out[k, i] = max((sum_j sqrt(a_kij))^2 - sum_j a_kij, 0)`` for ``a`` ``(m, G, G)``.

    ``reassoc`` lets the two row sums run across the vector lanes (the square roots
    dominate otherwise); they are then summed in a different order than left to right.
    """
    m, G = out.shape
    for k in range(m):
        for i in range(G):
            s = 0.0
            t = 0.0
            for j in range(G):
                v = a[k, i, j]
                s += np.sqrt(v)
                t += v
            out[k, i] = max(s * s - t, 0.0)


@njit(cache=True)
def isolated_fill(a, out):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``out[k, i] = True`` iff row ``i`` of ``a[k]`` is zero (a vertex without edges).

    ``a`` is ``(m, G, G)``, ``out`` ``(m, G)`` bool. For the nonnegative tables of this
    package that is ``a[k] @ 1 == 0``; the scan stops at a row's first nonzero entry, so a
    row with edges costs a cache line or two instead of a pass over the ``G x G`` table.
    """
    m, G = out.shape
    for k in range(m):
        for i in range(G):
            zero = True
            for j in range(G):
                if a[k, i, j] != 0.0:
                    zero = False
                    break
            out[k, i] = zero
