"""The compiled certificate (:func:`pairht.allocation._kkt_kernel.certify`) against the numpy
formulas it replaces in the solver (:func:`pairht.allocation.kkt._value_gradient` and
:func:`pairht.allocation.kkt._residual`): the same terms, the sums in another order, so equal
to ``1e-14`` (relative for the objective and the cost, absolute for the residual, which is
already relative)."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation import allocate, edge_proxy
from pairht.allocation._kkt_kernel import certify
from pairht.allocation.kkt import _residual, _room, _value_gradient
from pairht.allocation.proxies import shared_vertex_term


def _problems(rng, m, G):
    p = rng.beta(0.7, 0.7, (m, G))
    c = 400.0 * np.exp(rng.normal(0.0, 0.5, (m, G)))
    budget = 0.5 * c.sum(axis=1)
    a = edge_proxy(p)
    return p, c, budget, a, shared_vertex_term(a)


def _both(pi, a, b, c, budget, lo, lam, nu=None, size=None, shift=None):
    m = pi.shape[0]
    room = None if size is None else _room(budget, size, shift)
    value, resid, cost = np.empty(m), np.empty(m), np.empty(m)
    z = np.zeros(m)
    certify(pi, a, b, c, budget, lo, lam, z if nu is None else nu, z if size is None else size,
            z if shift is None else shift, z if room is None else room, size is not None,
            value, resid, cost)
    ref_value, g = _value_gradient(pi, a, b)
    ref_resid = _residual(pi, a, b, c, budget, lo, lam, nu, size, shift, room, g)
    return (value, resid, cost), (ref_value, ref_resid, np.einsum("bi,bi->b", c, pi))


def _assert_close(got, ref):
    value, resid, cost = got
    ref_value, ref_resid, ref_cost = ref
    np.testing.assert_array_equal(np.isinf(resid), np.isinf(ref_resid))
    fin = np.isfinite(ref_resid)
    np.testing.assert_array_equal(np.isnan(value), np.isnan(ref_value))
    num = ~np.isnan(ref_value)
    assert np.all(np.abs(value - ref_value)[num] <= 1e-14 * np.abs(ref_value[num]))
    assert np.all(np.abs(cost - ref_cost)[num] <= 1e-14 * np.abs(ref_cost[num]))
    assert np.all(np.abs(resid[fin] - ref_resid[fin]) <= 1e-14)


@pytest.mark.parametrize("G", [2, 5, 16, 33])
def test_certify_matches_numpy_at_solutions_and_perturbed_points(G):
    """At the solver's points (residual ~1e-9, where stationarity cancels) and at points
    moved off them (every term nonzero: box, budget and dual violations included)."""
    rng = np.random.default_rng(G)
    p, c, budget, a, b = _problems(rng, 64, G)
    res = allocate(p, c, budget)
    pts = [res.pi, res.pi * np.exp(rng.normal(0.0, 0.3, res.pi.shape))]
    lams = [res.budget_multiplier, res.budget_multiplier * rng.normal(1.0, 1.0, 64)]
    for pi in pts:
        for lam in lams:
            got, ref = _both(pi, a, b, c, budget, 0.08, lam)
            _assert_close(got, ref)
    # the solver's points themselves: residuals that are not all zero, and all small
    got = _both(res.pi, a, b, c, budget, 0.08, res.budget_multiplier)[0]
    assert got[1].max() > 0.0 and got[1].max() <= 1e-8


@pytest.mark.parametrize("G", [4, 16])
def test_certify_matches_numpy_on_the_size_route(G):
    """The size route's shifted budget row and size term, with a NaN ``nu`` counted as 0."""
    rng = np.random.default_rng(10 + G)
    p, c, budget, a, b = _problems(rng, 32, G)
    budget = 0.7 * c.sum(axis=1)  # affords the cheapest n = G / 2 units at 1
    n = np.full(32, G // 2)
    res = allocate(p, c, budget, size=n)
    shift = c.min(axis=1)
    nu = res.size_multiplier + res.budget_multiplier * shift
    size = n.astype(np.float64)
    for pi in (res.pi, np.clip(res.pi * np.exp(rng.normal(0.0, 0.2, res.pi.shape)), 0.01, 2)):
        _assert_close(*_both(pi, a, b, c, budget, 0.08, res.budget_multiplier, nu, size, shift))
    nu[::3] = np.nan
    _assert_close(*_both(res.pi, a, b, c, budget, 0.08, res.budget_multiplier, nu, size, shift))


def test_certify_reads_nan_as_infinite_residual():
    """A NaN in ``pi`` or in ``lam`` gives ``inf``, as the numpy residual does."""
    rng = np.random.default_rng(1)
    _, c, budget, a, b = _problems(rng, 4, 6)
    pi = np.full((4, 6), 0.5)
    pi[1, 2] = np.nan
    lam = np.ones(4)
    lam[2] = np.nan
    got, ref = _both(pi, a, b, c, budget, 0.08, lam)
    assert np.isinf(got[1][1:3]).all() and np.isinf(ref[1][1:3]).all()
    assert np.isfinite(got[1][[0, 3]]).all()
    _assert_close(got, ref)
