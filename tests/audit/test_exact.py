"""Exact audit metrics against brute-force enumeration and the appendix bias formulas."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pairht.audit import ROWS
from pairht.audit.exact import row_moments
from pairht.audit.rows import AuditConfig, edge_probabilities
from pairht.estimators import difference_advantages, pair_estimate, pair_gradient, pair_kernel


def _plan(row_key, pop, cfg):
    return ROWS[row_key].plan(pop, cfg, {})


def _exact(key, pop, cfg):
    """The row, its plan, the reduced scores, its exact moments and the targets."""
    row = ROWS[key]
    plan = _plan(key, pop, cfg)
    L = pop.reduced_scores()
    return row, plan, L, row_moments(row, plan, pop, L, cfg), pair_gradient(pop.rewards, L)


def _brute_force_vertex(row, plan, pop, L, q):
    """Mean and covariance trace of the row's estimate over every mask, with its probability."""
    design = plan.designs[q]
    masks, probs = design.support(max_units=pop.group_size)
    kwargs = {"weighting": row.weighting}
    if row.weighting in ("exact", "hajek", "clipped"):
        kwargs["joint"] = design.joint()
    if row.weighting == "marginal_only":
        kwargs["pi"] = design.pi
    if row.weighting == "clipped":
        kwargs["w_max"] = row.w_max
    est = np.stack([pair_estimate(pop.rewards[q], L[q], m, **kwargs) for m in masks])
    mean = probs @ est
    return mean, float(probs @ ((est - mean) ** 2).sum(axis=1))


VERTEX_ROWS = [k for k, r in ROWS.items() if r.estimator == "ht"]
EDGE_ROWS = [k for k, r in ROWS.items() if r.estimator == "edge"]
CONDITIONAL_ROWS = [k for k, r in ROWS.items() if r.estimator == "conditional_ht"]
DIFFERENCE_ROWS = [k for k, r in ROWS.items() if r.estimator == "difference"]


def test_every_row_is_audited_ok(small_audit):
    bad = {r.key: r.status for r in small_audit.rows if not r.ok}
    assert not bad


@pytest.mark.parametrize("key", [k for k, r in ROWS.items() if r.unbiased])
def test_rows_claimed_unbiased_have_zero_exact_bias(small_audit, key):
    row = small_audit.row(key)
    assert row.metrics["bias_exact"] <= 1e-12


@pytest.mark.parametrize("key", VERTEX_ROWS)
def test_exact_moments_equal_brute_force_enumeration(small_pop, small_cfg, key):
    row, plan, L, mom, g = _exact(key, small_pop, small_cfg)
    for q in range(small_pop.n_prompts):
        mean, trace = _brute_force_vertex(row, plan, small_pop, L, q)
        scale = max(np.abs(g[q]).max(), 1e-300)
        np.testing.assert_allclose(mom.bias[q], mean - g[q], atol=1e-12 * scale)
        assert mom.trace_cov[q] == pytest.approx(trace, rel=1e-10, abs=1e-14 * scale**2)
        design = plan.designs[q]
        masks, probs = design.support(max_units=small_pop.group_size)
        k = masks.sum(axis=1)
        assert mom.vertices[q] == pytest.approx(probs @ k, rel=1e-12)
        assert mom.edges[q] == pytest.approx(probs @ (k * (k - 1) / 2), rel=1e-12)
        # the row's own charge per completed candidate (DPPO: C / pi, i.e. all generated)
        assert mom.tokens[q] == pytest.approx(probs @ (masks @ plan.cost[q]), rel=1e-12)


@pytest.mark.parametrize("key", ["pair", "pair_bernoulli", "pair_hajek", "pair_clip10",
                                 "pair_joint", "vip"])
def test_prompts_with_equal_rewards_have_zero_moments_as_enumerated(small_pop, small_cfg, key):
    """A prompt whose rewards are all equal skips its design moments (every pair term is
    zero): its bias and trace are 0, as enumerating its support gives; the other prompt is
    enumerated as usual (rows of estimator "ht": conditional HT has its own moments)."""
    import dataclasses

    from pairht.audit.exact import tied_prompts

    r = small_pop.rewards.copy()
    r[0], r[1] = 1.0, 0.0
    pop = dataclasses.replace(small_pop, rewards=r)
    assert tied_prompts(pop.rewards).tolist() == [True, True, False]
    row, plan, L, mom, g = _exact(key, pop, small_cfg)
    for q in range(pop.n_prompts):
        mean, trace = _brute_force_vertex(row, plan, pop, L, q)
        scale = max(np.abs(g[2]).max(), 1e-300)
        np.testing.assert_allclose(mom.bias[q], mean - g[q], atol=1e-12 * scale)
        assert mom.trace_cov[q] == pytest.approx(trace, rel=1e-10, abs=1e-14 * scale**2)
    assert mom.bias[:2].tolist() == np.zeros((2, L.shape[2])).tolist()
    assert mom.trace_cov[:2].tolist() == [0.0, 0.0]


def _matches_support(mom, q, g, est, masks, probs, cost):
    """Exact moments of prompt ``q`` against every sample's estimate ``est`` of the support."""
    mean = probs @ est
    scale = max(np.abs(g).max(), 1e-300)
    np.testing.assert_allclose(mom.bias[q], mean - g, atol=1e-12 * scale)
    trace = float(probs @ ((est - mean) ** 2).sum(axis=1))
    assert mom.trace_cov[q] == pytest.approx(trace, rel=1e-10, abs=1e-14 * scale**2)
    assert mom.tokens[q] == pytest.approx(probs @ (masks @ cost), rel=1e-12)


@pytest.mark.parametrize("key", CONDITIONAL_ROWS)
def test_conditional_rows_equal_brute_force_enumeration(small_pop, small_cfg, key):
    """Conditional HT: every mask of the mixed-size support weighted with the joints of the
    component of its size (its own pair average for SRSWOR / GRPO); 0 below two vertices."""
    _, plan, L, mom, g = _exact(key, small_pop, small_cfg)
    for q in range(small_pop.n_prompts):
        design = plan.designs[q]
        masks, probs = design.support(max_units=small_pop.group_size)
        comps = {round(float(c.pi.sum())): c for c in design.components if c is not None}
        est = np.stack([
            pair_estimate(small_pop.rewards[q], L[q], m, joint=comps[int(m.sum())].joint())
            if m.sum() >= 2 else np.zeros(L.shape[2]) for m in masks])
        _matches_support(mom, q, g[q], est, masks, probs, plan.cost[q])


@pytest.mark.parametrize("key", DIFFERENCE_ROWS)
def test_difference_rows_equal_brute_force_enumeration(small_pop, small_cfg, key):
    """The difference estimator with the population's predictions as baselines (finished:
    their rewards), every mask of the design's support."""
    _, plan, L, mom, g = _exact(key, small_pop, small_cfg)
    fin = small_pop.finished if small_pop.finished is not None else np.zeros_like(
        small_pop.rewards, dtype=bool)
    for q in range(small_pop.n_prompts):
        design = plan.designs[q]
        masks, probs = design.support(max_units=small_pop.group_size)
        base = np.where(fin[q], small_pop.rewards[q], small_pop.p_hat[q])
        est = np.stack([difference_advantages(small_pop.rewards[q], m, design.joint(), base)
                        @ L[q] for m in masks])
        _matches_support(mom, q, g[q], est, masks, probs, plan.cost[q])


@pytest.mark.parametrize("key", EDGE_ROWS)
def test_direct_edge_moments_equal_enumeration_of_edge_subsets(key):
    from pairht.audit import synthetic_population

    pop = synthetic_population(2, 4, rng=8)  # M = 6 edges: 64 edge subsets
    cfg = AuditConfig(pi_min=0.1)
    _, plan, L, mom, g = _exact(key, pop, cfg)
    iu, ju = np.triu_indices(4, k=1)
    for q in range(2):
        qe = plan.q[q, iu, ju]
        h = pair_kernel(pop.rewards[q], L[q])[iu, ju]
        ests, probs, tokens, verts = [], [], [], []
        for take in itertools.product([0, 1], repeat=6):
            t = np.array(take, dtype=bool)
            probs.append(np.prod(np.where(t, qe, 1 - qe)))
            ests.append((h[t] / qe[t, None]).sum(axis=0) / 6.0)
            touched = np.zeros(4, dtype=bool)
            touched[iu[t]] = touched[ju[t]] = True
            verts.append(touched.sum())
            tokens.append(pop.costs[q][touched].sum())
        p, e = np.array(probs), np.array(ests)
        mean = p @ e
        np.testing.assert_allclose(mom.bias[q], mean - g[q], atol=1e-14)
        np.testing.assert_allclose(mom.bias[q], 0.0, atol=1e-14)
        assert mom.trace_cov[q] == pytest.approx(p @ ((e - mean) ** 2).sum(axis=1), rel=1e-10)
        assert mom.vertices[q] == pytest.approx(p @ np.array(verts), rel=1e-12)
        assert mom.tokens[q] == pytest.approx(p @ np.array(tokens), rel=1e-12)


def _appendix_bias(pop, L, q, plan, multiplier):
    """(1/M) sum_{i<j} c_ij h_ij with the appendix's multiplier c (PAIR paper, App. A/B)."""
    G = pop.group_size
    iu, ju = np.triu_indices(G, k=1)
    h = pair_kernel(pop.rewards[q], L[q])[iu, ju]
    c = multiplier(plan.joint[q], plan.pi[q])[iu, ju]
    return (c[:, None] * h).sum(axis=0) / len(iu)


@pytest.mark.parametrize(
    ("key", "multiplier", "budget"),
    [
        ("adaptive_unweighted", lambda rho, pi: rho - 1.0, 0.5),  # Proposition 1
        ("marginal_only_cps", lambda rho, pi: rho / np.outer(pi, pi) - 1.0, 0.5),
        ("pair_clip10", lambda rho, pi: np.minimum(1.0, 10.0 * rho) - 1.0, 0.15),
        ("pair_clip20", lambda rho, pi: np.minimum(1.0, 20.0 * rho) - 1.0, 0.15),
        ("pair_clip50", lambda rho, pi: np.minimum(1.0, 50.0 * rho) - 1.0, 0.15),
    ],
)
def test_biased_rows_match_the_appendix_formulas(small_pop, key, multiplier, budget):
    # A low floor and budget make rho_e < 1/w_max on some edges, so clipping bites.
    cfg = AuditConfig(budget_ratio=budget, pi_min=0.02)
    row = ROWS[key]
    plan = row.plan(small_pop, cfg, {})
    L = small_pop.reduced_scores()
    mom = row_moments(row, plan, small_pop, L, cfg)
    nonzero = 0.0
    for q in range(small_pop.n_prompts):
        want = _appendix_bias(small_pop, L, q, plan, multiplier)
        np.testing.assert_allclose(mom.bias[q], want, atol=1e-14)
        nonzero = max(nonzero, float(np.abs(want).max()))
    assert nonzero > 1e-6  # the formula is exercised, not trivially zero


def test_hajek_is_biased_and_enumerated(small_audit):
    row = small_audit.row("pair_hajek")
    assert row.exact_method == "enumeration"
    assert row.metrics["bias_exact"] > 1e-6


def test_ratio_rows_are_na_beyond_the_enumeration_limit(small_pop):
    from pairht.audit.runner import run_audit

    res = run_audit(small_pop, ["pair_hajek"], AuditConfig(enum_limit=2**5), n_draws=0)
    row = res.row("pair_hajek")
    assert row.exact_method == "n/a" and np.isnan(row.metrics["mse_exact"])


def test_full_graph_is_the_target(small_audit, small_pop):
    m = small_audit.row("full").metrics
    G = small_pop.group_size
    assert m["mse_exact"] == 0.0 and m["bias_exact"] == 0.0
    assert m["vertices_exact"] == G and m["edges_exact"] == G * (G - 1) / 2
    assert m["tokens_exact"] == pytest.approx(1.0, rel=1e-15)
    assert m["cos_mean_exact"] == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("match", ["cost", "edges"])
def test_edge_probabilities_hit_their_target(small_pop, match):
    from pairht.allocation import edge_proxy

    a = edge_proxy(small_pop.p_hat)
    target = (0.4 * small_pop.c_hat.sum(axis=1) if match == "cost" else np.full(3, 5.0))
    q = edge_probabilities(a, small_pop.c_hat, floor=0.01, target=target, match=match)
    G = small_pop.group_size
    off = ~np.eye(G, dtype=bool)
    if match == "cost":
        got = (small_pop.c_hat * (1 - np.prod(np.where(off, 1 - q, 1.0), axis=2))).sum(axis=1)
    else:
        got = q.sum(axis=(1, 2)) / 2
    np.testing.assert_allclose(got, target, rtol=1e-9)
    assert np.all(q[:, off] >= 0.01) and np.all(q <= 1.0)
    np.testing.assert_array_equal(q, np.swapaxes(q, 1, 2))


@pytest.mark.parametrize("match", ["cost", "edges"])
@pytest.mark.parametrize("ratio", [0.2, 0.4, 0.8])
def test_edge_probabilities_equal_brentq_prompt_by_prompt(small_pop, match, ratio):
    # the vectorised bisection against scipy's brentq on each prompt's own scalar equation
    from scipy import optimize

    from pairht.allocation import edge_proxy

    a = edge_proxy(small_pop.p_hat)
    G = small_pop.group_size
    target = (ratio * small_pop.c_hat.sum(axis=1) if match == "cost"
              else np.full(3, ratio * G * (G - 1) / 2))
    q = edge_probabilities(a, small_pop.c_hat, floor=0.01, target=target, match=match)
    off = ~np.eye(G, dtype=bool)
    for p in range(3):
        root = np.sqrt(a[p])

        def q_of(x, root=root):
            return np.where(off, np.clip(np.exp(x) * root, 0.01, 1.0), 0.0)

        def gap(x, p=p, q_of=q_of):
            qq = q_of(x)
            if match == "edges":
                return qq.sum() / 2 - target[p]
            untouched = np.prod(np.where(off, 1 - qq, 1.0), axis=1)
            return (small_pop.c_hat[p] * (1 - untouched)).sum() - target[p]

        x = optimize.brentq(gap, -60.0, 60.0, xtol=1e-300, rtol=4 * np.finfo(float).eps)
        np.testing.assert_allclose(q[p], q_of(x), rtol=0, atol=1e-12)


MATCHED = [k for k, r in ROWS.items()
           if k not in ("full", "direct_edge_ht_edges", "grpo_small") and r.cost_matched]


def test_every_row_spends_the_same_expected_realised_suffix_tokens(small_audit, small_pop,
                                                                   small_cfg):
    """Realised accounting: sum_q E[sum_i J_qi C_qi] = budget_ratio sum_q sum_i C_qi for every
    row (the budget is solved by bisection; predicted costs c_hat differ from C here)."""
    full = small_pop.costs.sum()
    for key in MATCHED:
        m = small_audit.row(key).metrics
        assert m["tokens_exact"] == pytest.approx(small_cfg.budget_ratio, rel=1e-9), key
    # The predicted cost the adaptive rows spend is *not* the budget: noisy c_hat.
    plan = ROWS["pair"].plan(small_pop, small_cfg, {})
    predicted = (plan.pi * small_pop.c_hat).sum() / small_pop.c_hat.sum()
    assert abs(predicted - small_cfg.budget_ratio) > 1e-4
    assert (plan.pi * small_pop.costs).sum() / full == pytest.approx(0.5, rel=1e-9)


def test_small_group_grpo_generates_as_many_tokens_as_pair(small_audit):
    grpo, pair = small_audit.row("grpo_small").metrics, small_audit.row("pair").metrics
    assert grpo["generated_exact"] == pytest.approx(pair["generated_exact"], rel=1e-12)
    assert 0.0 < grpo["generated_exact"] < 1.0


def test_linear_rows_keep_their_exact_bias_beyond_the_enumeration_limit(small_pop, small_audit):
    from pairht.audit.runner import run_audit

    res = run_audit(small_pop, ["adaptive_unweighted"], AuditConfig(
        budget_ratio=0.5, pi_min=0.1, seed=4, enum_limit=2**5), n_draws=0)
    row = res.row("adaptive_unweighted")
    # linear variants get their exact covariance from estimators.design_covariance(weighting=)
    assert row.exact_method == "closed form"
    ref = small_audit.row("adaptive_unweighted")  # computed by enumeration of the support
    assert row.metrics["bias_exact"] == pytest.approx(ref.metrics["bias_exact"], rel=1e-14)
    assert row.metrics["mse_exact"] == pytest.approx(ref.metrics["mse_exact"], rel=1e-10)


def test_hajek_enumerated_bias_equals_estimators_conditional_bias(small_pop, small_cfg):
    from pairht.estimators import conditional_bias

    row = ROWS["pair_hajek"]
    plan = row.plan(small_pop, small_cfg, {})
    L = small_pop.reduced_scores()
    mom = row_moments(row, plan, small_pop, L, small_cfg)
    for q in range(small_pop.n_prompts):
        want = conditional_bias(small_pop.rewards[q], L[q], plan.designs[q], weighting="hajek")
        np.testing.assert_allclose(mom.bias[q], want, atol=1e-14)
        assert np.abs(want).max() > 1e-6
