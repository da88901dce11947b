"""The published hypothesis strategies produce what they promise, awkward cases included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from pairht.testing.strategies import (
    fixed_size_inclusion_probabilities,
    inclusion_probabilities,
)


@given(st.data(), st.integers(1, 6), st.integers(0, 6), st.booleans(), st.booleans())
def test_inclusion_probabilities_respect_arguments(data, lo, extra, zero, one):
    pi = data.draw(inclusion_probabilities(lo, lo + extra, allow_zero=zero, allow_one=one))
    assert pi.dtype == np.float64 and pi.ndim == 1 and lo <= pi.size <= lo + extra
    assert np.all((pi >= 0) & (pi <= 1))
    assert zero or not np.any(pi == 0)
    assert one or not np.any(pi == 1)


@given(st.data(), st.integers(2, 6), st.integers(0, 6), st.booleans(), st.booleans())
def test_fixed_size_sums_are_integers(data, lo, extra, zero, one):
    strat = (
        fixed_size_inclusion_probabilities(lo, lo + extra, allow_zero=zero, allow_one=one)
        if data.draw(st.booleans())
        else inclusion_probabilities(lo, lo + extra, True, zero, one)
    )
    pi = data.draw(strat)
    assert lo <= pi.size <= lo + extra and np.all((pi >= 0) & (pi <= 1))
    total = float(pi.sum())
    assert abs(total - round(total)) <= 1e-12 and round(total) >= 1
    assert np.any((pi > 0) & (pi < 1))
    assert zero or not np.any(pi == 0)
    assert one or not np.any(pi == 1)


@pytest.mark.parametrize("fixed", [False, True])
def test_awkward_cases_are_reachable(fixed):
    strat = inclusion_probabilities(integer_sum=fixed)
    opts = settings(max_examples=500, database=None)
    find(strat, lambda p: p.size == 2, settings=opts)
    find(strat, lambda p: np.any(p == 0) and np.any(p == 1), settings=opts)
    find(
        strat,
        lambda p: np.any((p > 0) & (p <= 1e-6)) and np.any((p < 1) & (p >= 1 - 1e-6)),
        settings=opts,
    )

    def has_tie(p):
        free = p[(p > 0) & (p < 1)]
        return np.unique(free).size < free.size

    find(strat, has_tie, settings=opts)


def test_bad_sizes():
    with pytest.raises(ValueError, match="min_size must be an int >= 1"):
        inclusion_probabilities(min_size=0)
    with pytest.raises(ValueError, match="max_size must be >= min_size"):
        inclusion_probabilities(min_size=4, max_size=3)
    with pytest.raises(ValueError, match="min_size must be >= 2"):
        fixed_size_inclusion_probabilities(min_size=1)
