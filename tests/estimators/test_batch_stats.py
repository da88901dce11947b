"""HT batch mean and variance: design-unbiased, checked by enumerating every joint sample."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.designs import Bernoulli, ConditionalPoisson
from pairht.estimators.batch_stats import hajek_mean, ht_mean, ht_variance


def _groups(seed: int, g: int):
    """Two groups of ``g >= 4``: a fixed-size CPS design (size g - 1, every rho_ij > 0) with a
    certain (pi = 1) candidate, as a finished prefix is, and a Bernoulli design."""
    rng = np.random.default_rng(seed)
    pi_cps = np.r_[1.0, np.full(g - 1, (g - 2) / (g - 1))]
    pi_ber = rng.uniform(0.2, 0.9, g)
    return [ConditionalPoisson(pi_cps), Bernoulli(pi_ber)]


def _expectation(designs, y, stat):
    """E over the product of the groups' supports of stat(mask, pi, joint)."""
    pi = np.stack([d.pi for d in designs])
    joint = np.stack([d.joint() for d in designs])
    supports = [d.support() for d in designs]
    total = 0.0
    for rows in itertools.product(*(range(len(p)) for _, p in supports)):
        mask = np.stack([m[r] for (m, _), r in zip(supports, rows)])
        prob = np.prod([p[r] for (_, p), r in zip(supports, rows)])
        total += prob * stat(y, mask, pi, joint)
    return total


@pytest.mark.parametrize("g", [4, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_ht_mean_is_design_unbiased_for_the_batch_mean(g, seed):
    designs = _groups(seed, g)
    y = np.random.default_rng(seed + 10).normal(size=(2, g))
    got = _expectation(designs, y, lambda y, m, p, j: ht_mean(y, m, p))
    assert got == pytest.approx(y.mean(), abs=1e-12)


@pytest.mark.parametrize("g", [4, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_ht_variance_is_design_unbiased_for_the_bessel_variance(g, seed):
    designs = _groups(seed, g)
    y = np.random.default_rng(seed + 20).normal(size=(2, g))
    got = _expectation(designs, y, lambda y, m, p, j: ht_variance(y, m, p, j))
    assert got == pytest.approx(np.var(y, ddof=1), abs=1e-12)


def _pairwise_variance(y, mask, pi, joint):
    """The pair form over an explicit (N, N) rho: rho within a group, pi_i pi_j across."""
    b, g = y.shape
    n = b * g
    rho = np.outer(pi.ravel(), pi.ravel())
    for k in range(b):
        rho[k * g:(k + 1) * g, k * g:(k + 1) * g] = joint[k]
    yf, mf = y.ravel(), mask.ravel()
    total = sum((yf[i] - yf[j]) ** 2 / rho[i, j]
                for i in range(n) for j in range(i + 1, n) if mf[i] and mf[j])
    return total / (n * (n - 1))


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4), st.integers(2, 5), st.integers(0, 2**32 - 1))
def test_ht_variance_group_sums_equal_the_explicit_pair_sum(b, g, seed):
    rng = np.random.default_rng(seed)
    pi = rng.uniform(0.1, 1.0, (b, g))
    joint = np.stack([Bernoulli(p).joint() for p in pi])
    mask = rng.random((b, g)) < pi
    y = rng.integers(0, 3, (b, g)).astype(float)  # ties included
    assert ht_variance(y, mask, pi, joint) == pytest.approx(
        _pairwise_variance(y, mask, pi, joint), rel=1e-12, abs=1e-15)


def test_with_every_candidate_completed_the_estimates_are_the_batch_statistics():
    y = np.arange(12.0).reshape(3, 4) ** 1.5
    ones = np.ones((3, 4))
    full = np.ones((3, 4), bool)
    assert ht_mean(y, full, ones) == pytest.approx(y.mean(), rel=1e-15)
    assert ht_variance(y, full, ones, np.ones((3, 4, 4))) == pytest.approx(
        np.var(y, ddof=1), rel=1e-13)
    assert hajek_mean(y, full, ones) == pytest.approx(y.mean(), rel=1e-15)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="mask must be a bool array"):
        ht_mean([[1.0, 2.0]], [[1, 0]], [[0.5, 0.5]])
    with pytest.raises(ValueError, match="pi must be positive wherever mask"):
        ht_mean([[1.0, 2.0]], [[True, False]], [[0.0, 0.5]])
    with pytest.raises(ValueError, match=r"joint must have shape \(B, G, G\)"):
        ht_variance([[1.0, 2.0]], [[True, True]], [[1.0, 1.0]], np.ones((2, 2)))
    with pytest.raises(ValueError, match="joint must be positive for every pair"):
        ht_variance([[1.0, 2.0]], [[True, True]], [[1.0, 1.0]], np.zeros((1, 2, 2)))
