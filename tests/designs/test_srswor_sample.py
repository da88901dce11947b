"""The one SRSWOR draw (``pairht.designs.base.srswor_sample``): every ``n``-subset of the
eligible units equally likely, checked by enumerating the ``C(U, n)`` subsets and a
chi-square test of their frequencies at a fixed seed."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from pairht.designs.base import srswor_inclusion, srswor_sample
from pairht.step import draw_subsets

#: Draws per case: about 2,000 per subset for C(U, n) = 20, so a 6% excess on the subsets
#: holding one unit (the biased sampler below) gives a chi-square p-value far below 1e-6.
DRAWS = 40_000
#: The test rejects below this p-value; at a fixed seed the outcome is deterministic.
ALPHA = 1e-4


def _subset_frequencies(masks: np.ndarray, eligible: np.ndarray, n: int) -> np.ndarray:
    """Counts of each of the ``C(U, n)`` subsets of the eligible units, in ``combinations``
    order; every draw must be one of them."""
    units = np.flatnonzero(eligible)
    subsets = list(itertools.combinations(units.tolist(), n))
    code = {s: i for i, s in enumerate(subsets)}
    counts = np.zeros(len(subsets), dtype=np.int64)
    for row in masks:
        counts[code[tuple(np.flatnonzero(row).tolist())]] += 1
    return counts


def _chi_square_p(counts: np.ndarray) -> float:
    return float(stats.chisquare(counts, np.full(counts.size, counts.sum() / counts.size))
                 .pvalue)


CASES = [  # (eligible units of one row, n)
    ([1, 1, 1, 1, 1, 1], 3),                  # C(6, 3) = 20
    ([1, 0, 1, 1, 0, 1, 1], 2),               # C(5, 2) = 10, two units never eligible
    ([0, 1, 1, 1, 1, 1, 1, 1, 0], 6),         # C(7, 6) = 7
    ([1, 1, 1, 1], 1),                        # C(4, 1) = 4
]


@pytest.mark.parametrize(("eligible", "n"), CASES)
def test_every_subset_of_the_eligible_units_is_equally_likely(eligible, n):
    ok = np.array(eligible, dtype=bool)
    masks = srswor_sample(np.full(DRAWS, n), np.tile(ok, (DRAWS, 1)), rng=20261127)
    assert masks.shape == (DRAWS, ok.size) and masks.dtype == bool
    assert np.all(masks.sum(axis=1) == n) and not masks[:, ~ok].any()
    counts = _subset_frequencies(masks, ok, n)
    assert counts.size == math.comb(int(ok.sum()), n)
    assert _chi_square_p(counts) > ALPHA
    # and the inclusion frequencies against the one SRSWOR inclusion formula
    expected = srswor_inclusion(n, int(ok.sum()), 1)
    band = 5.0 * np.sqrt(expected * (1 - expected) / DRAWS)
    assert np.all(np.abs(masks[:, ok].mean(axis=0) - expected) <= band)


def test_the_chi_square_check_rejects_a_biased_sampler():
    # The same construction with unit 0's key shrunk by 10%: unit 0 is drawn more often.
    # The check above must reject it, or passing it proves nothing.
    rng = np.random.default_rng(20261127)
    ok = np.ones(6, dtype=bool)
    keys = rng.random((DRAWS, 6))
    keys[:, 0] *= 0.9
    rank = np.argsort(np.argsort(keys, axis=1), axis=1)
    counts = _subset_frequencies(rank < 3, ok, 3)
    assert _chi_square_p(counts) < 1e-6


def test_rows_draw_their_own_sizes_and_units():
    ok = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=bool)
    n = np.array([3, 0, 0, 4])
    mask = srswor_sample(n, ok, rng=1)
    np.testing.assert_array_equal(mask, ok & (n[:, None] == ok.sum(axis=1, keepdims=True)))
    np.testing.assert_array_equal(srswor_sample([2, 1], ok[:2], rng=5),
                                  srswor_sample([2, 1], ok[:2], rng=5))


def test_draw_subsets_keeps_its_random_stream():
    # draw_subsets drew the first w of a stable argsort of one uniform per candidate; the
    # shared sampler ranks the same keys, so the subsets (and every seeded run) are unchanged.
    old = np.sort(np.argsort(np.random.default_rng(3).random((50, 7)), axis=1,
                             kind="stable")[:, :4], axis=1)
    np.testing.assert_array_equal(draw_subsets(50, 7, 4, np.random.default_rng(3)), old)


@pytest.mark.parametrize(("n", "eligible", "exc", "match"), [
    ([3], [[1, 1, 0]], ValueError, r"n must satisfy 0 <= n_r <= U_r .* row 0 has n = 3, U = 2"),
    ([-1], [[1, 1, 0]], ValueError, r"n must satisfy 0 <= n_r <= U_r .* row 0 has n = -1"),
    ([1, 1], [[1, 1, 0]], ValueError, r"n must be an int array of shape \(m,\) = \(1,\)"),
    ([1.5], [[1, 1, 0]], ValueError, r"n must be an int array of shape \(m,\)"),
    ([1], [1, 1, 0], ValueError, r"eligible must have shape \(m, N\); got shape \(3,\)"),
    ([1], [[0.5, 1, 0]], TypeError, r"eligible must be a bool array \(the units each row may "
                                    r"draw\); got dtype float64"),
])
def test_bad_input_names_the_argument_and_the_rule(n, eligible, exc, match):
    with pytest.raises(exc, match=match):
        srswor_sample(n, eligible, rng=0)
