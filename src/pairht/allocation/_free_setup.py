"""Numba set-up of the solver's problems without a size: closed forms, scaled cost rows, start.

One pass per problem replaces about twenty whole-batch numpy expressions (masks, fancy
assignments, the start point's sums), each a few microseconds and more when the caches are
cold, which at a training step's batch sizes was a tenth of a millisecond a call.
:func:`pairht.allocation.solver._solve_flat` turns the codes into statuses.
"""

from __future__ import annotations

from numba import njit

#: ``code`` values of :func:`free_setup`.
INTERIOR, FULL, FLOOR, DEGENERATE = 0, 1, 2, 3


@njit(cache=True)
def cold_start_free(cs, lo, room, out):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Cold starts of problems without a size, ``cs`` and ``out`` ``(m, G)``: per row the
    constant vector whose cost ``cs . y`` (budget scaled to 1) lies ``room`` of the way from
    the floor's cost ``lo s`` to ``min(1, s)``, ``s = sum cs``: ``y_i = lo + theta (1 - lo)``
    with ``theta = room (min(1, s) - lo s) / max(s - lo s, 1e-300)``."""
    m, G = cs.shape
    for k in range(m):
        s = 0.0
        for i in range(G):
            s += cs[k, i]
        lower = lo * s
        theta = room * (min(1.0, s) - lower) / max(s - lower, 1e-300)
        y = lo + theta * (1.0 - lo)
        for i in range(G):
            out[k, i] = y


@njit(cache=True)
def free_setup(c, budget, full, lo, isolated, edge_rtol, room, code, row, scale, fixed, y0):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Classify and prepare ``m`` flat problems without a size (cold start).

    ``c (m, G)`` costs, ``budget (m,)``, ``full (m,)`` their sums, ``isolated (m, G)`` the
    vertices without edges. Per problem ``k``, ``code[k]`` is :data:`FULL` if
    ``budget >= full`` (``pi = 1``), else :data:`FLOOR` if
    ``budget <= lo full (1 + edge_rtol)`` (``pi = pi_min``), else :data:`DEGENERATE` if
    every vertex is isolated, else :data:`INTERIOR`; an interior problem gets its scaled cost
    row ``row[k] = c[k] / budget[k]``, ``scale[k] = budget[k]``, ``fixed[k] = isolated[k]``
    and the start ``y0[k]`` (:func:`cold_start_free`, ``pi_min`` on fixed vertices). The
    rows of other problems are left as they were.
    """
    m, G = c.shape
    for k in range(m):
        if budget[k] >= full[k]:
            code[k] = FULL
            continue
        if budget[k] <= lo * full[k] * (1.0 + edge_rtol):
            code[k] = FLOOR
            continue
        every = True
        for i in range(G):
            every = every and isolated[k, i]
        if every:
            code[k] = DEGENERATE
            continue
        code[k] = INTERIOR
        scale[k] = budget[k]
        for i in range(G):
            row[k, i] = c[k, i] / budget[k]
            fixed[k, i] = isolated[k, i]
        cold_start_free(row[k:k + 1], lo, room, y0[k:k + 1])
        for i in range(G):
            if fixed[k, i]:
                y0[k, i] = lo
