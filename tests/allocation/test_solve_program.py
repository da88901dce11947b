"""``allocate`` is a thin wrapper of ``solve_program``: the same program, solved by the same
code, gives the same ``pi`` bit for bit once ``a`` and ``b`` are built from the proxy."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation import allocate, edge_proxy, solve_program
from pairht.allocation.proxies import shared_vertex_term


@pytest.mark.parametrize("size", [None, "auto", 3])
@pytest.mark.parametrize("covariance", [True, False])
def test_allocate_is_solve_program_with_the_proxys_terms(size, covariance):
    rng = np.random.default_rng(7)
    p = rng.random((12, 6))
    c = rng.uniform(50.0, 500.0, (12, 6))
    budget = 0.55 * c.sum(axis=1)
    a = edge_proxy(p)
    b = shared_vertex_term(a) if covariance else np.zeros(p.shape)
    got = allocate(p, c, budget, size=size, covariance_term=covariance)
    want = solve_program(p, c, budget, a, b, size=size)
    np.testing.assert_array_equal(got.pi, want.pi)
    np.testing.assert_array_equal(got.status, want.status)


def test_solve_program_refuses_terms_that_are_not_energies():
    p, c = np.array([0.2, 0.6, 0.4]), np.array([100.0, 200.0, 300.0])
    a = edge_proxy(p)
    with pytest.raises(ValueError, match="a and b must be finite and nonnegative"):
        solve_program(p, c, 300.0, -a, np.zeros(3))
    with pytest.raises(ValueError, match=r"a must have shape \(3, 3\)"):
        solve_program(p, c, 300.0, a[:2, :2], np.zeros(3))
