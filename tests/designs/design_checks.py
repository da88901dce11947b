"""Reference computations the design tests compare against (enumeration, brute force)."""

from __future__ import annotations

import itertools

import numpy as np


def all_sets(n_units: int, k: int) -> np.ndarray:
    """Every k-subset of range(n_units) as an (m, k) int array (ascending rows)."""
    combos = list(itertools.combinations(range(n_units), k))
    return np.asarray(combos, dtype=np.int64).reshape(len(combos), k)


def inclusion_from_support(masks: np.ndarray, probs: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """P(all units of each row of ``sets`` included), summed over an enumerated support."""
    hit = np.all(masks[:, sets], axis=2)  # (K, m)
    return probs @ hit


def joint_from_support(masks: np.ndarray, probs: np.ndarray) -> np.ndarray:
    m = masks.astype(np.float64)
    return (m * probs[:, None]).T @ m


def assert_exact_against_support(design, max_order: int = 4, atol: float = 1e-12) -> None:
    """``.pi``, ``.joint()`` and ``.inclusion`` of orders 1..max_order equal support sums."""
    masks, probs = design.support()
    assert np.all(probs > 0)
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=0, atol=atol)
    N = design.n_units
    np.testing.assert_allclose(design.pi, probs @ masks, rtol=0, atol=atol)
    np.testing.assert_allclose(design.joint(), joint_from_support(masks, probs), rtol=0, atol=atol)
    for k in range(1, min(max_order, N) + 1):
        sets = all_sets(N, k)
        got = design.inclusion(sets)
        np.testing.assert_allclose(
            got, inclusion_from_support(masks, probs, sets), rtol=0, atol=atol
        )
        # a single set returns a float with the same value
        assert design.inclusion(sets[0]) == got[0]
        # unsorted input rows give the same answer (a set has no order)
        np.testing.assert_array_equal(design.inclusion(sets[:, ::-1]), got)


def assert_fixed_size_identities(d, pairs) -> None:
    """For a fixed-size design (size ``n``): ``sum_{j != i} pi_ij = (n-1) pi_i`` and, for
    each pair ``(i, j)`` in ``pairs``, ``sum_{k not in {i,j}} pi_ijk = (n-2) pi_ij``."""
    J = d.joint()
    n, N = d.n, d.n_units
    np.testing.assert_allclose(J.sum(axis=1) - d.pi, (n - 1) * d.pi, rtol=0, atol=1e-12)
    for i, j in pairs:
        others = np.setdiff1d(np.arange(N), [i, j])
        rows = np.column_stack([np.full(others.size, i), np.full(others.size, j), others])
        np.testing.assert_allclose(d.inclusion(rows).sum(), (n - 2) * J[i, j], rtol=0, atol=1e-12)
