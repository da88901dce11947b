"""Edge weights of every registered variant, advantages in float32/float64, input checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.estimators import (
    VARIANTS,
    Variant,
    edge_weights,
    pair_advantages,
    pair_estimate,
    pair_ht_gradient,
)
from pairht.testing.strategies import inclusion_probabilities

from ._support import dense_kernel, independent_joint, rewards_for, scores_for

PARAMS = {"clipped": {"w_max": 5.0}}


def _kwargs(name, pi):
    kw = dict(PARAMS.get(name, {}))
    if VARIANTS[name].needs_pi:
        kw["pi"] = pi
    return kw


@st.composite
def observed_groups(draw, max_g=8):
    pi = draw(inclusion_probabilities(2, max_g, allow_zero=False))
    g = pi.shape[0]
    mask = np.asarray(draw(st.lists(st.booleans(), min_size=g, max_size=g)))
    return pi, mask, draw(rewards_for(g)), draw(scores_for(g, 4))


def reference_weights(name, mask, pi, w_max=5.0):
    """W from each variant's definition, edge by edge."""
    g = mask.shape[0]
    m = g * (g - 1) // 2
    rho = independent_joint(pi)
    obs = [(i, j) for i in range(g) for j in range(i + 1, g) if mask[i] and mask[j]]
    w = np.zeros((g, g))
    for i, j in obs:
        w[i, j] = {
            "exact": 1 / (m * rho[i, j]),
            "hajek": (1 / rho[i, j]) / sum(1 / rho[a, b] for a, b in obs),
            "clipped": min(1 / rho[i, j], w_max) / m,
            "marginal_only": 1 / (m * pi[i] * pi[j]),
            "unweighted": 1 / m,
            "observed_average": 1 / len(obs),
        }[name]
    return w + w.T


@pytest.mark.parametrize("name", sorted(VARIANTS))
@settings(max_examples=25)
@given(case=observed_groups())
def test_edge_weights_follow_variant_definition(name, case):
    pi, mask, _, _ = case
    w = edge_weights(mask, independent_joint(pi), weighting=name, **_kwargs(name, pi))
    ref = reference_weights(name, mask, pi)
    np.testing.assert_allclose(w, ref, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(w, w.T)
    assert np.all(np.diag(w) == 0.0)


@pytest.mark.parametrize("name", sorted(VARIANTS))
@settings(max_examples=25)
@given(case=observed_groups())
def test_variant_gradient_is_weighted_edge_sum_and_advantages_reproduce_it(name, case):
    pi, mask, r, s = case
    joint = independent_joint(pi)
    kw = _kwargs(name, pi)
    w = edge_weights(mask, joint, weighting=name, **kw)
    h = dense_kernel(r, s)
    iu = np.triu_indices(r.shape[0], 1)
    reference = np.einsum("e,ed->d", w[iu], h[iu])
    adv = pair_advantages(r, mask, joint, weighting=name, **kw)
    # round-off relative to the terms summed by either route: W_e h_e, and A_i s_i
    tol = 1e-12 * (np.abs(w[iu]) @ np.abs(h[iu]).max(axis=1) + np.abs(adv) @ np.abs(s).max(1))
    got = pair_estimate(r, s, mask, joint, weighting=name, **kw)
    np.testing.assert_allclose(got, reference, rtol=0, atol=tol)
    diff = r[:, None] - r[None, :]
    tol_adv = 1e-13 * np.abs(w * diff).sum(axis=1)  # per candidate, its own terms' size
    assert np.all(np.abs(adv - 0.5 * (w * diff).sum(axis=1)) <= tol_adv)


def test_every_documented_variant_is_registered_with_its_bias():
    assert set(VARIANTS) == {
        "exact", "hajek", "clipped", "marginal_only", "unweighted", "observed_average"
    }
    for name, variant in VARIANTS.items():
        assert isinstance(variant, Variant) and variant.name == name and variant.bias
    assert [n for n, v in VARIANTS.items() if v.unbiased] == ["exact"]


def test_ht_gradient_is_the_exact_variant():
    rng = np.random.default_rng(0)
    pi = rng.uniform(0.2, 1, 6)
    r, s, mask = rng.random(6), rng.normal(size=(6, 3)), rng.random(6) < 0.6
    np.testing.assert_array_equal(
        pair_ht_gradient(r, s, mask, independent_joint(pi)),
        pair_estimate(r, s, mask, independent_joint(pi), weighting="exact"),
    )


def test_float32_accumulation_agrees_with_float64_reference():
    rng = np.random.default_rng(1)
    pi = rng.uniform(0.1, 1, (128, 16))
    joint = independent_joint(pi)
    r, mask = rng.random((128, 16)), rng.random((128, 16)) < pi
    a64 = pair_advantages(r, mask, joint)
    a32 = pair_advantages(r, mask, joint, dtype=np.float32)
    assert a32.dtype == np.float32 and a64.dtype == np.float64
    # float32 rounding of each of at most 15 terms of size <= max|W| |r_i - r_j|
    w = edge_weights(mask, joint)
    bound = 16 * np.finfo(np.float32).eps * np.abs(w).sum(axis=-1)
    assert np.all(np.abs(a32 - a64) <= bound + 1e-30)


def test_no_edge_gives_zero_weights_and_advantages():
    pi = np.array([0.5, 0.5, 0.5])
    for name in VARIANTS:
        w = edge_weights([True, False, False], independent_joint(pi), weighting=name,
                         **_kwargs(name, pi))
        assert np.all(w == 0.0)
    joint = independent_joint(pi)
    assert np.all(pair_advantages([1.0, 0.0, 0.0], [True, False, False], joint) == 0)


def test_numeric_zero_one_mask_equals_boolean_mask():
    pi = np.array([0.5, 0.6, 0.7])
    j = independent_joint(pi)
    np.testing.assert_array_equal(edge_weights([1, 0, 1], j), edge_weights([True, False, True], j))
    np.testing.assert_array_equal(edge_weights([1.0, 0.0, 1.0], j), edge_weights([1, 0, 1], j))


# ------------------------------------------------------------------ bad input
JOINT = independent_joint(np.array([0.5, 0.5, 0.8]))
MASK = np.array([True, True, False])


def test_unknown_weighting_is_refused_with_the_registered_names():
    with pytest.raises(ValueError, match=r"weighting must be one of \['clipped'"):
        edge_weights(MASK, JOINT, weighting="self_normalised")


def test_clipped_needs_a_positive_w_max():
    with pytest.raises(ValueError, match="needs w_max"):
        edge_weights(MASK, JOINT, weighting="clipped")
    for bad in (0.0, -1.0, np.inf, np.nan, "ten", True):
        # a string or a bool is the wrong type (TypeError); the others are out of range
        with pytest.raises((ValueError, TypeError),
                           match="w_max must be a positive finite number"):
            edge_weights(MASK, JOINT, weighting="clipped", w_max=bad)


def test_w_max_and_pi_are_refused_where_they_would_be_ignored():
    with pytest.raises(ValueError, match="would silently ignore w_max"):
        edge_weights(MASK, JOINT, weighting="exact", w_max=10.0)
    with pytest.raises(ValueError, match="would silently ignore it"):
        edge_weights(MASK, JOINT, weighting="exact", pi=[0.5, 0.5, 0.8])


def test_marginal_only_needs_pi_and_exact_needs_joint():
    with pytest.raises(ValueError, match="needs pi"):
        edge_weights(MASK, JOINT, weighting="marginal_only")
    with pytest.raises(ValueError, match="needs joint"):
        edge_weights(MASK, None, weighting="exact")
    with pytest.raises(ValueError, match=r"pi must be > 0 on every observed edge"):
        edge_weights(MASK, weighting="marginal_only", pi=[0.0, 0.5, 0.8])


def test_zero_joint_on_an_observed_edge_is_refused():
    joint = JOINT.copy()
    joint[0, 1] = joint[1, 0] = 0.0
    rule = r"joint must be > 0 on every observed edge.*joint\[0, 1\]"
    with pytest.raises(ValueError, match=rule):
        pair_advantages([1.0, 0.0, 1.0], MASK, joint)
    # the same zero on an unobserved edge is fine (that pair is never observed)
    pair_advantages([1.0, 0.0, 1.0], [True, False, True], joint)


def test_malformed_joint_is_refused():
    with pytest.raises(ValueError, match=r"joint must have shape \(\.\.\., G, G\) with G = 3"):
        edge_weights(MASK, np.ones((2, 2)))
    asym = JOINT.copy()
    asym[0, 2] += 0.01
    with pytest.raises(ValueError, match="joint must be symmetric"):
        edge_weights(MASK, asym)
    with pytest.raises(ValueError, match=r"joint must lie in \[0, 1\]"):
        edge_weights(MASK, JOINT * 5)
    with pytest.raises(ValueError, match="joint must be finite"):
        edge_weights(MASK, np.full((3, 3), np.nan))


def test_non_boolean_mask_is_refused():
    with pytest.raises(ValueError, match=r"mask must be boolean or hold only 0/1.*mask\[1\] = 2"):
        edge_weights([1, 2, 0], JOINT)
    with pytest.raises(ValueError, match="mask must be boolean"):
        edge_weights(np.array(["a", "b", "c"]), JOINT)
    with pytest.raises(ValueError, match=r"mask must have shape \(\.\.\., G\) with G = 3"):
        pair_advantages([1.0, 0.0, 1.0], [True, True], JOINT)


def test_nan_reward_of_a_selected_candidate_is_refused():
    with pytest.raises(ValueError, match=r"rewards must be finite .* selected .*rewards\[1\]"):
        pair_advantages([1.0, np.nan, 1.0], MASK, JOINT)
    with pytest.raises(ValueError, match=r"scores must be finite .* selected"):
        pair_ht_gradient([1.0, 0.0, 1.0], np.array([[0.0], [np.inf], [0.0]]), MASK, JOINT)


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="batch axes"):
        pair_advantages(np.zeros((2, 3)), np.ones((4, 3), bool), JOINT)
    with pytest.raises(ValueError, match=r"scores must have shape"):
        pair_ht_gradient([1.0, 0.0, 1.0], np.zeros((2, 1)), MASK, JOINT)
    with pytest.raises(ValueError, match="dtype must be float32 or float64"):
        pair_advantages([1.0, 0.0, 1.0], MASK, JOINT, dtype=np.int32)
