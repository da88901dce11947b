"""The compiled isolated-vertex scan (:func:`pairht.allocation._pair_tables.isolated_fill`)
against the numpy test it replaces in the solver, ``(a @ 1) == 0`` (boolean, so equal)."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation._pair_tables import isolated_fill
from pairht.allocation.proxies import disagreement


@pytest.mark.parametrize("G", [2, 5, 16])
def test_isolated_fill_equals_zero_row_sums(G):
    """Random nonnegative tables with rows zeroed (whole rows, rows whose only nonzero entry is
    the last, subnormal entries), and disagreement tables of all-0/all-1 groups (every vertex
    isolated)."""
    rng = np.random.default_rng(G)
    a = rng.exponential(1.0, (200, G, G)) * (rng.random((200, G, G)) < 0.3)
    a[:, np.arange(G), np.arange(G)] = 0.0
    a[rng.random((200, G)) < 0.3] = 0.0
    a[::7, 0, :] = 0.0
    a[::7, 0, -1] = 5e-324  # subnormal: not zero
    a[1::7, 1, :] = 0.0
    a[1::7, 1, 0] = 1.0
    a = np.concatenate([a, disagreement(np.zeros((3, G))), disagreement(np.ones((2, G)))])
    out = np.empty(a.shape[:2], dtype=bool)
    isolated_fill(a, out)
    expected = (a @ np.ones(G)) == 0.0
    np.testing.assert_array_equal(out, expected)
    assert expected.any() and (~expected).any() and expected[-5:].all()
