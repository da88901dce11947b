"""pairht.calibration: Brier, equal-mass ECE, temperature scaling and the IPW head losses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pairht.calibration import (
    T_MAX,
    T_MIN,
    brier,
    cost_mape,
    ece,
    fit_temperature,
    ipw_brier_loss,
    ipw_log_cost_loss,
)

unit = st.floats(0.0, 1.0, allow_nan=False)


def _unit_arrays(n):
    return arrays(np.float64, n, elements=unit)


# ----------------------------------------------------------------------------- Brier


def test_brier_hand_computed():
    p = np.array([0.9, 0.2, 0.5, 1.0])
    y = np.array([1.0, 0.0, 1.0, 0.0])
    # (0.01 + 0.04 + 0.25 + 1) / 4
    assert brier(p, y) == pytest.approx(1.30 / 4, abs=1e-15)
    # weights 1, 2, 0, 1: (0.01 + 0.08 + 0 + 1) / 4
    assert brier(p, y, weights=[1, 2, 0, 1]) == pytest.approx(1.09 / 4, abs=1e-15)


@given(st.integers(1, 12).flatmap(lambda n: st.tuples(_unit_arrays(n), _unit_arrays(n))))
def test_brier_integer_weights_equal_repetition(py):
    p, y = py
    reps = np.arange(len(p)) % 3 + 1
    assert brier(p, y, weights=reps) == pytest.approx(
        brier(np.repeat(p, reps), np.repeat(y, reps)), abs=1e-12
    )


# ----------------------------------------------------------------------------- ECE


def test_ece_hand_computed_equal_mass_bins():
    # Sorted p: 0.05 0.1 0.3 | 0.4 0.6 0.7 | 0.8 0.9 0.95 (three bins of three)
    p = np.array([0.9, 0.05, 0.4, 0.3, 0.8, 0.1, 0.7, 0.95, 0.6])
    y = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    # bin means (p, y): (0.15, 0) (17/30, 2/3) (0.8833.., 1)
    expected = (0.15 + abs(1.7 / 3 - 2 / 3) + abs(2.65 / 3 - 1)) / 3
    assert ece(p, y, n_bins=3) == pytest.approx(expected, abs=1e-14)


@given(
    st.integers(1, 6).flatmap(
        lambda b: st.integers(1, 5).flatmap(
            lambda m: st.tuples(
                st.just(b),
                arrays(np.float64, b * m, elements=unit, unique=True),
                _unit_arrays(b * m),
                arrays(np.float64, b * m, elements=st.floats(0.1, 5.0)),
            )
        )
    )
)
def test_ece_equals_rank_binning_reference(args):
    # Reference: with n = b * m distinct predictions, the item of rank k lies in bin k // m.
    b, p, y, w = args
    m = len(p) // b
    rank = np.argsort(np.argsort(p))
    ref = 0.0
    for j in range(b):
        sel = rank // m == j
        ref += abs(np.dot(w[sel], p[sel] - y[sel])) / w.sum()
    assert ece(p, y, n_bins=b, weights=w) == pytest.approx(ref, abs=1e-12)


@given(st.integers(1, 15).flatmap(lambda n: st.tuples(_unit_arrays(n), _unit_arrays(n))))
def test_ece_limits_one_bin_and_one_item_per_bin(py):
    p, y = py
    assert ece(p, y, n_bins=1) == pytest.approx(abs(p.mean() - y.mean()), abs=1e-12)
    # n_bins >= n: every item alone (empty bins skipped) -> mean |p - y|
    assert ece(p, y, n_bins=len(p) + 3) == pytest.approx(np.abs(p - y).mean(), abs=1e-12)


def test_ece_zero_for_calibrated_bins():
    p = np.repeat([0.2, 0.5, 0.8], 10)
    y = np.concatenate(
        [np.repeat([1.0, 0.0], [2, 8]), np.repeat([1.0, 0.0], 5), np.repeat([1.0, 0.0], [8, 2])]
    )
    assert ece(p, y, n_bins=3) == pytest.approx(0.0, abs=1e-15)
    assert ece(p, y, n_bins=15) > 0.0  # finer bins split each group


# ----------------------------------------------------------------------------- temperature


def _nll(t, z, y, w=None):
    w = np.ones_like(z) if w is None else w
    s = z / t
    return np.dot(w, np.logaddexp(0, s) - y * s) / w.sum()


@given(st.floats(0.5, 6.0), st.integers(1, 9), st.integers(1, 4))
def test_temperature_closed_form(a, k, reps):
    # Logits +-a, right k times in 10: the optimum puts sigmoid(a / T) = k / 10 exactly when
    # k > 5; for k <= 5 the best sign-preserving fit needs T -> inf or beta -> 0 (bound T_MAX).
    z = np.tile(np.r_[np.full(10, a), np.full(10, -a)], reps)
    y = np.tile(np.r_[np.arange(10) < k, np.arange(10) >= k].astype(float), reps)
    t = fit_temperature(z, y)
    if k > 5:
        t_star = a / math.log(k / (10 - k))
        t_star = min(max(t_star, T_MIN), T_MAX)
        assert t == pytest.approx(t_star, rel=1e-6)
    else:
        assert t == pytest.approx(T_MAX, rel=1e-6)


def test_temperature_beats_grid_and_reduces_nll():
    rng = np.random.default_rng(3)
    z_true = rng.normal(0, 1.5, size=400)
    y = (rng.random(400) < 1 / (1 + np.exp(-z_true))).astype(float)
    z = 4.0 * z_true  # overconfident by a factor 4
    w = rng.uniform(0.5, 3.0, size=400)
    t = fit_temperature(z, y, weights=w)
    grid = np.exp(np.linspace(np.log(T_MIN), np.log(T_MAX), 4001))
    best = min(_nll(g, z, y, w) for g in grid)
    assert _nll(t, z, y, w) <= best + 1e-12
    assert _nll(t, z, y, w) < _nll(1.0, z, y, w) - 0.05
    assert 2.5 < t < 6.5


def test_temperature_integer_weights_equal_repetition():
    rng = np.random.default_rng(4)
    z, y = rng.normal(0, 3, 50), (rng.random(50) < 0.5).astype(float)
    reps = rng.integers(1, 4, 50)
    assert fit_temperature(z, y, weights=reps) == pytest.approx(
        fit_temperature(np.repeat(z, reps), np.repeat(y, reps)), rel=1e-7
    )


def test_temperature_separable_hits_lower_bound_and_zero_logits_give_one():
    assert fit_temperature([2.0, -1.0, 3.0], [1.0, 0.0, 1.0]) == pytest.approx(T_MIN, rel=1e-6)
    assert fit_temperature([0.0, 0.0], [1.0, 0.0]) == 1.0


# ----------------------------------------------------------------------------- IPW losses


def test_ipw_losses_hand_computed():
    p = np.array([0.5, 0.9, 0.2, 0.7])
    y = np.array([1.0, np.nan, 0.0, 1.0])
    pi = np.array([0.5, 0.3, 0.25, 1.0])
    mask = np.array([True, False, True, True])
    # (0.25 / 0.5 + 0.04 / 0.25 + 0.09 / 1) = 0.75
    assert ipw_brier_loss(p, y, pi, mask, reduction="sum") == pytest.approx(0.75, abs=1e-15)
    assert ipw_brier_loss(p, y, pi, mask) == pytest.approx(0.75 / 4, abs=1e-15)
    c_hat = np.array([100.0, 10.0, 20.0, 40.0])
    c = np.array([100.0 * math.e, 0.0, 20.0 / math.e**2, 40.0])
    # (1 / 0.5 + 4 / 0.25 + 0) = 18
    assert ipw_log_cost_loss(c_hat, c, pi, mask, reduction="sum") == pytest.approx(18.0, rel=1e-14)
    assert ipw_log_cost_loss(c_hat, c, pi, mask) == pytest.approx(4.5, rel=1e-14)


@given(
    st.integers(2, 5).flatmap(
        lambda g: st.tuples(
            _unit_arrays(g),
            _unit_arrays(g),
            arrays(np.float64, g, elements=st.floats(0.05, 1.0)),
            arrays(np.float64, g, elements=st.floats(1.0, 500.0)),
            arrays(np.float64, g, elements=st.floats(1.0, 500.0)),
        )
    )
)
def test_ipw_losses_are_design_unbiased_by_enumeration(args):
    # Bernoulli (Poisson) design: enumerate all 2^G masks with their probabilities.
    p, y, pi, c_hat, c = args
    g = len(p)
    e_brier = e_cost = 0.0
    for bits in itertools.product([False, True], repeat=g):
        m = np.array(bits)
        prob = np.prod(np.where(m, pi, 1 - pi))
        e_brier += prob * ipw_brier_loss(p, y, pi, m)
        e_cost += prob * ipw_log_cost_loss(c_hat, c, pi, m)
    assert e_brier == pytest.approx(np.mean((p - y) ** 2), abs=1e-12)
    assert e_cost == pytest.approx(np.mean(np.log(c_hat / c) ** 2), rel=1e-10, abs=1e-12)


def test_cost_mape_hand_computed():
    assert cost_mape([110.0, 40.0, 300.0], [100.0, 50.0, 300.0]) == pytest.approx(0.1, abs=1e-15)
    assert cost_mape([110.0, 40.0], [100.0, 50.0], weights=[3, 1]) == pytest.approx(
        (0.3 + 0.2) / 4, abs=1e-15
    )


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: brier([0.5, np.nan], [1.0, 0.0]), r"p must be finite.*p\[1\] = .*nan"),
        (lambda: brier([0.5, 1.2], [1.0, 0.0]), r"p must lie in \[0, 1\].*p\[1\] = 1.2"),
        (lambda: brier([0.5, 0.2], [1.0, 0.0, 1.0]), r"y must have shape \(2,\)"),
        (lambda: brier([0.5], [2.0]), r"y must lie in \[0, 1\]"),
        (lambda: brier([0.5], [1.0], weights=[-1.0]), r"weights must be >= 0"),
        (lambda: brier([0.5], [1.0], weights=[0.0]), r"weights must have a positive sum"),
        (lambda: brier([], []), r"at least one prediction"),
        (lambda: ece([0.5], [1.0], n_bins=0), r"n_bins must be a positive integer"),
        (lambda: ece([[0.5]], [[1.0]]), r"p must be a 1-d array"),
        (lambda: fit_temperature([1.0, np.inf], [1.0, 0.0]), r"logits must be finite"),
        (lambda: fit_temperature([1.0], [1.0, 0.0]), r"y must have shape \(1,\)"),
        (lambda: ipw_brier_loss([0.5], [1.0], [0.0], [True]), r"pi must be > 0.*pi\[0\] = 0.0"),
        (lambda: ipw_brier_loss([0.5], [1.0], [1.5], [True]), r"pi must lie in \[0, 1\]"),
        (lambda: ipw_brier_loss([0.5], [1.0], [0.5], [1]), r"mask must be a bool array"),
        (lambda: ipw_brier_loss([0.5], [np.nan], [0.5], [True]), r"y must be finite"),
        (lambda: ipw_brier_loss([0.5], [1.0], [0.5], [True], reduction="max"), "reduction"),
        (lambda: ipw_log_cost_loss([0.0], [1.0], [0.5], [True]), r"c_hat must be > 0"),
        (lambda: ipw_log_cost_loss([1.0], [0.0], [0.5], [True]), r"c must be > 0.*c\[0\] = 0.0"),
        (lambda: ipw_log_cost_loss([1.0], [-3.0], [0.5], [True]), r"c must be > 0"),
        (lambda: ipw_log_cost_loss([1.0, 2.0], [1.0], [0.5, 0.5], [True, True]), r"c must have"),
        (lambda: cost_mape([1.0], [0.0]), r"c must be > 0"),
        (lambda: cost_mape([-1.0], [1.0]), r"c_hat must be >= 0"),
        (lambda: cost_mape([np.nan], [1.0]), r"c_hat must be finite"),
    ],
)
def test_bad_input_raises_value_error_naming_the_rule(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_unobserved_labels_may_be_nan():
    # Costs and rewards of unselected candidates do not exist; NaN there must be accepted.
    assert ipw_log_cost_loss([5.0, 5.0], [5.0, np.nan], [0.5, 0.0], [True, False]) == 0.0
    assert ipw_brier_loss([1.0, 0.3], [1.0, np.nan], [0.5, 0.0], [True, False]) == 0.0
