"""Stratified: SRSWOR within each level set of pi, exact by enumeration of its support."""

from __future__ import annotations

import math

import numpy as np
import pytest
from design_checks import assert_exact_against_support
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.designs import Stratified
from pairht.estimators import pair_estimate, pair_gradient


@st.composite
def strata_pi(draw, max_units: int = 9):
    """pi with 1-3 levels (ties on purpose), levels drawn from a grid that includes 0 and 1."""
    n_levels = draw(st.integers(1, 3))
    levels = draw(st.lists(st.sampled_from([0.0, 0.125, 0.25, 0.4, 0.5, 0.75, 0.9, 1.0]),
                           min_size=n_levels, max_size=n_levels))
    lab = draw(st.lists(st.integers(0, n_levels - 1), min_size=2, max_size=max_units))
    return np.array([levels[i] for i in lab])


@settings(max_examples=80, deadline=None)
@given(pi=strata_pi())
def test_inclusions_of_every_order_equal_sums_over_the_support(pi):
    d = Stratified(pi)
    np.testing.assert_allclose(d.pi, pi, rtol=0, atol=1e-12)
    assert_exact_against_support(d, max_order=4, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(pi=strata_pi())
def test_each_stratum_draws_one_of_the_two_sizes_around_its_expected_size(pi):
    d = Stratified(pi)
    masks, probs = d.support()
    for h, level in enumerate(d.levels):
        units = d.strata == h
        k = masks[:, units].sum(axis=1)
        S = units.sum() * level
        assert set(k.tolist()) <= {math.floor(S + 1e-12), math.floor(S + 1e-12) + 1}
        assert probs @ k == pytest.approx(S, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(pi=strata_pi(max_units=8), seed=st.integers(0, 2**16))
def test_pair_ht_is_unbiased_by_enumeration_when_every_pair_is_positive(pi, seed):
    d = Stratified(pi)
    rng = np.random.default_rng(seed)
    G = pi.size
    r, s = rng.integers(0, 2, G).astype(float), rng.normal(size=(G, 3))
    masks, probs = d.support()
    joint = d.joint()
    est = np.array([pair_estimate(r, s, m, joint) for m in masks])
    target = pair_gradient(r, s)
    if d.all_pairs_positive():
        np.testing.assert_allclose(probs @ est, target, rtol=0, atol=1e-10)
    else:  # a stratum of size <= 1 never sees two of its units: such pairs have pi_ij = 0
        off = ~np.eye(G, dtype=bool)
        assert np.any(joint[off] == 0)


def test_strata_are_the_level_sets_and_strata_are_independent():
    d = Stratified([0.5, 0.25, 0.5, 0.25, 0.25, 0.25])
    assert d.strata.tolist() == [1, 0, 1, 0, 0, 0]
    assert d.sizes.tolist() == [1.0, 1.0]
    J = d.joint()
    assert J[0, 2] == 0.0                      # one of two: never both
    assert J[0, 1] == pytest.approx(0.5 * 0.25, abs=1e-15)   # across strata: independent
    assert d.inclusion([1, 3]) == 0.0


def test_one_level_is_srswor_of_the_mixed_sizes():
    from pairht.designs import MixedSize

    pi = np.full(6, 0.45)                       # expected size 2.7: sizes 2 and 3
    a, b = Stratified(pi), MixedSize(pi)
    np.testing.assert_allclose(a.joint(), b.joint(), rtol=0, atol=1e-13)
    sets = np.array([[0, 1, 2], [1, 3, 5], [0, 2, 4]])
    np.testing.assert_allclose(a.inclusion(sets), b.inclusion(sets), rtol=0, atol=1e-13)
    assert a._exchangeable_inclusion(2) == pytest.approx(b.joint()[0, 1], abs=1e-13)


def test_bad_pi_is_refused_with_the_rule():
    with pytest.raises(ValueError, match="pi"):
        Stratified([0.5, 1.5])
