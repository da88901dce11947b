"""The two-phase design of a narrower prefix width (``pairht.step.subset``): a uniform subset
gets prefixes, a prefix rule runs among it; exactly unbiased, checked by enumerating every
subset and every outcome of the rule's draw."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht import loo_gradient, pair_ht_gradient
from pairht.estimators.difference import difference_advantages, prediction_baselines
from pairht.step import StepInputs, draw_subsets, plan_continuations, subset_budget_ratio
from pairht.step.subset import pair_share, put, take, two_phase_design


def test_draw_subsets_is_uniform_over_the_subsets():
    """Every one of the C(5, 3) = 10 subsets within 5 standard errors of 1/10."""
    S = draw_subsets(40_000, 5, 3, np.random.default_rng(0))
    assert S.shape == (40_000, 3) and np.all(np.diff(S, axis=1) > 0)
    codes = (S * np.array([25, 5, 1])).sum(axis=1)
    all_subsets = [25 * a + 5 * b + c for a, b, c in itertools.combinations(range(5), 3)]
    freq = np.array([(codes == k).mean() for k in all_subsets])
    assert freq.sum() == pytest.approx(1.0, abs=1e-12)  # nothing outside the 10 subsets
    se = math.sqrt(0.1 * 0.9 / 40_000)
    assert np.all(np.abs(freq - 0.1) < 5 * se)


@pytest.mark.parametrize("width,match", [(1, "width must be an int in"), (6, "width must be"),
                                         (3.0, "width must be an int"), (True, "width must")])
def test_bad_widths_are_refused_by_name(width, match):
    with pytest.raises(ValueError, match=match):
        draw_subsets(2, 5, width, np.random.default_rng(0))
    with pytest.raises(ValueError, match="n_prompts must be an int >= 0"):
        draw_subsets(-1, 5, 3, np.random.default_rng(0))


@given(prefix=st.floats(0, 1e4), suffix=st.floats(1e-3, 1e4), ratio=st.floats(0, 1),
       share=st.floats(0.05, 1))
def test_subset_budget_ratio_spends_full_widths_tokens(prefix, suffix, ratio, share):
    b_w = subset_budget_ratio(prefix, suffix, ratio, share)
    assert share * (prefix + b_w * suffix) == pytest.approx(prefix + ratio * suffix, rel=1e-9,
                                                             abs=1e-9)


def test_subset_budget_ratio_refuses_bad_input_by_name():
    for kw, match in (({"share": 0.0}, "share must lie in"), ({"suffix": 0.0}, "suffix must"),
                      ({"prefix": -1.0}, "prefix must")):
        args = {"prefix": 10.0, "suffix": 20.0, "budget_ratio": 0.5, "share": 0.5, **kw}
        with pytest.raises(ValueError, match=match):
            subset_budget_ratio(**args)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), G=st.integers(3, 7), data=st.data())
def test_two_phase_pair_ht_is_the_rule_estimate_of_the_subsets_pair_average(seed, G, data):
    """pair-HT on G candidates with (pi*, rho*) = the block's pair-HT with (pi|S, rho|S):
    1 / (C(G, 2) rho*_ij) = 1 / (C(w, 2) rho_ij|S)."""
    w = data.draw(st.integers(2, G))
    rng = np.random.default_rng(seed)
    B, d = 3, 4
    S = draw_subsets(B, G, w, rng)
    pi_S = rng.uniform(0.2, 1.0, (B, w))
    rho_S = pi_S[:, :, None] * pi_S[:, None, :]
    rho_S[:, np.arange(w), np.arange(w)] = pi_S
    J_S = rng.random((B, w)) < pi_S
    r, s = rng.random((B, G)), rng.normal(size=(B, G, d))
    pi, rho = two_phase_design(pi_S, rho_S, S, G)
    np.testing.assert_allclose(take(pi, S), w / G * pi_S, rtol=1e-15)
    assert pi.sum() == pytest.approx((w / G * pi_S).sum(), rel=1e-12)  # 0 outside S
    J = put(J_S, S, G, fill=False)
    full = pair_ht_gradient(r, s, J, rho)
    block = pair_ht_gradient(take(r, S), take(s, S), J_S, rho_S)
    np.testing.assert_allclose(full, block, rtol=1e-10, atol=1e-13)
    assert pair_share(w, G) == pytest.approx(math.comb(w, 2) / math.comb(G, 2))


def _enumerate_two_phase(rule, seed, G, w, ratio):
    """E[estimate] and E[suffix tokens] by enumerating every w-subset (probability 1/C(G, w))
    and every outcome of the rule's Bernoulli draw among it (prod pi^J (1 - pi)^(1 - J))."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.95, G)
    c = rng.uniform(5, 40, G)
    fin = rng.random(G) < 0.3
    pre = rng.integers(1, 8, G).astype(float)
    r = (rng.random(G) < p).astype(float)
    s = rng.normal(size=(G, 3))
    mean = np.zeros(3)
    subsets = list(itertools.combinations(range(G), w))
    for sub in subsets:
        idx = np.array(sub)
        unfinished = float(np.where(fin[idx], 0.0, c[idx]).sum())
        b_w = 1.0 if unfinished == 0 else min(1.0, subset_budget_ratio(
            pre[idx].sum(), unfinished, ratio, w / G))
        inputs = StepInputs.from_ratio(p[idx][None], c[idx][None], fin[idx][None], b_w,
                                       prefix_tokens=pre[idx][None])
        plan = plan_continuations(inputs, allocator=rule, rng=np.random.default_rng(0),
                                  pi_min=0.1)
        pi_S, rho_S = plan.pi[0], plan.joint[0]
        off = ~np.eye(w, dtype=bool)
        # the rule's design is Bernoulli (independent draws): the enumeration below needs it
        np.testing.assert_allclose(rho_S[off], np.outer(pi_S, pi_S)[off], rtol=1e-12)
        for J_S in itertools.product([False, True], repeat=w):
            J_S = np.array(J_S)
            prob = float(np.prod(np.where(J_S, pi_S, 1.0 - pi_S)))
            if prob == 0.0:
                continue
            if rule == "pair_dr":
                base = prediction_baselines(p[idx], np.where(J_S, r[idx], np.nan), fin[idx])
                A = difference_advantages(np.where(J_S, r[idx], np.nan), J_S, rho_S, base)
                est = A @ s[idx]
            else:
                _, rho = two_phase_design(pi_S[None], rho_S[None], idx[None], G)
                J = put(J_S[None], idx[None], G, fill=False)[0]
                est = pair_ht_gradient(r, s, J, rho[0])
            mean += prob * est / len(subsets)
    return mean, loo_gradient(r[None], s[None])[0]


@pytest.mark.parametrize("rule", ["pair_dr", "pair"])
@pytest.mark.parametrize("seed,G,w,ratio", [(0, 5, 3, 0.3), (1, 6, 4, 0.25), (2, 5, 4, 0.1)])
def test_two_phase_estimate_is_exactly_unbiased_by_enumeration(rule, seed, G, w, ratio):
    """E_S E[estimate | S] = g, the rule planned on each subset's own predictions at its
    matched budget (the trainer's width "subset")."""
    mean, g = _enumerate_two_phase(rule, seed, G, w, ratio)
    assert np.linalg.norm(g) > 1e-3
    np.testing.assert_allclose(mean, g, rtol=1e-10, atol=1e-12)
