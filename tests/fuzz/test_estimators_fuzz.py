"""Fuzz the estimators: bad arguments are refused by name; valid ones are design-unbiased.

Exact checks by enumerating the design's support (at most 2**6 samples):
``E[pair_ht_gradient] = pair_gradient`` and ``sum_s P(s) ||g_hat(s) - g||^2 =
design_covariance(...).trace``. Tolerance: every estimate is a sum of at most M = 15 terms
``h_e / (M rho_e)`` and the expectation a sum of at most 64 estimates, so the round-off is
below ``(15 + 64) * 2**-53 ~ 1e-14`` times the sum of absolute terms, whose expectation is
``T = sum_e ||h_e|| / M`` (``E[I_e / rho_e] = 1``), plus ``max|r| max|s|`` for the
reference ``pair_gradient`` (a sum of centred products); the designs' own ``rho`` are exact
to a few ulps times N. We allow 1e-11 * T for the mean and 1e-11 * T^2 / min(rho) for the
covariance (its terms are products of two estimates, each at most T / min(rho)).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pairht.designs import (
    Bernoulli,
    ConditionalPoisson,
    PositivityWarning,
    RandomizedDependentRounding,
)
from pairht.estimators import (
    conditional_bias,
    design_covariance,
    edge_weights,
    ess,
    expected_edge_weights,
    group_mean_gradient,
    loo_gradient,
    pair_advantages,
    pair_estimate,
    pair_gradient,
    pair_ht_gradient,
    pair_kernel,
    variance_estimate,
)
from pairht.testing.strategies import (
    fixed_size_inclusion_probabilities,
    inclusion_probabilities,
)

from ._fuzz import PROB_BAD, REAL_BAD, corrupt, fuzz_settings, raises_naming

pytestmark = pytest.mark.fuzz_long

G = 4
DESIGN = ConditionalPoisson([0.25, 0.75, 0.5, 0.5])
JOINT = DESIGN.joint()
R = np.array([1.0, 0.0, 0.5, 1.0])
S = np.array([[1.0, -2.0], [0.5, 0.0], [-1.0, 1.0], [2.0, 0.5]])
MASK = np.ones(G, dtype=bool)  # every candidate read, so every entry of r and s is checked

MASK_BAD = ("nan", "complex", "strings", "object", "none", "ragged", "two")
JOINT_BAD = (*PROB_BAD, "asymmetric", "above_marginal", "below_frechet")
RHO_HAT_BAD = tuple(k for k in JOINT_BAD if k != "none")  # rho_hat=None: the design's own


def _bad(kind: str, good: np.ndarray, data: st.DataObject):
    """``corrupt`` plus the kinds only masks and joints have."""
    if kind == "two":
        out = good.astype(np.int64)
        out[data.draw(st.integers(0, out.size - 1))] = 2
        return out
    if kind == "asymmetric":
        out = good.copy()
        out[0, 1] += 1e-3
        return out
    if kind == "above_marginal":  # rho_01 > min(pi_0, pi_1) = 0.25, diagonal untouched
        out = good.copy()
        out[0, 1] = out[1, 0] = 0.25 + data.draw(st.floats(1e-6, 0.5))
        return out
    if kind == "below_frechet":  # rho_12 < pi_1 + pi_2 - 1 = 0.25
        out = good.copy()
        out[1, 2] = out[2, 1] = 0.25 - data.draw(st.floats(1e-6, 0.25))
        return out
    if kind == "nan" and good.dtype == bool:
        out = good.astype(float)
        out[data.draw(st.integers(0, out.size - 1))] = np.nan
        return out
    return corrupt(kind, good.astype(float) if good.dtype == bool else good, data)


#: (case id, argument, bad kinds, call(value)) -- every other argument valid
CASES = [
    *[(f.__name__, "rewards", REAL_BAD, lambda v, f=f: f(v, S)) for f in
      (pair_kernel, pair_gradient, loo_gradient, group_mean_gradient)],
    *[(f.__name__, "scores", REAL_BAD, lambda v, f=f: f(R, v)) for f in
      (pair_kernel, pair_gradient, loo_gradient, group_mean_gradient)],
    ("pair_ht_gradient", "rewards", REAL_BAD, lambda v: pair_ht_gradient(v, S, MASK, JOINT)),
    ("pair_ht_gradient", "scores", REAL_BAD, lambda v: pair_ht_gradient(R, v, MASK, JOINT)),
    ("pair_ht_gradient", "mask", MASK_BAD, lambda v: pair_ht_gradient(R, S, v, JOINT)),
    ("pair_ht_gradient", "joint", JOINT_BAD, lambda v: pair_ht_gradient(R, S, MASK, v)),
    ("pair_estimate", "joint", JOINT_BAD, lambda v: pair_estimate(R, S, MASK, v)),
    ("pair_advantages", "rewards", REAL_BAD, lambda v: pair_advantages(v, MASK, JOINT)),
    ("pair_advantages", "mask", MASK_BAD, lambda v: pair_advantages(R, v, JOINT)),
    ("pair_advantages", "joint", JOINT_BAD, lambda v: pair_advantages(R, MASK, v)),
    ("pair_advantages", "pi", PROB_BAD,
     lambda v: pair_advantages(R, MASK, weighting="marginal_only", pi=v)),
    ("edge_weights", "mask", MASK_BAD, lambda v: edge_weights(v, JOINT)),
    ("edge_weights", "joint", JOINT_BAD, lambda v: edge_weights(MASK, v)),
    ("conditional_bias", "rewards", REAL_BAD,
     lambda v: conditional_bias(v, S, DESIGN, weighting="exact")),
    ("conditional_bias", "scores", REAL_BAD,
     lambda v: conditional_bias(R, v, DESIGN, weighting="exact")),
    ("conditional_bias", "rho_hat", RHO_HAT_BAD,
     lambda v: conditional_bias(R, S, DESIGN, weighting="exact", rho_hat=v)),
    ("expected_edge_weights", "rho_hat", RHO_HAT_BAD,
     lambda v: expected_edge_weights(DESIGN, weighting="exact", rho_hat=v)),
    ("design_covariance", "rewards", REAL_BAD, lambda v: design_covariance(v, S, DESIGN)),
    ("design_covariance", "scores", REAL_BAD, lambda v: design_covariance(R, v, DESIGN)),
    ("design_covariance", "gram", REAL_BAD,
     lambda v: design_covariance(R, None, DESIGN, gram=v)),
    ("variance_estimate", "rewards", REAL_BAD,
     lambda v: variance_estimate(v, S, MASK, DESIGN)),
    ("variance_estimate", "scores", REAL_BAD,
     lambda v: variance_estimate(R, v, MASK, DESIGN)),
    ("variance_estimate", "mask", MASK_BAD, lambda v: variance_estimate(R, S, v, DESIGN)),
    ("ess", "weights", (*REAL_BAD, "negative"), lambda v: ess(v)),
]
GOOD = {"rewards": R, "scores": S, "mask": MASK, "joint": JOINT, "rho_hat": JOINT,
        "pi": DESIGN.pi, "gram": S @ S.T, "weights": JOINT}


@pytest.mark.parametrize(("case", "arg", "kinds", "call"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
@fuzz_settings(12)
@given(data=st.data())
def test_bad_arrays_are_refused_by_name(case, arg, kinds, call, data):
    kind = data.draw(st.sampled_from(kinds), label="kind")
    value = _bad(kind, GOOD[arg], data)
    raises_naming(arg, lambda: call(value))


BAD_SCALARS = [None, "nope", 3, True, 1.5, np.nan]


@pytest.mark.parametrize("value", BAD_SCALARS, ids=repr)
def test_bad_options_are_refused_by_name(value):
    if value is not None:  # weighting=None is not a default anywhere, but w_max=None is
        raises_naming("weighting", lambda: pair_advantages(R, MASK, JOINT, weighting=value))
        raises_naming("weighting", lambda: edge_weights(MASK, JOINT, weighting=value))
        raises_naming("weighting", lambda: design_covariance(R, S, DESIGN, weighting=value))
        raises_naming("dtype", lambda: pair_advantages(R, MASK, JOINT, dtype=value))
    if value not in (1.5, 3):
        raises_naming("w_max", lambda: pair_advantages(R, MASK, JOINT, weighting="clipped",
                                                       w_max=value))
    if value not in (None, True):
        raises_naming("full", lambda: design_covariance(R, S, DESIGN, full=value))
    if value != 3:  # a valid limit, unused by the closed-form exact bias
        raises_naming("max_units", lambda: conditional_bias(R, S, DESIGN, weighting="exact",
                                                            max_units=value))
    for bad_design in (value, DESIGN.pi, Bernoulli(np.full(G + 1, 0.5))):
        raises_naming("design", lambda d=bad_design: design_covariance(R, S, d))
        raises_naming("design", lambda d=bad_design: variance_estimate(R, S, MASK, d))
        raises_naming("design", lambda d=bad_design: conditional_bias(R, S, d,
                                                                      weighting="exact"))


# ------------------------------------------------------------------ valid inputs are exact
def _rdr(pi):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PositivityWarning)
        return RandomizedDependentRounding(pi, n_orders=8, rng=0)


@st.composite
def positive_designs(draw):
    """Designs on 2-6 units with every pair positive, by construction (no filtering):
    Bernoulli with pi > 0; conditional Poisson with every pi in (0, 1) and n >= 2, or all
    equal with n >= 2 (simple random sampling, the closed-form covariance path); dependent rounding
    leaving out exactly one unit (then rho_ij = 1 - sum over the other units of (1 - pi) > 0
    for N >= 3)."""
    kind = draw(st.sampled_from(["bernoulli", "cps", "srswor", "rdr"]))
    if kind == "bernoulli":
        return Bernoulli(draw(inclusion_probabilities(2, 6, allow_zero=False)))
    if kind == "srswor":
        g = draw(st.integers(2, 6))
        return ConditionalPoisson(np.full(g, draw(st.integers(2, g)) / g))
    if kind == "cps":  # n = 1 would leave every pair at zero: use the complement, n = N - 1
        pi = draw(fixed_size_inclusion_probabilities(3, 6, allow_zero=False, allow_one=False))
        return ConditionalPoisson(pi if pi.sum() >= 1.5 else 1.0 - pi)
    pi = draw(fixed_size_inclusion_probabilities(3, 6, allow_zero=False, allow_one=False,
                                                 n_excluded=1))
    return _rdr(pi)


_unit = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)
_score = st.floats(-3.0, 3.0, allow_nan=False, allow_subnormal=False)


@fuzz_settings(40)
@given(design=positive_designs(), data=st.data())
def test_valid_inputs_are_design_unbiased_with_the_enumerated_covariance(design, data):
    g = design.n_units
    r = data.draw(hnp.arrays(np.float64, g, elements=_unit), label="rewards")
    s = data.draw(hnp.arrays(np.float64, (g, 2), elements=_score), label="scores")
    assert design.all_pairs_positive()  # the construction guarantees it
    joint = design.joint()
    masks, probs = design.support()
    estimates = np.stack([pair_ht_gradient(r, s, m, joint) for m in masks])
    target = pair_gradient(r, s)
    h = np.abs(r[:, None] - r[None, :])[..., None] * np.abs(s[:, None] - s[None, :]) / 2
    m_pairs = g * (g - 1) / 2
    # sum_e ||h_e||_inf / M, plus the size of the centred products pair_gradient sums
    t = float(np.triu(h.max(axis=-1), 1).sum() / m_pairs) + np.abs(r).max() * np.abs(s).max()
    tiny = np.finfo(np.float64).tiny  # tiny rewards make the terms subnormal: absolute error
    np.testing.assert_allclose(probs @ estimates, target, rtol=0, atol=1e-11 * t + tiny)
    # the advantages reproduce the gradient on every sample: g_hat = sum_i A_i s_i
    adv = pair_advantages(r, masks, joint)
    np.testing.assert_allclose(adv @ s, estimates, rtol=0, atol=1e-11 * t / joint.min() + tiny)
    dev = estimates - target
    enumerated = float(probs @ np.einsum("kd,kd->k", dev, dev))
    trace = design_covariance(r, s, design).trace
    tol = 1e-11 * (t / joint[~np.eye(g, dtype=bool)].min()) ** 2 + tiny
    assert abs(trace - enumerated) <= tol, (trace, enumerated, tol)
