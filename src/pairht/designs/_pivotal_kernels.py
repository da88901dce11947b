"""Numba kernels for ordered pivotal sampling (dependent rounding along a fixed order).

The process sweeps the units in order, keeping one fractional "carry" unit. Its value is a
deterministic function of the position (the fractional part of the running sum of pi), so the
only randomness is *which* unit is the carry. Step kinds at position ``p`` (unit ``u``,
value ``b``, carry value before ``a``, ``s = a + b``):

    SKIP   b in {0, 1}: u is decided as b, the carry is untouched
    START  no carry: u becomes the carry with value b
    LT     s < 1: keep (prob a/s): u -> 0, carry keeps s;    new (b/s): carry -> 0, u carries s
    EQ     s = 1: keep (prob a/s): carry -> 1, u -> 0;       new (b/s): u -> 1, carry -> 0
    GT     s > 1: keep ((1-b)/(2-s)): carry -> 1, u carries s-1;
                  new  ((1-a)/(2-s)): u -> 1, carry keeps s-1

and at the end a carry of value ``a`` is rounded to 1 with probability ``a``.

Exact probabilities of constrained events (unit ``u`` must end 0, must end 1, or is free)
follow from a forward recursion whose state is the constraint class of the current carry:
``h0`` (carry must end 0), ``h1`` (must end 1), ``h2`` (free), or ``tot`` (no carry). The
identity of the carry is irrelevant once its constraint is known, so four numbers per step
suffice: ``O(span)`` per set, all terms positive.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SKIP, START, LT, EQ, GT = 0, 1, 2, 3, 4
#: |a + b - 1| below this is treated as an exact integer crossing (round-off in running sums).
CROSS_TOL = 1e-12
#: A final carry value within this of 0 or 1 is rounded (the integer-sum tolerance of pi).
END_TOL = 1e-9


@njit(cache=True)
def schedule(pi: np.ndarray, order: np.ndarray):
    """Step kinds, keep/new probabilities, carry value after each step and final carry value.

    Also returns ``g1[p]`` / ``g0[p]``: probability that the carry present after step ``p``
    ends at 1 / at 0 when no later unit is constrained (backward recursion).
    """
    N = order.shape[0]
    kind = np.zeros(N, dtype=np.int64)
    pk = np.zeros(N)
    pn = np.zeros(N)
    val = np.zeros(N)
    a = 0.0
    for p in range(N):
        b = pi[order[p]]
        if b == 0.0 or b == 1.0:
            kind[p] = SKIP
        elif a == 0.0:
            kind[p] = START
            a = b
        else:
            s = a + b
            if abs(s - 1.0) <= CROSS_TOL:
                kind[p] = EQ
                pk[p] = a / s
                pn[p] = b / s
                a = 0.0
            elif s < 1.0:
                kind[p] = LT
                pk[p] = a / s
                pn[p] = b / s
                a = s
            else:
                kind[p] = GT
                # (1-a) + (1-b), not 2 - s: for a, b near 1 the latter loses digits and
                # keep + new would no longer sum to 1
                ca = 1.0 - a
                cb = 1.0 - b
                pk[p] = cb / (ca + cb)
                pn[p] = ca / (ca + cb)
                a = s - 1.0
        val[p] = a
    a_end = a
    if a_end <= END_TOL:
        a_end = 0.0
    elif a_end >= 1.0 - END_TOL:
        a_end = 1.0
    g1 = np.zeros(N)
    g0 = np.zeros(N)
    if N > 0:
        g1[N - 1] = a_end
        g0[N - 1] = 1.0 - a_end
    for p in range(N - 2, -1, -1):
        kd = kind[p + 1]
        if kd == LT:
            g1[p] = pk[p + 1] * g1[p + 1]
            g0[p] = pn[p + 1] + pk[p + 1] * g0[p + 1]
        elif kd == EQ:
            g1[p] = pk[p + 1]
            g0[p] = pn[p + 1]
        elif kd == GT:
            g1[p] = pk[p + 1] + pn[p + 1] * g1[p + 1]
            g0[p] = pn[p + 1] * g0[p + 1]
        else:
            g1[p] = g1[p + 1]
            g0[p] = g0[p + 1]
    return kind, pk, pn, val, a_end, g1, g0


@njit(cache=True)
def _step(kd, pkp, pnp, b, c, tot, h0, h1, h2):
    """One step of the constrained recursion; ``c`` = 0 / 1 / 2 (must 0, must 1, free)."""
    if kd == SKIP:
        if c != 2 and c != int(b):
            return 0.0, 0.0, 0.0, 0.0
        return tot, h0, h1, h2
    if kd == START:
        m = tot
        tot, h0, h1, h2 = 0.0, 0.0, 0.0, 0.0
    elif kd == EQ:
        t = 0.0
        if c != 1:
            t += (h1 + h2) * pkp
        if c != 0:
            t += (h0 + h2) * pnp
        return t, 0.0, 0.0, 0.0
    else:
        # LT and GT are mirror images. The outcome that decides the old carry moves its
        # admissible mass to u (LT: new, prob pn, carry -> 0; GT: keep, prob pk, carry -> 1);
        # the other decides u (LT: 0, GT: 1) and the carry keeps its class.
        if kd == LT:
            stay, move, decided, barred = pkp, pnp, h0, 1
        else:
            stay, move, decided, barred = pnp, pkp, h1, 0
        m = (decided + h2) * move
        if c != barred:
            h0 *= stay
            h1 *= stay
            h2 *= stay
        else:
            h0, h1, h2 = 0.0, 0.0, 0.0
    if c == 0:
        h0 += m
    elif c == 1:
        h1 += m
    else:
        h2 += m
    return tot, h0, h1, h2


@njit(cache=True)
def _start_state(val, p0):
    """State before position ``p0`` when no earlier unit is constrained."""
    if p0 > 0 and val[p0 - 1] > 0.0:
        return 0.0, 0.0, 0.0, 1.0
    return 1.0, 0.0, 0.0, 0.0


@njit(cache=True)
def _finish(tot, h0, h1, h2, g0, g1, p):
    """Probability of the event once no unit after position ``p`` is constrained."""
    return tot + h2 + h1 * g1[p] + h0 * g0[p]


@njit(cache=True)
def _sorted_positions(rows, inv, i, buf):
    """Positions of row ``i``'s units in the order, ascending, into ``buf`` (insertion sort)."""
    k = rows.shape[1]
    for c in range(k):
        p = inv[rows[i, c]]
        j = c
        while j > 0 and buf[j - 1] > p:
            buf[j] = buf[j - 1]
            j -= 1
        buf[j] = p


@njit(cache=True)
def batch_inclusion(pi, order, kind, pk, pn, val, g1, g0, rows, inv):
    """``P(all units of each row end at 1)`` by one forward scan over the row's span."""
    m, k = rows.shape
    out = np.empty(m)
    pos = np.empty(k, dtype=np.int64)
    for i in range(m):
        _sorted_positions(rows, inv, i, pos)
        p0 = pos[0]
        p1 = pos[k - 1]
        tot, h0, h1, h2 = _start_state(val, p0)
        nxt = 0
        for p in range(p0, p1 + 1):
            c = 2
            if pos[nxt] == p:
                c = 1
                nxt += 1
            tot, h0, h1, h2 = _step(kind[p], pk[p], pn[p], pi[order[p]], c, tot, h0, h1, h2)
        out[i] = _finish(tot, h0, h1, h2, g0, g1, p1)
    return out


@njit(cache=True)
def joint_matrix(pi, order, kind, pk, pn, val, g1, g0):
    """All ``pi_ij`` in ``O(N^2)``: one forward scan per first position."""
    N = order.shape[0]
    out = np.zeros((N, N))
    for p0 in range(N):
        tot, h0, h1, h2 = _start_state(val, p0)
        tot, h0, h1, h2 = _step(kind[p0], pk[p0], pn[p0], pi[order[p0]], 1, tot, h0, h1, h2)
        out[order[p0], order[p0]] = _finish(tot, h0, h1, h2, g0, g1, p0)
        for p in range(p0 + 1, N):
            b = pi[order[p]]
            t2, a0, a1, a2 = _step(kind[p], pk[p], pn[p], b, 1, tot, h0, h1, h2)
            v = _finish(t2, a0, a1, a2, g0, g1, p)
            out[order[p0], order[p]] = v
            out[order[p], order[p0]] = v
            tot, h0, h1, h2 = _step(kind[p], pk[p], pn[p], b, 2, tot, h0, h1, h2)
    return out


@njit(cache=True)
def mask_probabilities(pi, order, kind, pk, pn, val, g1, g0, masks):
    """Probability of each complete outcome (rows of ``masks``, indexed by unit)."""
    K, N = masks.shape
    out = np.empty(K)
    for i in range(K):
        tot, h0, h1, h2 = 1.0, 0.0, 0.0, 0.0
        for p in range(N):
            c = 1 if masks[i, order[p]] else 0
            tot, h0, h1, h2 = _step(kind[p], pk[p], pn[p], pi[order[p]], c, tot, h0, h1, h2)
        out[i] = _finish(tot, h0, h1, h2, g0, g1, N - 1) if N > 0 else 1.0
    return out


@njit(cache=True)
def sample_process(pi, order, kind, pk, pn, a_end, u):
    """Run the pivotal process once per row of uniforms ``u`` (``(size, N + 1)``)."""
    size = u.shape[0]
    N = order.shape[0]
    out = np.zeros((size, N), dtype=np.bool_)
    for s in range(size):
        carry = -1
        for p in range(N):
            v = order[p]
            kd = kind[p]
            if kd == SKIP:
                out[s, v] = pi[v] == 1.0
            elif kd == START:
                carry = v
            elif kd == LT:
                if u[s, p] >= pk[p]:
                    carry = v
            elif kd == EQ:
                if u[s, p] < pk[p]:
                    out[s, carry] = True
                else:
                    out[s, v] = True
                carry = -1
            else:  # GT
                if u[s, p] < pk[p]:
                    out[s, carry] = True
                    carry = v
                else:
                    out[s, v] = True
        if carry >= 0 and u[s, N] < a_end:
            out[s, carry] = True
    return out


# ---------------------------------------------------------------------------------------------
# Transfer matrices: with no "must end 0" constraint the state (tot, h1, h2) evolves linearly,
# so a stretch of unconstrained positions is one 3x3 matrix. Precomputing the products for all
# stretches makes a set of k units cost O(k) instead of O(span) (the estimators' hot path).


@njit(cache=True)
def step_matrices(pi, order, kind, pk, pn):
    """``T[c - 1, p]``: the 3x3 map of step ``p`` on ``(tot, h1, h2)`` for ``c = 1`` / ``2``."""
    N = order.shape[0]
    T = np.zeros((2, N, 3, 3))
    for c in (1, 2):
        for p in range(N):
            b = pi[order[p]]
            for col in range(3):
                tot = 1.0 if col == 0 else 0.0
                h1 = 1.0 if col == 1 else 0.0
                h2 = 1.0 if col == 2 else 0.0
                t, _, a1, a2 = _step(kind[p], pk[p], pn[p], b, c, tot, 0.0, h1, h2)
                T[c - 1, p, 0, col] = t
                T[c - 1, p, 1, col] = a1
                T[c - 1, p, 2, col] = a2
    return T


@njit(cache=True)
def stretch_products(T2):
    """``B[x, y] = T2[y-1] ... T2[x]`` (identity when ``x == y``), for ``0 <= x <= y <= N``."""
    N = T2.shape[0]
    B = np.zeros((N + 1, N + 1, 3, 3))
    for x in range(N + 1):
        for i in range(3):
            B[x, x, i, i] = 1.0
        for y in range(x + 1, N + 1):
            S = T2[y - 1]
            P = B[x, y - 1]
            for i in range(3):
                for j in range(3):
                    B[x, y, i, j] = S[i, 0] * P[0, j] + S[i, 1] * P[1, j] + S[i, 2] * P[2, j]
    return B


@njit(cache=True)
def batch_inclusion_stretches(B, T1, g1, rows, inv):
    """Same values as :func:`batch_inclusion`, ``O(k)`` per row from the stretch products."""
    m, k = rows.shape
    out = np.empty(m)
    pos = np.empty(k, dtype=np.int64)
    v = np.empty(3)
    w = np.empty(3)
    for i in range(m):
        _sorted_positions(rows, inv, i, pos)
        prev = 0  # state before position `prev`; starts as "no carry, mass 1"
        v[0], v[1], v[2] = 1.0, 0.0, 0.0
        for c in range(k):
            p = pos[c]
            S = B[prev, p]
            for r in range(3):
                w[r] = S[r, 0] * v[0] + S[r, 1] * v[1] + S[r, 2] * v[2]
            M = T1[p]
            for r in range(3):
                v[r] = M[r, 0] * w[0] + M[r, 1] * w[1] + M[r, 2] * w[2]
            prev = p + 1
        out[i] = v[0] + v[1] * g1[prev - 1] + v[2]
    return out
