"""MixedSize: a fixed-size design at any expected size, exact by enumeration of its support."""

from __future__ import annotations

import math

import numpy as np
import pytest
from design_checks import assert_exact_against_support
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pairht.designs import MixedSize, make_design
from pairht.designs.mixed_size import split_direction
from pairht.estimators import pair_estimate, pair_gradient
from pairht.testing.strategies import inclusion_probabilities


def _non_integer(pi: np.ndarray) -> bool:
    s = float(pi.sum())
    return 1e-6 < s - math.floor(s) < 1 - 1e-6


@settings(max_examples=60, deadline=None)
@given(pi=inclusion_probabilities(min_size=2, max_size=8))
def test_inclusions_of_every_order_equal_sums_over_the_support(pi):
    d = MixedSize(pi)
    # The requested marginals are met to rounding, except that a sum within 1e-9 of an
    # integer is projected onto it (the fixed-size designs' own rule, documented): then they
    # move by at most that much. Either way d.pi is what the design draws, to 1e-12.
    s = float(pi.sum())
    near_integer = min(s - math.floor(s), math.ceil(s) - s) <= 1e-9
    np.testing.assert_allclose(d.pi, pi, rtol=0, atol=1e-9 if near_integer else 1e-12)
    assert_exact_against_support(d, max_order=4, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(pi=inclusion_probabilities(min_size=2, max_size=8))
def test_sample_size_is_one_of_the_two_neighbours_of_the_expected_size(pi):
    d = MixedSize(pi)
    masks, probs = d.support()
    k = masks.sum(axis=1)
    lo, hi = d.sizes
    assert hi - lo in (0, 1) and set(k.tolist()) <= {lo, hi}
    # A sum within 1e-9 of an integer is that integer (the fixed-size designs' projection).
    assert lo - 1e-9 <= pi.sum() <= hi + 1e-9
    assert probs @ k == pytest.approx(pi.sum(), abs=1e-9)
    assert probs @ k == pytest.approx(d.pi.sum(), abs=1e-12)
    if _non_integer(pi):
        assert (lo, hi) == (math.floor(pi.sum()), math.floor(pi.sum()) + 1)
        assert probs[k == lo].sum() == pytest.approx(d.weights[0], abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(pi=inclusion_probabilities(min_size=2, max_size=7, allow_zero=False),
       seed=st.integers(0, 2**16))
def test_pair_ht_with_the_mixture_joint_is_unbiased_by_enumeration(pi, seed):
    rng = np.random.default_rng(seed)
    G = pi.size
    r, s = rng.integers(0, 2, G).astype(float), rng.normal(size=(G, 3))
    d = MixedSize(pi)
    # HT is unbiased exactly when every pair can be observed (sum(pi) < 2 cannot).
    assume(d.all_pairs_positive())
    joint = d.joint()
    masks, probs = d.support()
    est = np.stack([pair_estimate(r, s, m, joint=joint) for m in masks])
    g = pair_gradient(r, s)
    np.testing.assert_allclose(probs @ est, g, rtol=0, atol=1e-12 * max(np.abs(est).max(), 1))


@pytest.mark.parametrize(("N", "s"), [(5, 0.5), (16, 0.37), (7, 0.9), (3, 0.2)])
def test_equal_probabilities_mix_srswor_of_the_two_sizes(N, s):
    """Uniform pi = s: joint = lam C(n,2)/C(N,2) + f C(n+1,2)/C(N,2) with f = sN - n."""
    d = MixedSize(np.full(N, s))
    n = math.floor(s * N)
    f = s * N - n
    want = ((1 - f) * n * (n - 1) + f * (n + 1) * n) / (N * (N - 1))
    off = ~np.eye(N, dtype=bool)
    np.testing.assert_allclose(d.joint()[off], want, rtol=0, atol=1e-14)
    np.testing.assert_allclose(d.components[0].pi, n / N, atol=1e-14)
    np.testing.assert_allclose(d.components[1].pi, (n + 1) / N, atol=1e-14)


def test_units_at_one_and_zero_keep_their_probability_in_both_components():
    pi = np.array([1.0, 0.0, 0.3, 0.45, 0.9, 1.0])
    d = MixedSize(pi)
    for c in d.components:
        assert c.pi[0] == 1.0 and c.pi[5] == 1.0 and c.pi[1] == 0.0
    assert_exact_against_support(d, atol=1e-12)


def test_an_integer_sum_is_the_base_design_itself():
    pi = np.array([0.2, 0.5, 0.6, 0.7])
    d = MixedSize(pi)
    assert d.sizes == (2, 2) and d.weights == (1.0, 0.0) and d.components[1] is None
    np.testing.assert_allclose(d.joint(), make_design("conditional_poisson", pi).joint(),
                               rtol=0, atol=0)


def test_randomized_dependent_rounding_can_be_mixed_too():
    pi = np.array([0.3, 0.55, 0.8, 0.25, 0.6])
    d = MixedSize(pi, base="randomized_dependent_rounding", n_orders=3, rng=1)
    assert_exact_against_support(d, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(pi=inclusion_probabilities(min_size=2, max_size=12))
def test_split_direction_keeps_both_components_in_the_unit_box(pi):
    s = float(pi.sum())
    frac = s - math.floor(s)
    if not 1e-9 < frac < 1 - 1e-9:
        return
    delta = split_direction(pi, frac)
    assert delta.min() >= 0 and delta.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(pi - frac * delta >= -1e-12)
    assert np.all(pi + (1 - frac) * delta <= 1 + 1e-12)


def test_samples_follow_the_mixture():
    """Size frequencies of 200,000 draws against lambda (binomial sd 0.0011: 6 sd = 0.0067)."""
    d = MixedSize(np.array([0.3, 0.55, 0.8, 0.25, 0.6, 0.1]))  # sum 2.6: lambda = 0.4
    k = d.sample(rng=0, size=200_000).sum(axis=1)
    assert set(np.unique(k).tolist()) == {2, 3}
    assert abs(np.mean(k == 2) - d.weights[0]) < 0.0067


def test_a_base_that_is_not_fixed_size_is_refused():
    with pytest.raises(ValueError, match=r"base must be one of .*got 'bernoulli'"):
        MixedSize([0.5, 0.5, 0.5], base="bernoulli")


def test_registered_under_its_name():
    assert isinstance(make_design("mixed_size", [0.5, 0.25, 0.4]), MixedSize)
