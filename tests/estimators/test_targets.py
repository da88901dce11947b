"""Theorem 1 (pairwise representation) and the target functions' contracts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pairht.estimators import (
    MAX_KERNEL_ENTRIES,
    group_mean_gradient,
    loo_gradient,
    pair_gradient,
    pair_kernel,
)

from ._support import dense_kernel, rewards_for, scores_for


@st.composite
def populations(draw, min_g=2, max_g=12):
    g = draw(st.integers(min_g, max_g))
    return draw(rewards_for(g)), draw(scores_for(g))


@given(populations())
def test_pair_average_equals_loo_gradient(pop):
    r, s = pop
    g = r.shape[0]
    m = g * (g - 1) // 2
    brute = dense_kernel(r, s)[np.triu_indices(g, 1)].sum(axis=0) / m
    scale = np.abs(dense_kernel(r, s)).sum() + 1.0
    np.testing.assert_allclose(pair_gradient(r, s), brute, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(loo_gradient(r, s), brute, rtol=0, atol=1e-12 * scale)


@given(populations())
def test_group_mean_is_shrunk_pair_target(pop):
    r, s = pop
    g = r.shape[0]
    np.testing.assert_allclose(
        group_mean_gradient(r, s), (g - 1) / g * loo_gradient(r, s), rtol=1e-12, atol=1e-14
    )


@given(populations(max_g=6))
def test_pair_kernel_matches_definition(pop):
    r, s = pop
    h = pair_kernel(r, s)
    np.testing.assert_array_equal(h, dense_kernel(r, s))
    np.testing.assert_array_equal(h, np.swapaxes(h, 0, 1))


def test_batched_targets_equal_rowwise():
    rng = np.random.default_rng(0)
    r = rng.random((3, 2, 5))
    s = rng.normal(size=(3, 2, 5, 4))
    for fn in (pair_gradient, loo_gradient, group_mean_gradient):
        out = fn(r, s)
        assert out.shape == (3, 2, 4)
        for idx in np.ndindex(3, 2):
            np.testing.assert_allclose(out[idx], fn(r[idx], s[idx]), rtol=1e-14, atol=1e-15)
    h = pair_kernel(r, s)
    assert h.shape == (3, 2, 5, 5, 4)
    np.testing.assert_array_equal(h[1, 0], pair_kernel(r[1, 0], s[1, 0]))


def test_scores_shared_across_a_batch_of_rewards():
    rng = np.random.default_rng(1)
    r, s = rng.random((4, 6)), rng.normal(size=(6, 3))
    np.testing.assert_allclose(pair_gradient(r, s)[2], pair_gradient(r[2], s), rtol=1e-14)


def test_pair_kernel_refuses_inputs_above_the_documented_size():
    g = 64
    d = MAX_KERNEL_ENTRIES // (g * g) + 1
    with pytest.raises(ValueError, match="MAX_KERNEL_ENTRIES"):
        pair_kernel(np.zeros(g), np.zeros((g, d)))


@pytest.mark.parametrize("fn", [pair_gradient, loo_gradient, group_mean_gradient, pair_kernel])
def test_targets_reject_bad_input(fn):
    s = np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"rewards must be finite.*rewards\[1\] = .*nan"):
        fn([0.0, np.nan, 1.0], s)
    with pytest.raises(ValueError, match=r"scores must be finite"):
        fn([0.0, 1.0, 1.0], np.array([[0.0, np.inf], [0, 0], [0, 0]]))
    with pytest.raises(ValueError, match=r"scores must have shape \(\.\.\., G, d\) with G = 3"):
        fn([0.0, 1.0, 1.0], np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"G >= 2"):
        fn([1.0], np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"batch axes"):
        fn(np.zeros((2, 3)), np.zeros((4, 3, 2)))
