"""Sampling draws from the design whose probabilities the design reports."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pairht.designs import make_design

#: Independent draws per check; a 5-sigma binomial band then fails by chance ~1e-6 per entry.
DRAWS = 40_000

CASES = {
    "bernoulli": ([0.1, 0.5, 0.9, 1.0, 0.0, 0.3], {}),
    "conditional_poisson": ([0.1, 0.5, 0.9, 1.0, 0.0, 0.5], {}),
    "dependent_rounding": ([0.1, 0.5, 0.9, 0.3, 0.7, 0.5], {"order": [3, 0, 5, 1, 4, 2]}),
    "randomized_dependent_rounding": (
        [0.1, 0.5, 0.9, 0.25, 0.75, 0.5],
        {"n_orders": 3, "rng": 5},
    ),
    # strata {0.5 x2}, {0.25 x3}, {1.0}, {0.9 x2}: sizes mixed in two of them
    "stratified": ([0.5, 0.25, 0.25, 1.0, 0.5, 0.25, 0.9, 0.9], {}),
}


def _within_five_sigma(freq: np.ndarray, p: np.ndarray, draws: int) -> None:
    """|freq - p| <= 5 sqrt(p (1 - p) / R), plus one count for p at exactly 0 or 1."""
    band = 5.0 * np.sqrt(p * (1.0 - p) / draws) + 1.0 / draws
    assert np.all(np.abs(freq - p) <= band), np.max(np.abs(freq - p) / band)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_empirical_frequencies_match_exact_probabilities(kind):
    pi, kwargs = CASES[kind]
    d = make_design(kind, pi, **kwargs)
    masks = d.sample(rng=np.random.default_rng(2024), size=DRAWS)
    assert masks.shape == (DRAWS, d.n_units) and masks.dtype == bool
    m = masks.astype(np.float64)
    _within_five_sigma(m.mean(axis=0), d.pi, DRAWS)
    _within_five_sigma(m.T @ m / DRAWS, d.joint(), DRAWS)
    triples = np.array(list(itertools.combinations(range(d.n_units), 3)))
    freq3 = np.all(masks[:, triples], axis=2).mean(axis=0)
    _within_five_sigma(freq3, d.inclusion(triples), DRAWS)
    if d.fixed_size:
        assert np.all(masks.sum(axis=1) == d.n)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_sampling_is_reproducible_and_shapes(kind):
    pi, kwargs = CASES[kind]
    d = make_design(kind, pi, **kwargs)
    np.testing.assert_array_equal(d.sample(rng=7, size=5), d.sample(rng=7, size=5))
    assert d.sample(rng=1).shape == (len(pi),)
    assert d.sample(rng=1, size=0).shape == (0, len(pi))


def test_cps_sample_size_is_exact_at_n_200():
    rng = np.random.default_rng(0)
    pi = rng.uniform(0.01, 0.99, 200)
    pi += (np.ceil(pi.sum()) - pi.sum()) / 200
    d = make_design("conditional_poisson", pi)
    assert np.all(d.sample(rng=1, size=500).sum(axis=1) == d.n)


def test_dependent_rounding_random_size_is_floor_or_ceil():
    d = make_design("dependent_rounding", [0.5, 0.5, 0.5, 0.2])
    assert not d.fixed_size and d.n is None
    sizes = d.sample(rng=3, size=DRAWS).sum(axis=1)
    assert set(np.unique(sizes)) == {1, 2}
    _within_five_sigma(np.mean(sizes == 2), np.float64(0.7), DRAWS)
