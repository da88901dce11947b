"""DependentRounding and its randomized mixture: exact probabilities, positivity, identities."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from design_checks import assert_exact_against_support, assert_fixed_size_identities
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.designs import DependentRounding, PositivityWarning, RandomizedDependentRounding
from pairht.testing.strategies import (
    fixed_size_inclusion_probabilities,
    inclusion_probabilities,
)


def test_natural_order_never_selects_units_0_and_1_together():
    d = DependentRounding([0.5, 0.5, 0.5, 0.5])
    J = d.joint()
    assert J[0, 1] == 0.0 and J[2, 3] == 0.0
    assert J[0, 2] == 0.25
    assert not d.all_pairs_positive()
    assert not d.sample(rng=0, size=2000)[:, :2].all(axis=1).any()


@given(inclusion_probabilities(max_size=9), st.randoms(use_true_random=False))
def test_inclusion_orders_1_to_4_equal_sums_over_support(pi, rnd):
    order = list(range(pi.size))
    rnd.shuffle(order)
    d = DependentRounding(pi, order=order)
    assert_exact_against_support(d)
    np.testing.assert_allclose(d.pi, pi, rtol=0, atol=_marginal_tolerance(pi))


def _marginal_tolerance(pi):
    """1e-12, plus the gap of sum(pi) to an integer when the final carry is rounded (<= 1e-9)."""
    gap = abs(float(pi.sum()) - round(float(pi.sum())))
    return 1e-12 + (gap if gap <= 1.01e-9 else 0.0)  # carry and sum round differently


@given(fixed_size_inclusion_probabilities(max_size=9))
def test_integer_sum_gives_fixed_size(pi):
    d = DependentRounding(pi)
    assert d.fixed_size and d.n == round(float(pi.sum()))
    masks, _ = d.support()
    assert np.all(masks.sum(axis=1) == d.n)


@given(inclusion_probabilities(max_size=9))
def test_size_is_floor_or_ceil_of_sum(pi):
    d = DependentRounding(pi)
    masks, probs = d.support()
    total = float(pi.sum())
    sizes = masks.sum(axis=1)
    assert np.all((sizes >= math.floor(total - 1e-9)) & (sizes <= math.ceil(total + 1e-9)))
    np.testing.assert_allclose(probs @ sizes, d.pi.sum(), rtol=0, atol=1e-12)
    assert abs(d.pi.sum() - total) <= _marginal_tolerance(pi)


@settings(max_examples=25)
@given(inclusion_probabilities(max_size=8), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_randomized_inclusions_equal_sums_over_support(pi, n_orders, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PositivityWarning)
        d = RandomizedDependentRounding(pi, n_orders=n_orders, rng=seed)
    assert_exact_against_support(d)
    np.testing.assert_allclose(
        d.joint(),
        np.mean([DependentRounding(pi, order=o).joint() for o in d.orders], axis=0),
        rtol=0,
        atol=1e-15,
    )


def _pi_256(seed):
    rng = np.random.default_rng(seed)
    pi = np.concatenate(
        [
            np.logspace(-6, -1, 60),
            1 - np.logspace(-9, -1, 60),
            rng.uniform(0.1, 0.9, 126),
            np.zeros(5),
            np.ones(5),
        ]
    )
    pi[120:246] += (math.ceil(pi.sum()) - pi.sum()) / 126
    return pi[rng.permutation(pi.size)]


@pytest.mark.parametrize("design", ["dependent_rounding", "randomized_dependent_rounding"])
def test_fixed_size_identities_at_n_256(design):
    pi = _pi_256(0)
    if design == "dependent_rounding":
        d = DependentRounding(pi, order=np.random.default_rng(1).permutation(pi.size))
    else:
        d = RandomizedDependentRounding(pi, n_orders=4, rng=2)
    assert d.fixed_size
    np.testing.assert_allclose(d.pi, pi, rtol=0, atol=1e-12)
    pairs = np.sort(np.random.default_rng(3).choice(256, (6, 2), replace=False), axis=1)
    assert_fixed_size_identities(d, pairs)


@pytest.mark.parametrize("n_units", [3, 5, 12, 40])
def test_randomized_orders_make_every_pair_positive(n_units):
    pi = np.full(n_units, 0.5)
    pi[0] = 0.3
    pi[1] = 0.7
    fixed = DependentRounding(pi)
    assert not fixed.all_pairs_positive()  # 0.3 + 0.7 share one unit interval
    with warnings.catch_warnings():
        warnings.simplefilter("error", PositivityWarning)
        d = RandomizedDependentRounding(pi, n_orders=32, rng=0)
    assert d.all_pairs_positive()


def test_positivity_warning_when_sum_at_most_one():
    with pytest.warns(PositivityWarning, match="impossible here"):
        d = RandomizedDependentRounding([0.2, 0.3, 0.5], n_orders=8, rng=0)
    assert not d.all_pairs_positive()


def test_positivity_warning_when_too_few_orders():
    with pytest.warns(PositivityWarning, match="Increase n_orders"):
        RandomizedDependentRounding([0.5] * 4, orders=[[0, 1, 2, 3]])


def test_explicit_orders_are_recorded():
    d = RandomizedDependentRounding([0.5] * 4, orders=[[0, 1, 2, 3], [0, 2, 1, 3]])
    np.testing.assert_array_equal(d.orders, [[0, 1, 2, 3], [0, 2, 1, 3]])
    assert d.n_orders == 2 and d.n == 2
    assert d.joint()[0, 1] == 0.125


def test_randomized_support_when_orders_round_the_final_carry_differently():
    """Sum within 1e-9 of an integer: every order's support lives on the same sizes."""
    pi = np.array([0.25, 1 - 1e-9, 0.75])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PositivityWarning)
        d = RandomizedDependentRounding(pi, n_orders=4, rng=0)
    assert_exact_against_support(d)


@settings(max_examples=30)
@given(inclusion_probabilities(max_size=9), st.randoms(use_true_random=False))
def test_large_batch_path_equals_sums_over_support(pi, rnd):
    """Batches above the threshold use precomputed stretch products: same exact values."""
    from pairht.designs import dependent_rounding as module

    order = list(range(pi.size))
    rnd.shuffle(order)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "_STRETCH_MIN_ROWS", 0)
        assert_exact_against_support(DependentRounding(pi, order=order))


def test_large_batch_path_at_n_64():
    rng = np.random.default_rng(4)
    pi = rng.uniform(0.02, 0.98, 64)
    pi *= 32 / pi.sum()
    d = DependentRounding(pi, order=rng.permutation(64))
    sets = np.sort(np.stack([rng.choice(64, 4, replace=False) for _ in range(5000)]), axis=1)
    np.testing.assert_allclose(
        d.inclusion(sets), [d.inclusion(s) for s in sets[:, ::-1]], rtol=1e-13, atol=1e-15
    )
