"""DPPO: its pruning design and rescaled estimators are exactly unbiased, by enumeration of
every prune pattern."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pairht.comparators import (
    dppo_design,
    dppo_gradient,
    dppo_keep_probabilities,
    dppo_sample,
)
from pairht.estimators import pair_gradient, pair_ht_gradient


def _patterns(q, o):
    """Every (kept mask, probability) of the two-stage Poisson pruning."""
    B, G = o.shape
    out = []
    for pk in itertools.product((False, True), repeat=B):
        pk = np.array(pk)
        pp = float(np.prod(np.where(pk, q, 1 - q)))
        for ck in itertools.product((False, True), repeat=B * G):
            ck = np.array(ck).reshape(B, G)
            pc = float(np.prod(np.where(ck, o, 1 - o)))
            if pp * pc > 0:
                out.append((pk[:, None] & ck, pp * pc))
    return out


def _problem(seed):
    rng = np.random.default_rng(seed)
    B, G, d = 2, 3, 2
    r = rng.integers(0, 2, size=(B, G)).astype(float)
    A = r - r.mean(axis=1, keepdims=True)
    S = rng.normal(size=(B, G, d))
    return r, A, S


def test_keep_probabilities_worked_example():
    A = np.array([[1.0, -1.0, 0.0], [0.0, 0.0, 0.0], [0.5, -0.25, -0.25]])
    q, o = dppo_keep_probabilities(A, prompt_rate=0.4, completion_rate=0.3)
    # mean |A| per prompt: 2/3, 0, 1/3 -> median 1/3 -> prompts 1 and 2 eligible
    assert q.tolist() == [1.0, 0.6, 0.6]
    # |A| <= group median: row 0 median 1 -> all; row 2 median 0.25 -> the two 0.25s
    assert o.tolist() == [[0.7, 0.7, 0.7], [0.7, 0.7, 0.7], [1.0, 0.7, 0.7]]


@pytest.mark.parametrize("seed", range(6))
def test_rescaled_gradient_is_unbiased_for_the_full_batch_gradient(seed):
    _, A, S = _problem(seed)
    q, o = dppo_keep_probabilities(A, prompt_rate=0.6, completion_rate=0.5)
    pi, _ = dppo_design(q, o)
    mean = sum(p * dppo_gradient(A, S, K, pi) for K, p in _patterns(q, o))
    full = np.einsum("bg,bgd->d", A, S)
    np.testing.assert_allclose(mean, full, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_design_moments_equal_enumeration_and_pair_ht_is_unbiased(seed):
    r, A, S = _problem(seed)
    q, o = dppo_keep_probabilities(A, prompt_rate=0.3, completion_rate=0.7)
    pi, joint = dppo_design(q, o)
    pats = _patterns(q, o)
    emp_pi = sum(p * K for K, p in pats)
    emp_joint = sum(p * (K[:, :, None] & K[:, None, :]) for K, p in pats)
    np.testing.assert_allclose(emp_pi, pi, rtol=0, atol=1e-13)
    np.testing.assert_allclose(emp_joint, joint, rtol=0, atol=1e-13)
    est = sum(p * pair_ht_gradient(r, S, K, joint) for K, p in pats)
    np.testing.assert_allclose(est, pair_gradient(r, S), rtol=0, atol=1e-12)


def test_sampling_frequencies_match_the_keep_probabilities():
    q, o = np.array([0.5, 1.0]), np.array([[0.5, 1.0], [0.2, 0.9]])
    pi, _ = dppo_design(q, o)
    gen = np.random.default_rng(3)
    draws = np.mean([dppo_sample(q, o, gen) for _ in range(20000)], axis=0)
    # 20000 draws: standard error <= 0.0036, 5 sigma
    assert np.max(np.abs(draws - pi)) < 0.018


def test_a_pruning_rate_of_one_is_refused():
    with pytest.raises(ValueError, match="prompt_rate must be a pruning rate in \\[0, 1\\)"):
        dppo_keep_probabilities(np.zeros((2, 2)), prompt_rate=1.0)
