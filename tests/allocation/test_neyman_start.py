"""The kernel's cold start without a size (:func:`pairht.allocation._ipm_kernel._neyman_start`):
the Neyman allocation of the gradient at the constant start, at the start's cost, and the
solution it leads to is the one the constant start leads to."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.allocation import edge_proxy
from pairht.allocation._free_setup import cold_start_free
from pairht.allocation._ipm_kernel import _C, _FF, _Q, _ROWS, _Y, _neyman_start, ipm_batch
from pairht.allocation.proxies import shared_vertex_term


def _work(c, y, q, free):
    V = np.zeros((_ROWS, len(c)))
    V[_C], V[_Y], V[_Q], V[_FF] = c, y, q, free.astype(float)
    return V


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 40), st.integers(0, 2**32 - 1), st.floats(0.01, 0.5))
def test_start_is_the_clipped_neyman_allocation_at_the_same_cost(G, seed, lo):
    """Cost kept to a thousandth of the budget slack; every free vertex in its box
    ``[lo + 1e-3 (y - lo), 1 - 1e-3 (1 - y)]``; fixed vertices untouched; and the vertices
    strictly inside the box share one ``y_i / sqrt(q_i / c_i)`` (the Neyman ratio ``t``),
    the clipped ones sit on the side ``t`` puts them."""
    rng = np.random.default_rng(seed)
    c = rng.uniform(0.1, 10.0, G)
    c /= c.sum() * rng.uniform(lo + 0.01, 0.99)  # budget 1 between the floor and full cost
    free = rng.random(G) < 0.8
    free[0] = True
    y = np.empty(G)
    cold_start_free(c[None], lo, 0.99, y[None])  # as free_setup: constant, fixed ones at lo
    y = np.where(free, y, lo)
    q = rng.exponential(1.0, G) ** 3
    V = _work(c, y, q, free)
    assert _neyman_start(V, lo)
    y1 = V[_Y]
    target = c @ y
    assert abs(c @ y1 - target) <= 1e-3 * (1.0 - target)
    np.testing.assert_array_equal(y1[~free], y[~free])
    bl, bu = lo + 1e-3 * (y - lo), 1.0 - 1e-3 * (1.0 - y)
    assert np.all(y1[free] >= bl[free]) and np.all(y1[free] <= bu[free])
    w = np.sqrt(q / c)
    inner = free & (y1 > bl) & (y1 < bu)
    if inner.any():
        t = y1[inner] / w[inner]
        np.testing.assert_allclose(t, t[0], rtol=1e-12)
        assert np.all(t[0] * w[free & (y1 == bl)] <= bl[free & (y1 == bl)])
        assert np.all(t[0] * w[free & (y1 == bu)] >= bu[free & (y1 == bu)])


def test_start_is_refused_without_a_gradient():
    """``q = 0`` on every free vertex gives no direction: the start is left as it was."""
    c = np.array([0.2, 0.3, 0.4])
    y = np.full(3, 0.9)
    V = _work(c, y, np.zeros(3), np.ones(3, dtype=bool))
    assert not _neyman_start(V, 0.08)
    np.testing.assert_array_equal(V[_Y], y)


@pytest.mark.parametrize("G", [2, 8, 32])
@pytest.mark.parametrize("dense", [False, True])
def test_neyman_start_reaches_the_constant_starts_solution(G, dense):
    """Same problems from the constant start and from its Neyman move, on the Woodbury path
    and (``p`` hidden) the dense one: both meet the kernel's tolerance 1e-9 and agree to the
    solution's conditioning (1e-7 relative)."""
    rng = np.random.default_rng(G)
    m = 64
    p = rng.beta(0.7, 0.7, (m, G))
    c = 400.0 * np.exp(rng.normal(0.0, 0.5, (m, G)))
    row = c / (0.5 * c.sum(axis=1))[:, None]
    a = edge_proxy(p)
    b = shared_vertex_term(a)
    y0 = np.empty((m, G))
    cold_start_free(row, 0.08, 0.99, y0)
    pk = np.full_like(p, -1.0) if dense else p
    args = (0.08, np.zeros(m), False, np.zeros((m, G), dtype=bool), y0, 0.1, 1e-9, 100, False)
    plain = ipm_batch(a, b, pk, row, *args, False)
    moved = ipm_batch(a, b, pk, row, *args, True)
    assert plain[4].all() and moved[4].all()
    np.testing.assert_allclose(moved[0], plain[0], rtol=1e-7, atol=0.0)
