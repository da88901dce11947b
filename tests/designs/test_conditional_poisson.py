"""ConditionalPoisson: exact against enumeration, against high precision, and at N = 256."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from design_checks import all_sets, assert_exact_against_support, assert_fixed_size_identities
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pairht.designs import ConditionalPoisson
from pairht.testing.strategies import fixed_size_inclusion_probabilities


def _extreme_pi(n_units: int, seed: int, n_zero: int = 0, n_one: int = 0) -> np.ndarray:
    """pi spanning 1e-6 .. 1 - 1e-9 (log-spaced tails, a tie block), integer sum."""
    rng = np.random.default_rng(seed)
    m = n_units - n_zero - n_one
    k = m // 4
    low = np.logspace(-6, -1, k)
    high = 1.0 - np.logspace(-9, -1, k)
    mid = np.full(m - 2 * k, 0.5)
    mid[: (m - 2 * k) // 2] = rng.uniform(0.2, 0.8, (m - 2 * k) // 2)
    free = np.concatenate([low, high, mid])
    gap = math.ceil(free.sum()) - free.sum()
    sl = slice(2 * k, m)
    free[sl] += gap / (m - 2 * k)  # the middle block absorbs the fractional part
    pi = np.concatenate([free, np.zeros(n_zero), np.ones(n_one)])
    return pi[rng.permutation(n_units)]


@given(fixed_size_inclusion_probabilities(max_size=10))
def test_inclusion_orders_1_to_4_equal_sums_over_support(pi):
    assert_exact_against_support(ConditionalPoisson(pi))


@given(fixed_size_inclusion_probabilities(max_size=11))
def test_support_is_every_size_n_sample_with_probability_proportional_to_weights(pi):
    d = ConditionalPoisson(pi)
    masks, probs = d.support()
    assert np.all(masks.sum(axis=1) == d.n)
    # independent: P(s) = prod_{k in s} w_k / sum over all size-n samples, in log space
    free = (pi > 0) & (pi < 1)
    assert masks.shape[0] == math.comb(int(free.sum()), d.n - int((pi == 1).sum()))
    assert np.all(masks[:, pi == 1]) and not np.any(masks[:, pi == 0])
    logw = np.log(d.working_weights[free])
    score = masks[:, free].astype(np.float64) @ logw
    ref = np.exp(score - score.max())
    np.testing.assert_allclose(probs, ref / ref.sum(), rtol=1e-12, atol=1e-15)


@given(fixed_size_inclusion_probabilities(max_size=12))
def test_pi_equals_the_input_to_1e_12(pi):
    d = ConditionalPoisson(pi)
    np.testing.assert_allclose(d.pi, pi, rtol=0, atol=1e-12)
    assert d.calibration_error <= 1e-12
    assert d.n == round(float(pi.sum()))


@pytest.mark.parametrize(("n_zero", "n_one"), [(0, 0), (5, 7)])
def test_fixed_size_identities_at_n_256_with_extreme_pi(n_zero, n_one):
    pi = _extreme_pi(256, seed=3, n_zero=n_zero, n_one=n_one)
    d = ConditionalPoisson(pi)
    np.testing.assert_allclose(d.pi, pi, rtol=0, atol=1e-12)
    assert pi.min() == 0.0 if n_zero else pi.min() <= 1e-6
    rng = np.random.default_rng(0)
    pairs = np.sort(np.stack([rng.choice(256, 2, replace=False) for _ in range(6)]), axis=1)
    assert_fixed_size_identities(d, pairs)
    # pi = 1 units are in every joint with pi_ij = pi_j; pi = 0 units in none
    J = d.joint()
    ones, zeros = np.flatnonzero(pi == 1), np.flatnonzero(pi == 0)
    np.testing.assert_array_equal(J[ones], np.broadcast_to(d.pi, (ones.size, 256)))
    assert not J[zeros].any()


def _mp_esp(w: list, degree: int) -> list:
    """e_0..e_degree of w in mpmath arithmetic (the textbook recursion)."""
    e = [mpmath.mpf(1)] + [mpmath.mpf(0)] * degree
    for x in w:
        for m in range(degree, 0, -1):
            e[m] += x * e[m - 1]
    return e


def test_matches_a_50_digit_computation_at_n_36():
    pi = _extreme_pi(36, seed=11, n_zero=1, n_one=1)
    d = ConditionalPoisson(pi)
    free = np.flatnonzero((pi > 0) & (pi < 1))
    nf = d.n - 1
    rng = np.random.default_rng(1)
    with mpmath.workdps(50):
        w = [mpmath.mpf(float(x)) for x in d.working_weights[free]]
        en = _mp_esp(w, nf)[nf]

        def exact(subset):
            rest = [w[t] for t in range(len(w)) if t not in subset]
            num = mpmath.fprod([w[t] for t in subset]) * _mp_esp(rest, nf - len(subset))[-1]
            return float(num / en)

        # first order: the calibration solved pi(w) = pi to float precision
        ref_pi = np.array([exact([t]) for t in range(len(w))])
        np.testing.assert_allclose(ref_pi, pi[free], rtol=1e-12, atol=1e-15)
        for k in (2, 3, 4):
            sets = np.sort(np.stack([rng.choice(len(w), k, replace=False) for _ in range(25)]), 1)
            ref = np.array([exact(list(s)) for s in sets])
            got = d.inclusion(free[sets])
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)


def test_inclusion_with_units_at_0_and_1():
    d = ConditionalPoisson([1.0, 0.0, 0.5, 0.5])
    assert d.n == 2
    assert d.inclusion([0, 2]) == 0.5
    assert d.inclusion([1, 2]) == 0.0
    assert d.inclusion([0]) == 1.0
    assert d.inclusion([2, 3]) == 0.0  # one free unit is drawn from {2, 3}
    np.testing.assert_array_equal(d.log_weights[:2], [np.inf, -np.inf])


def test_all_units_decided():
    d = ConditionalPoisson([1.0, 0.0, 1.0])
    assert d.n == 2
    np.testing.assert_array_equal(d.joint(), [[1, 0, 1], [0, 0, 0], [1, 0, 1]])
    np.testing.assert_array_equal(d.sample(rng=0, size=3), np.tile([True, False, True], (3, 1)))
    assert_exact_against_support(d)


def test_sum_off_by_less_than_tolerance_is_projected():
    pi = np.array([0.3, 0.7 + 5e-10, 0.5, 0.5])
    d = ConditionalPoisson(pi)
    assert d.n == 2
    assert abs(d.pi.sum() - 2) < 1e-15
    np.testing.assert_allclose(d.pi, pi, rtol=0, atol=1e-9)
    assert_exact_against_support(d)


@settings(max_examples=20)
@given(st.integers(2, 40), st.integers(0, 2**32 - 1))
def test_batch_inclusion_order_independent_of_grouping(n_units, seed):
    """A shuffled batch of sets gives the same values as the sets one by one."""
    rng = np.random.default_rng(seed)
    pi = rng.uniform(0.05, 0.95, n_units)
    pi += (math.ceil(pi.sum()) - pi.sum()) / n_units
    assume(pi.max() < 1)
    d = ConditionalPoisson(pi)
    k = min(4, n_units)
    sets = all_sets(n_units, k)
    sets = sets[rng.permutation(len(sets))[:200]]
    batch = d.inclusion(sets)
    np.testing.assert_array_equal(batch, [d.inclusion(s) for s in sets])


def test_matches_a_50_digit_computation_at_n_256_for_extreme_units():
    """Relative accuracy of sets holding the smallest, largest and tied units at N = 256."""
    pi = _extreme_pi(256, seed=5, n_zero=2, n_one=2)
    d = ConditionalPoisson(pi)
    free = np.flatnonzero((pi > 0) & (pi < 1))
    nf = d.n - 2
    srt = free[np.argsort(pi[free])]
    values, counts = np.unique(pi[free], return_counts=True)
    tie = free[pi[free] == values[counts > 1][0]][:3]  # equal working weights
    sets = [srt[:2], srt[-2:], [srt[0], srt[-1]], srt[:3], [srt[0], srt[1], srt[-1], srt[-2]]]
    sets += [tie[:2], tie]
    with mpmath.workdps(50):
        w = {int(t): mpmath.mpf(float(d.working_weights[t])) for t in free}
        en = _mp_esp(list(w.values()), nf)[nf]
        for s in sets:
            s = sorted(int(t) for t in s)
            rest = [w[t] for t in w if t not in s]
            num = mpmath.fprod([w[t] for t in s]) * _mp_esp(rest, nf - len(s))[-1]
            np.testing.assert_allclose(d.inclusion(s), float(num / en), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("pi", "expected"),
    [
        ([1.0, 1e-10, 0.0], [1.0, 0.0, 0.0]),  # n = 1 taken by the certain unit
        ([1.0 - 1e-10, 1.0, 0.0], [1.0, 1.0, 0.0]),  # n = 2 needs every unit with pi > 0
    ],
)
def test_sum_within_tolerance_with_no_freedom_left(pi, expected):
    d = ConditionalPoisson(pi)
    np.testing.assert_array_equal(d.pi, expected)
    assert_exact_against_support(d)


def test_higher_orders_against_support_and_identity_at_n_256():
    """Orders 5-6 against enumeration; order 7 -> 8 identity at N = 256 (long-set path)."""
    pi = _extreme_pi(12, seed=2, n_zero=1, n_one=1)
    d = ConditionalPoisson(pi)
    masks, probs = d.support()
    for k in (5, 6):
        sets = all_sets(12, k)
        ref = probs @ np.all(masks[:, sets], axis=2)
        np.testing.assert_allclose(d.inclusion(sets), ref, rtol=0, atol=1e-12)
    d = ConditionalPoisson(_extreme_pi(256, seed=8, n_zero=3, n_one=3))
    rng = np.random.default_rng(5)
    for _ in range(2):
        s = np.sort(rng.choice(256, 7, replace=False))
        others = np.setdiff1d(np.arange(256), s)
        rows = np.column_stack([np.tile(s, (others.size, 1)), others])
        np.testing.assert_allclose(
            d.inclusion(rows).sum(), (d.n - 7) * d.inclusion(s), rtol=0, atol=1e-12
        )
