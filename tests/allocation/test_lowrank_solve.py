"""The disagreement structure of the Newton matrix (diagonal + rank 2, solved in Woodbury
form) and the compiled pair tables: each checked against the dense computation it replaces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.allocation import allocate, edge_proxy, solve_program
from pairht.allocation._ipm_kernel import _wb_accurate, _wb_factor, _wb_solve, ipm_batch
from pairht.allocation.proxies import disagreement, shared_vertex_term
from pairht.allocation.solver import _start_point


def _kernel_inputs(rng, m, G, pi_min=0.08):
    p = rng.beta(0.7, 0.7, (m, G))
    c = 400.0 * np.exp(rng.normal(0.0, 0.5, (m, G)))
    budget = 0.5 * c.sum(axis=1)
    a = edge_proxy(p)
    b = shared_vertex_term(a)
    row = c / budget[:, None]
    y0 = _start_point(row, pi_min, None, None, None)
    fixed = np.zeros((m, G), dtype=bool)
    return a, b, p, row, y0, fixed


@pytest.mark.parametrize("G", [2, 3, 8, 16, 32])
def test_woodbury_path_reaches_the_dense_paths_solution(G):
    """Same problems, once with the structure detected (Woodbury solves) and once with it
    hidden (a ``p`` that does not generate ``a``: dense Cholesky). Both stop at the kernel's
    tolerance 1e-9 on the relative KKT residual, so the points agree to the solution's
    conditioning (1e-7 relative here), and the Woodbury path never needs more iterations
    than the dense one plus one."""
    rng = np.random.default_rng(G)
    a, b, p, row, y0, fixed = _kernel_inputs(rng, 64, G)
    args = (0.08, np.zeros(64), False, fixed, y0, 0.1, 1e-9, 100)
    fast = ipm_batch(a, b, p, row, *args)
    dense = ipm_batch(a, b, np.full_like(p, -1.0), row, *args)
    assert fast[4].all() and dense[4].all()  # done: both met the tolerance
    np.testing.assert_allclose(fast[0], dense[0], rtol=1e-7, atol=0.0)
    assert np.all(fast[3] <= dense[3] + 1)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 24), st.integers(0, 2**32 - 1))
def test_woodbury_solve_equals_dense_solve(G, seed):
    """``(diag(d) + sig (x1 x2^T + x2 x1^T)) z = r`` solved in O(G) matches
    ``np.linalg.solve`` on the assembled matrix whenever the form accepts it (d > 0,
    capacitance not singular) and the accuracy check passes."""
    rng = np.random.default_rng(seed)
    p = rng.random(G)
    w = rng.uniform(1.0, 50.0, G)
    x1, x2 = w * p, w * (1.0 - p)
    sig = rng.uniform(0.01, 1.0)
    low = sig * (np.outer(x1, x2) + np.outer(x2, x1))
    d = rng.uniform(0.0, 5.0, G) * np.abs(low).max() + 1e-3
    K = np.diag(d) + low
    r = rng.normal(size=G)
    W = np.empty((4, G))
    if not _wb_factor(d, x1, x2, sig, W):
        return
    z = r.copy()
    _wb_solve(W, z)
    if not _wb_accurate(d, x1, x2, sig, r, z):
        return
    want = np.linalg.solve(K, r)
    # The accepted residual is <= 1e-10 of the largest term; with cond(K) <= 1e4 here, the
    # solution agrees to 1e-6 relative of its largest entry.
    if np.linalg.cond(K) <= 1e4:
        np.testing.assert_allclose(z, want, rtol=0, atol=1e-6 * np.abs(want).max())
    np.testing.assert_allclose(K @ z, r, rtol=0, atol=1e-9 * max(np.abs(r).max(),
                                                                  np.abs(K @ z).max()))


def test_woodbury_form_refuses_a_nonpositive_diagonal():
    W = np.empty((4, 3))
    ok = _wb_factor(np.array([1.0, 0.0, 2.0]), np.ones(3), np.ones(3), 1.0, W)
    assert not ok


def test_batched_call_equals_single_calls_bit_for_bit():
    """Every problem of a batch is solved by the same arithmetic as alone (the kernel loops
    over problems; no quantity is shared across the batch)."""
    rng = np.random.default_rng(3)
    p = rng.beta(0.7, 0.7, (16, 12))
    c = 400.0 * np.exp(rng.normal(0.0, 0.5, (16, 12)))
    budget = 0.5 * c.sum(axis=1)
    batch = allocate(p, c, budget)
    for k in range(16):
        one = allocate(p[k], c[k], budget[k])
        np.testing.assert_array_equal(one.pi, batch.pi[k])
        assert one.iterations == batch.iterations[k]
        assert one.kkt_residual == batch.kkt_residual[k]


def test_sub_group_of_the_disagreement_takes_the_same_path_as_allocate():
    """``solve_program`` with the disagreement proxy of a sub-group (the step's unfinished
    candidates) is the same program and gives the same point as ``allocate`` on it."""
    rng = np.random.default_rng(5)
    p = rng.random(10)
    c = rng.uniform(50.0, 500.0, 10)
    keep = np.array([0, 2, 3, 5, 7, 8])
    a = edge_proxy(p)[np.ix_(keep, keep)]
    got = solve_program(p[keep], c[keep], 900.0, a, shared_vertex_term(a))
    want = allocate(p[keep], c[keep], 900.0)
    np.testing.assert_array_equal(got.pi, want.pi)


@given(st.integers(1, 4), st.integers(2, 9), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_compiled_tables_equal_the_numpy_formulas(m, G, seed):
    p = np.random.default_rng(seed).random((m, G))
    pi, pj = p[..., :, None], p[..., None, :]
    want = pi * (1.0 - pj) + (1.0 - pi) * pj
    want[..., np.arange(G), np.arange(G)] = 0.0
    d = disagreement(p)
    np.testing.assert_array_equal(d, want)  # the same IEEE expression, entry by entry
    tot = np.sqrt(want).sum(axis=-1)
    vt = np.maximum(tot * tot - want.sum(axis=-1), 0.0)
    # float64 sums of G <= 9 terms of size <= 1 in another order: 1e-13 of (sum sqrt a)^2
    np.testing.assert_allclose(shared_vertex_term(d), vt, rtol=0, atol=1e-13 * max(
        1.0, float((tot * tot).max())))
