"""Numba kernels for conditional Poisson sampling (CPS) as a Markov chain over (unit, remaining).

CPS with working weights ``w`` and size ``n`` can be drawn sequentially: at unit ``j`` with ``r``
units still to pick, include ``j`` with probability

    q[j, r] = w_j e_{r-1}(w_{j+1:}) / e_r(w_{j:}) = w_j / (w_j + U[j+1, r]),
    U[j, r] = e_r(w_{j:}) / e_{r-1}(w_{j:})     (ratio of consecutive elementary symmetric
                                                 polynomials of the suffix w_j, ..., w_{N-1}).

Why ratios: the polynomials themselves span thousands of decades for extreme weights, while
their ratios stay within the range of ``w``. ``U`` obeys the all-positive recursion

    U[j, r] = U[j+1, r-1] (U[j+1, r] + w_j) / (U[j+1, r-1] + w_j),   U[j, 1] = U[j+1, 1] + w_j,

and ``1 - q[j, r] = U[j+1, r] / (w_j + U[j+1, r])`` is formed as a ratio, never as a
difference. Every inclusion probability is then a sum of products of these chain transition
probabilities (forward probabilities times constrained backward sweeps): positive terms only,
so no digits are lost when two weights are close (unlike downdating identities).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def draw_tables(w: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``q[j, r]`` and ``qc[j, r] = 1 - q[j, r]`` for ``r = 0..n``, shapes ``(N, n + 1)``."""
    N = w.shape[0]
    U = np.zeros((N + 1, n + 1))
    q = np.zeros((N, n + 1))
    qc = np.ones((N, n + 1))
    for j in range(N - 1, -1, -1):
        wj = w[j]
        for r in range(1, n + 1):
            nxt = U[j + 1, r]
            den = wj + nxt
            q[j, r] = wj / den
            qc[j, r] = nxt / den
        if n >= 1:
            U[j, 1] = U[j + 1, 1] + wj
        for r in range(2, n + 1):
            prev = U[j + 1, r - 1]
            U[j, r] = prev * (U[j + 1, r] + wj) / (prev + wj)
    return q, qc


@njit(cache=True)
def forward(q: np.ndarray, qc: np.ndarray) -> np.ndarray:
    """``alpha[j, r] = P(r units remain to pick when the chain reaches unit j)``, ``(N+1, n+1)``."""
    N, n1 = q.shape
    alpha = np.zeros((N + 1, n1))
    alpha[0, n1 - 1] = 1.0
    for j in range(N):
        for r in range(n1):
            a = alpha[j, r]
            if a == 0.0:
                continue
            alpha[j + 1, r] += a * qc[j, r]
            if r > 0:
                alpha[j + 1, r - 1] += a * q[j, r]
    return alpha


@njit(cache=True)
def _row_dots(w: np.ndarray, alpha: np.ndarray, first: int) -> np.ndarray:
    """``out_j = sum_{r >= first} alpha[j, r] w[j, r]``."""
    N, n1 = w.shape
    out = np.zeros(N)
    for j in range(N):
        s = 0.0
        for r in range(first, n1):
            s += alpha[j, r] * w[j, r]
        out[j] = s
    return out


@njit(cache=True)
def first_order(q: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``pi_j = sum_{r >= 1} alpha[j, r] q[j, r]``."""
    return _row_dots(q, alpha, 1)


@njit(cache=True)
def first_order_complement(qc: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``1 - pi_j = sum_r alpha[j, r] qc[j, r]``, accurate when ``pi_j`` is near 1."""
    return _row_dots(qc, alpha, 0)


@njit(cache=True)
def group_codes(rows: np.ndarray, n_free: int) -> tuple[np.ndarray, np.ndarray]:
    """Group id (the row's suffix after its first valid entry, as a base-(N+1) number) and
    a sort key (group id, then decreasing first entry). Needs ``(N+1)^(k+1) < 2^63``."""
    m, k = rows.shape
    base = n_free + 1
    gid = np.empty(m, dtype=np.int64)
    key = np.empty(m, dtype=np.int64)
    for i in range(m):
        f = 0
        while f < k and rows[i, f] < 0:
            f += 1
        code = 0
        for c in range(f + 1, k):
            code = code * base + rows[i, c] + 1
        a = rows[i, f] if f < k else 0
        gid[i] = code
        key[i] = code * base + (n_free - a)
    return gid, key


@njit(cache=True)
def batch_inclusion(
    q: np.ndarray,
    qc: np.ndarray,
    alpha: np.ndarray,
    pi: np.ndarray,
    rows: np.ndarray,
    gid: np.ndarray,
    order: np.ndarray,
) -> np.ndarray:
    """``P(all units of each row included)`` for rows of ascending indices padded by ``-1``.

    ``gid`` identifies the row's suffix (entries after its first valid one); ``order`` visits
    rows grouped by equal ``gid`` and, within a group, by decreasing first entry, so one
    backward sweep per distinct suffix serves the whole group:

        F_j[r] = P(suffix units all included | chain at unit j with r to pick),
        P(row) = sum_r alpha[a, r] q[a, r] F_{a+1}[r - 1],   a = first entry of the row.
    """
    m, k = rows.shape
    n1 = q.shape[1]
    out = np.empty(m)
    F = np.ones(n1)
    have = False  # whether F holds a sweep of the current group
    pos = 0  # F is F_pos
    nxt = 0  # column of the next suffix unit (scanning downwards)
    prev = -1
    for t in range(m):
        i = order[t]
        f = 0
        while f < k and rows[i, f] < 0:
            f += 1
        if f == k:
            out[i] = 1.0
            continue
        a = rows[i, f]
        if f == k - 1:
            out[i] = pi[a]
            continue
        if not (have and prev >= 0 and gid[i] == gid[prev] and pos >= a + 1):
            for r in range(n1):
                F[r] = 1.0
            pos = rows[i, k - 1] + 1
            nxt = k - 1
            have = True
        # sweep down to F_{a+1}
        while pos > a + 1:
            j = pos - 1
            if nxt > f and rows[i, nxt] == j:
                for r in range(n1 - 1, 0, -1):
                    F[r] = q[j, r] * F[r - 1]
                F[0] = 0.0
                nxt -= 1
            else:
                for r in range(n1 - 1, 0, -1):
                    F[r] = q[j, r] * F[r - 1] + qc[j, r] * F[r]
            pos = j
        s = 0.0
        for r in range(1, n1):
            s += alpha[a, r] * q[a, r] * F[r - 1]
        out[i] = s
        prev = i
    return out


@njit(cache=True)
def sample_chain(q: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Walk the chain once per row of uniforms ``u`` (``(size, N)``): exact CPS draws."""
    size, N = u.shape
    n = q.shape[1] - 1
    out = np.zeros((size, N), dtype=np.bool_)
    for s in range(size):
        r = n
        for j in range(N):
            if r == 0:
                break
            if u[s, j] < q[j, r]:
                out[s, j] = True
                r -= 1
    return out


@njit(cache=True)
def path_probabilities(q: np.ndarray, qc: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Probability of each mask (rows of ``masks``) as the product of chain transitions."""
    K, N = masks.shape
    n = q.shape[1] - 1
    out = np.empty(K)
    for i in range(K):
        r = n
        p = 1.0
        for j in range(N):
            if masks[i, j]:
                if r == 0:
                    p = 0.0
                    break
                p *= q[j, r]
                r -= 1
            else:
                p *= qc[j, r]
        out[i] = p if r == 0 else 0.0
    return out


@njit(cache=True)
def pi_and_complement(theta: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``pi`` and ``1 - pi`` (separate positive sums) for log-weights ``theta`` (fused)."""
    q, qc = draw_tables(np.exp(theta), n)
    alpha = forward(q, qc)
    return first_order(q, alpha), first_order_complement(qc, alpha)


@njit(cache=True)
def calibration_state(theta: np.ndarray, target: np.ndarray, n: int):
    """``pi``, ``1 - pi``, residual ``target - pi`` and the log-odds error of ``theta``.

    The residual of a target above 1/2 is taken as ``(1 - pi) - (1 - target)``: ``1 - target``
    is exact there (Sterbenz) and ``1 - pi`` has its own positive sum, so targets within 1e-9
    of 1 keep their relative accuracy. The error is ``max |res| / (pi (1 - pi))``.
    """
    pi, comp = pi_and_complement(theta, n)
    N = theta.shape[0]
    res = np.empty(N)
    err = 0.0
    for k in range(N):
        if target[k] > 0.5:
            res[k] = comp[k] - (1.0 - target[k])
        else:
            res[k] = target[k] - pi[k]
        e = abs(res[k]) / max(pi[k] * comp[k], 1e-300)
        if not e <= err:  # also propagates NaN
            err = e
    return pi, comp, res, err


@njit(cache=True)
def shifted(theta: np.ndarray, step: np.ndarray, cap: float) -> np.ndarray:
    """``theta + step`` with the step capped at ``cap`` in max norm, recentred to mean 0."""
    big = np.max(np.abs(step))
    scale = cap / big if big > cap else 1.0
    out = theta + scale * step
    return out - np.mean(out)


@njit(cache=True)
def fixed_point(theta, target, n, tol, max_iter):
    """Quasi-Newton iterations ``theta += (target - pi) / (pi (1 - pi))`` while they converge.

    This is Newton's step with Hajek's approximation ``J ~ D - d d^T / sum(d)`` of the
    Jacobian (``d = pi (1 - pi)``), ``O(N n)`` per iteration. Stops at ``err <= tol`` or as
    soon as an iteration fails to divide the error by 4 (the caller then takes an exact
    Newton step).
    """
    pi, comp, res, err = calibration_state(theta, target, n)
    for _ in range(max_iter):
        if err <= tol:
            break
        step = res / np.maximum(pi * comp, 1e-300)
        cand = shifted(theta, step, 8.0)
        pi_c, comp_c, res_c, err_c = calibration_state(cand, target, n)
        if not err_c < 0.25 * err:
            if err_c < err:
                theta, pi, comp, res, err = cand, pi_c, comp_c, res_c, err_c
            break
        theta, pi, comp, res, err = cand, pi_c, comp_c, res_c, err_c
    return theta, pi, comp, res, err
