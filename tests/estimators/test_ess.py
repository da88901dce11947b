"""Kish effective sample size of the edge weights."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.estimators import edge_weights, ess

from ._support import independent_joint


def test_equal_weights_give_the_number_of_observed_edges():
    pi = np.full(5, 0.5)
    w = edge_weights([True, True, True, False, True], independent_joint(pi))
    assert ess(w) == pytest.approx(6.0, rel=1e-15)  # C(4, 2) observed edges


def test_ess_by_hand_for_vector_and_matrix():
    assert ess([1.0, 3.0, 0.0]) == pytest.approx(16.0 / 10.0, rel=1e-15)
    w = np.array([[0.0, 1.0, 3.0], [1.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    assert ess(w) == pytest.approx(1.6, rel=1e-15)


def test_ess_is_scale_free_and_batched():
    rng = np.random.default_rng(0)
    pi = rng.uniform(0.2, 1, (4, 6))
    masks = rng.random((4, 6)) < 0.8
    joint = independent_joint(pi)
    w = edge_weights(masks, joint)
    out = ess(w)
    assert out.shape == (4,)
    for b in range(4):
        iu = np.triu_indices(6, 1)
        inv = np.where(masks[b][:, None] & masks[b][None, :], 1 / joint[b], 0.0)[iu]
        expected = inv.sum() ** 2 / (inv**2).sum() if inv.any() else 0.0
        assert out[b] == pytest.approx(expected, rel=1e-13)


def test_no_observed_edge_gives_zero():
    assert ess(np.zeros(3)) == 0.0
    assert ess(np.zeros((4, 4))) == 0.0


def test_ess_rejects_bad_weights():
    with pytest.raises(ValueError, match=r"weights must be non-negative.*weights\[1\] = -1.0"):
        ess([1.0, -1.0])
    with pytest.raises(ValueError, match="weights must be finite"):
        ess([1.0, np.nan])
    with pytest.raises(ValueError, match="must be symmetric"):
        ess(np.triu(np.ones((3, 3))))
    with pytest.raises(ValueError, match=r"\(\.\.\., G, G\)"):
        ess(np.ones((2, 3)))
    with pytest.raises(ValueError, match="scalar"):
        ess(1.0)
