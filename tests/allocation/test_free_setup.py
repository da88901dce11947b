"""The compiled set-up of problems without a size
(:func:`pairht.allocation._free_setup.free_setup`) against the numpy expressions it
replaces in the solver: the closed-form classification and the scaled rows bit for bit,
the cold start to ``1e-15`` relative (its sum runs left to right, numpy's pairwise)."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation._free_setup import (
    DEGENERATE,
    FLOOR,
    FULL,
    INTERIOR,
    free_setup,
)
from pairht.allocation.sizes import EDGE_RTOL


def _numpy_setup(c, bud, lo, isolated, room):
    """The solver's former numpy set-up, written out."""
    full = c.sum(axis=1)
    code = np.full(len(c), INTERIOR)
    code[isolated.all(axis=1)] = DEGENERATE
    code[bud <= lo * full * (1 + EDGE_RTOL)] = FLOOR
    code[bud >= full] = FULL
    row = c / bud[:, None]
    s = row.sum(axis=1)
    lower, upper = lo * s, np.minimum(1.0, s)
    theta = room * (upper - lower) / np.maximum(s - lower, 1e-300)
    y0 = lo + theta[:, None] * (1.0 - lo) * np.ones((1, c.shape[1]))
    y0[isolated] = lo
    return code, row, y0


@pytest.mark.parametrize("G", [2, 7, 16, 40])
def test_free_setup_matches_the_numpy_setup(G):
    """Budgets at and around the full cost and the floor's cost, isolated vertices, groups
    without edges: every code occurs, and interior problems get the same row and start."""
    rng = np.random.default_rng(G)
    m, lo = 400, 0.08
    c = 400.0 * np.exp(rng.normal(0.0, 0.5, (m, G)))
    full = c.sum(axis=1)
    bud = full * rng.uniform(lo, 1.2, m)
    bud[:20] = full[:20]
    bud[20:40] = lo * full[20:40]
    bud[40:50] = lo * full[40:50] * (1 + 0.5 * EDGE_RTOL)
    isolated = rng.random((m, G)) < 0.2
    isolated[50:60] = True
    code = np.empty(m, dtype=np.int8)
    row, scale, fixed = np.zeros((m, G)), np.zeros(m), np.zeros((m, G), dtype=bool)
    y0 = np.full((m, G), np.nan)
    free_setup(c, bud, full, lo, isolated, EDGE_RTOL, 0.95, code, row, scale, fixed, y0)
    ref_code, ref_row, ref_y0 = _numpy_setup(c, bud, lo, isolated, 0.95)
    np.testing.assert_array_equal(code, ref_code)
    assert {FULL, FLOOR, DEGENERATE, INTERIOR} <= set(code.tolist())
    inner = code == INTERIOR
    np.testing.assert_array_equal(row[inner], ref_row[inner])
    np.testing.assert_array_equal(scale[inner], bud[inner])
    np.testing.assert_array_equal(fixed[inner], isolated[inner])
    assert np.all(np.abs(y0[inner] - ref_y0[inner]) <= 1e-15 * ref_y0[inner])
    assert np.isnan(y0[~inner]).all() and (row[~inner] == 0).all()
