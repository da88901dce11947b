"""Monte Carlo replay: agrees with the exact metrics, and its fast paths equal the estimators."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.audit import ROWS
from pairht.audit.base import is_linear as _is_linear
from pairht.audit.exact import _variant_kwargs, row_moments
from pairht.audit.montecarlo import pair_coefficients, row_draws
from pairht.estimators import edge_weights, ess, pair_advantages

METRICS = ("mse", "vertices", "edges", "tokens")


# A choice row (pair_width) has no replay of its own: its options are replayed here.
@pytest.mark.parametrize("key", [k for k, r in ROWS.items() if r.estimator != "choice"])
def test_exact_and_monte_carlo_agree_within_4_standard_errors(small_audit, key):
    row = small_audit.row(key)
    assert row.ok, row.status
    m = row.metrics
    for name in METRICS:
        ex, mc, se = m[f"{name}_exact"], m[f"{name}_mc"], m[f"{name}_mc_se"]
        assert np.isfinite(ex)
        if se == 0:  # deterministic quantity (full graph; fixed-size vertex count)
            assert mc == pytest.approx(ex, rel=1e-12, abs=1e-12)
        else:
            # 1e-12 relative: float64 rounding of the 20,000-term sums.
            assert abs(mc - ex) <= 4 * se + 1e-12 * max(abs(ex), 1.0), (name, mc, ex, se)
    # The chi-square test of the mean estimate against g + exact bias.
    assert m["bias_pvalue"] >= 1e-4
    assert row.consistent, row.flags


def test_a_wrong_exact_bias_is_flagged(small_pop, small_cfg):
    """The consistency test can fail: an exact mean shifted by 5 MC standard errors."""
    from pairht.audit.exact import exact_summary
    from pairht.audit.montecarlo import mc_summary, summarise
    from pairht.estimators import pair_gradient

    row = ROWS["pair"]
    plan = row.plan(small_pop, small_cfg, {})
    L = small_pop.reduced_scores()
    mom = row_moments(row, plan, small_pop, L, small_cfg)
    g = pair_gradient(small_pop.rewards, L)
    rng = np.random.default_rng(0)
    draws = [row_draws(row, plan, small_pop, L, q, 4000, rng) for q in range(small_pop.n_prompts)]
    sd = draws[0].est.std(axis=0).max()
    mom.bias = mom.bias.copy()
    mom.bias[0, int(np.argmax(draws[0].est.std(axis=0)))] += 5 * sd / np.sqrt(4000) * 2
    sums = [summarise(d, g[q], g[q] + mom.bias[q]) for q, d in enumerate(draws)]
    _, flags = mc_summary(sums, g, small_pop, mom, exact_summary(mom, g, small_pop, plan),
                          1e-4, plan)
    assert any(f.startswith("bias:") for f in flags)


LINEAR = [k for k, r in ROWS.items() if r.estimator == "ht" and _is_linear(r.weighting)]


@pytest.mark.parametrize("key", LINEAR)
def test_bilinear_fast_path_equals_pair_advantages(small_pop, small_cfg, key):
    row = ROWS[key]
    plan = row.plan(small_pop, small_cfg, {})
    masks = np.random.default_rng(1).random((300, small_pop.group_size)) < 0.5
    for q in range(small_pop.n_prompts):
        kwargs = _variant_kwargs(row.weighting, row.w_max, plan.pi[q], plan.joint[q])
        C = pair_coefficients(small_pop.rewards[q], kwargs)
        J = masks.astype(float)
        fast = J * (J @ C.T)
        want = pair_advantages(small_pop.rewards[q], masks, **kwargs)
        np.testing.assert_allclose(fast, want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("key", ["pair", "pair_clip10", "adaptive_unweighted", "pair_hajek"])
def test_draw_kernels_equal_the_estimators_on_the_same_masks(small_pop, small_cfg, key):
    """Estimates, tokens, ESS and max weight of the replay equal pair_estimate / ess."""
    from pairht.estimators import pair_estimate

    row = ROWS[key]
    plan = row.plan(small_pop, small_cfg, {})
    L = small_pop.reduced_scores()
    G = small_pop.group_size
    M = G * (G - 1) / 2
    q = 1
    d = row_draws(row, plan, small_pop, L, q, 400, np.random.default_rng(3))
    masks = plan.designs[q].sample(np.random.default_rng(3), size=400)
    kwargs = _variant_kwargs(row.weighting, row.w_max, plan.pi[q], plan.joint[q])
    want = pair_estimate(small_pop.rewards[q], L[q], masks, **kwargs)
    np.testing.assert_allclose(d.est, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(d.tokens, masks @ small_pop.costs[q], rtol=1e-13)
    W = M * edge_weights(masks, **kwargs)
    np.testing.assert_allclose(d.ess, ess(W), rtol=1e-12)
    iu, ju = np.triu_indices(G, k=1)
    obs = masks[:, iu] & masks[:, ju]
    has = obs.any(axis=1)
    top = np.where(obs, W[:, iu, ju], -np.inf).max(axis=1)
    np.testing.assert_array_equal(np.isnan(d.max_w), ~has)
    np.testing.assert_allclose(d.max_w[has], top[has], rtol=1e-15)


def test_draws_are_reproducible_and_rows_have_independent_streams(small_pop, small_cfg):
    from pairht.audit.runner import run_audit

    a = run_audit(small_pop, ["pair", "uniform_ht"], small_cfg, n_draws=300, exact=False)
    b = run_audit(small_pop, ["uniform_ht"], small_cfg, n_draws=300, exact=False)
    assert a.row("uniform_ht").metrics["mse_mc"] == b.row("uniform_ht").metrics["mse_mc"]
