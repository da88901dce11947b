"""The length-scaled energy proxy: a and b are exact expectations, checked by enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.allocation import allocate, kkt_residual, proxy_value, solve_program
from pairht.allocation.energy import length_energy, second_symmetric_others
from pairht.designs import Bernoulli
from pairht.estimators import design_covariance, pair_kernel


def _model(p, total_len):
    """Orthogonal scores s_i = m_i e_i with m_i^2 = total_len_i / mean (the proxy's model)."""
    m2 = np.asarray(total_len) / np.mean(total_len)
    return np.diag(np.sqrt(m2))


def _rewards(p):
    """Every binary reward vector and its probability under independent Bernoulli(p)."""
    G = len(p)
    rs = np.array(list(itertools.product([0.0, 1.0], repeat=G)))
    probs = np.prod(np.where(rs == 1.0, p, 1.0 - p), axis=1)
    return rs, probs


probs_st = st.lists(st.sampled_from([0.0, 1.0, 0.5, 0.1, 0.93]) | st.floats(0.0, 1.0),
                    min_size=2, max_size=6)
lens_st = st.floats(1.0, 1000.0)


@settings(max_examples=60, deadline=None)
@given(p=probs_st, data=st.data())
def test_a_and_b_equal_brute_force_expectations_over_bernoulli_rewards(p, data):
    """a_ij = E||h_ij||^2 and b_i = sum over ordered j != k (both != i) of E<h_ij, h_ik>."""
    p = np.array(p)
    G = p.size
    n = np.array(data.draw(st.lists(lens_st, min_size=G, max_size=G)))
    a, b = length_energy(p, n)
    S = _model(p, n)
    rs, probs = _rewards(p)
    Ea = np.zeros((G, G))
    Eb = np.zeros(G)
    for r, w in zip(rs, probs):
        h = pair_kernel(r, S)  # (G, G, d)
        gram = np.einsum("ijd,ikd->ijk", h, h)  # <h_ij, h_ik>
        Ea += w * np.einsum("ijj->ij", gram)
        for i in range(G):
            others = [j for j in range(G) if j != i]
            Eb[i] += w * sum(gram[i, j, k] for j in others for k in others if j != k)
    scale = max(float(np.abs(Ea).max()), float(np.abs(Eb).max()), 1.0)
    np.testing.assert_allclose(a, Ea, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(b, Eb, rtol=0, atol=1e-12 * scale)


@settings(max_examples=25, deadline=None)
@given(p=probs_st, data=st.data())
def test_the_objective_is_the_expected_bernoulli_ht_variance_up_to_a_constant(p, data):
    """M^2 E_r[tr Cov(pair HT)] = f(pi) - f(1) under the model, for any pi (Proposition 1)."""
    p = np.array(p)
    G = p.size
    n = np.array(data.draw(st.lists(lens_st, min_size=G, max_size=G)))
    pi = np.array(data.draw(st.lists(st.floats(0.05, 1.0), min_size=G, max_size=G)))
    a, b = length_energy(p, n)
    S = _model(p, n)
    rs, probs = _rewards(p)
    design = Bernoulli(pi)
    var = sum(w * float(design_covariance(r, S, design, full=False).trace)
              for r, w in zip(rs, probs))
    M = G * (G - 1) / 2
    want = float(proxy_value(pi, a, b) - proxy_value(np.ones(G), a, b))
    assert M * M * var == pytest.approx(want, rel=1e-10, abs=1e-12)


def test_second_symmetric_polynomial_of_the_others_equals_its_definition():
    x = np.random.default_rng(0).random((4, 7))
    for row, got in zip(x, second_symmetric_others(x)):
        for i in range(7):
            o = np.delete(row, i)
            want = sum(o[j] * o[k] for j in range(6) for k in range(j + 1, 6))
            assert got[i] == pytest.approx(want, rel=1e-13)


def test_allocation_with_the_length_energy_solves_its_program():
    """KKT residual of the energy program at the returned pi (the solver's own check, with
    this (a, b)); and it differs from the disagreement allocation when lengths differ."""
    rng = np.random.default_rng(3)
    p = rng.random((5, 8))
    c = 400 * np.exp(rng.normal(0, 0.6, (5, 8)))
    plen = np.full((5, 8), 32.0)
    bud = 0.4 * c.sum(axis=1)
    a, b = length_energy(p, plen + c)
    res = solve_program(p, c, bud, a, b, 0.08)
    assert res.converged.all()
    r = kkt_residual(res.pi, a, b, c, bud, 0.08, res.budget_multiplier)
    assert np.all(r <= 1e-8)
    np.testing.assert_allclose((res.pi * c).sum(axis=1), bud, rtol=1e-9)
    base = allocate(p, c, bud, 0.08)
    assert np.abs(res.pi - base.pi).max() > 1e-2


def test_bad_lengths_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match=r"total_len must be positive.*total_len\[1\] = 0\.0"):
        length_energy([0.5, 0.5], [10.0, 0.0])
    with pytest.raises(ValueError, match="total_len must have the shape of p_hat"):
        length_energy([0.5, 0.5], [10.0])
