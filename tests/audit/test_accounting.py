"""Realised accounting: finished candidates are complete, free and kept with probability 1."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pairht.audit import (
    ROWS,
    AuditConfig,
    load_population,
    run_audit,
    save_population,
    synthetic_population,
    with_predictions,
)
from pairht.audit.allocations import allocator_pi
from pairht.audit.base import suffix_costs
from pairht.estimators import pair_estimate, pair_gradient


@pytest.fixture(scope="module")
def fin_pop():
    """P = 4, G = 7; about a third of the candidates finished (at least 3 unfinished each)."""
    pop = synthetic_population(4, 7, calibration="noisy", rng=5)
    fin = np.zeros((4, 7), dtype=bool)
    fin[0, [1, 4]] = fin[1, [0, 2, 5, 6]] = fin[2, 3] = True  # prompt 3: none finished
    return dataclasses.replace(pop, finished=fin)


@pytest.fixture(scope="module")
def fin_cfg():
    return AuditConfig(budget_ratio=0.4, pi_min=0.1, seed=2, enum_limit=2**7)


@pytest.fixture(scope="module")
def fin_audit(fin_pop, fin_cfg):
    return run_audit(fin_pop, None, fin_cfg, n_draws=20_000)


VERTEX = [k for k, r in ROWS.items()
          if r.estimator in ("ht", "conditional_ht", "difference") and k != "grpo_small"]


def test_every_row_runs_and_agrees_with_its_monte_carlo(fin_audit):
    bad = {r.key: r.status for r in fin_audit.rows if not r.ok}
    assert not bad
    flagged = {r.key: r.flags for r in fin_audit.rows if r.flags}
    assert not flagged


@pytest.mark.parametrize("key", [k for k in VERTEX if ROWS[k].keeps_finished])
def test_finished_candidates_are_always_in_and_cost_nothing(fin_pop, fin_cfg, key):
    plan = ROWS[key].plan(fin_pop, fin_cfg, {})
    assert np.all(plan.pi[fin_pop.finished] == 1.0)
    for q, d in enumerate(plan.designs):
        masks = d.sample(np.random.default_rng(q), size=200)
        assert masks[:, fin_pop.finished[q]].all()
    assert np.all(plan.cost[fin_pop.finished] == 0.0)


@pytest.mark.parametrize("key", [k for k in VERTEX if k != "full" and ROWS[k].cost_matched]
                         + ["direct_edge_ht"])
def test_every_row_spends_the_target_on_unfinished_candidates(fin_audit, fin_cfg, key):
    m = fin_audit.row(key).metrics
    assert m["tokens_exact"] == pytest.approx(fin_cfg.budget_ratio, rel=1e-9)


def test_uniform_spends_the_budget_on_unfinished_only(fin_pop, fin_cfg):
    """Regression: uniform used to put budget_ratio on every candidate, finished or not."""
    pi, _ = allocator_pi("uniform", fin_pop, 0.4, fin_cfg)
    # pi = (0.4 * S) / S with S the prompt's unfinished c_hat sum: two roundings, so 0.4 to
    # within an ulp or two; whether it lands on 0.4 bit for bit depends on S's last bits (they
    # change with the numpy build that drew the population). Finished: exactly 1 (np.where).
    np.testing.assert_allclose(pi[~fin_pop.finished], 0.4, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(pi[fin_pop.finished], 1.0)


def test_fixed_size_rows_take_their_size_over_the_unfinished(fin_pop, fin_cfg):
    """SRSWOR: sizes k_fin + floor(0.4 G_u) and one more, mixed to spend 0.4 G_u on average;
    below an expected size of two over the unfinished, Bernoulli (sizes 0/1 never observe a
    pair of unfinished candidates, so SRSWOR's pair-HT would be biased)."""
    plan = ROWS["srswor"].plan(fin_pop, fin_cfg, {})
    seen_bernoulli = False
    for q, d in enumerate(plan.designs):
        fin = fin_pop.finished[q]
        gu = int((~fin).sum())
        if 0.4 * gu < 2:
            seen_bernoulli = True
            assert not hasattr(d, "sizes")
            np.testing.assert_allclose(d.pi[~fin], 0.4, rtol=0, atol=1e-12)
            continue
        n = int(np.floor(0.4 * gu + 1e-12))
        frac = 0.4 * gu - n
        k = int(fin.sum())
        assert d.sizes == ((k + n, k + n + 1) if frac > 1e-9 else (k + n, k + n))
        assert d.weights[1] == pytest.approx(frac if frac > 1e-9 else 0.0, abs=1e-12)
    sized = [d for d in plan.designs if hasattr(d, "sizes")]
    assert {d.sizes[1] - d.sizes[0] for d in sized} == {0, 1}  # both cases seen
    assert seen_bernoulli or all(0.4 * (~f).sum() >= 2 for f in fin_pop.finished)


@pytest.mark.parametrize("key", ["pair", "srswor", "pair_cps", "pointwise_ht"])
def test_unbiased_with_finished_candidates_by_enumeration(fin_pop, fin_cfg, key):
    """Every mask of the design, with its probability: E[estimate] = g_pair exactly."""
    row = ROWS[key]
    plan = row.plan(fin_pop, fin_cfg, {})
    L = fin_pop.reduced_scores()
    g = pair_gradient(fin_pop.rewards, L)
    for q, d in enumerate(plan.designs):
        masks, probs = d.support()
        if row.estimator == "conditional_ht" and hasattr(d, "components"):  # else Bernoulli
            comps = {round(float(c.pi.sum())): c for c in d.components if c is not None}
            joints = [comps[int(m.sum())].joint() for m in masks]
        else:
            joints = [d.joint()] * len(masks)
        est = np.stack([pair_estimate(fin_pop.rewards[q], L[q], m, joint=j)
                        for m, j in zip(masks, joints)])
        np.testing.assert_allclose(probs @ est, g[q], rtol=0,
                                   atol=1e-12 * max(np.abs(est).max(), 1.0))


def test_grpo_ignores_finished_and_pays_whole_sequences(fin_pop, fin_cfg, fin_audit):
    plan = ROWS["grpo_small"].plan(fin_pop, fin_cfg, {})
    np.testing.assert_array_equal(plan.cost, fin_pop.prefix_len + suffix_costs(fin_pop))
    assert np.ptp(plan.pi) <= 1e-15  # uniform over all G: it cannot know who finished
    pair = fin_audit.row("pair").metrics["generated_exact"]
    assert fin_audit.row("grpo_small").metrics["generated_exact"] == pytest.approx(pair,
                                                                                  rel=1e-12)


def test_finished_survives_save_and_load(tmp_path, fin_pop):
    path = tmp_path / "pop.npz"
    save_population(path, fin_pop)
    back = load_population(path)
    np.testing.assert_array_equal(back.finished, fin_pop.finished)
    assert back.finished.dtype == bool
    np.testing.assert_array_equal(back.subset([1]).finished, fin_pop.finished[[1]])


def test_a_malformed_finished_field_is_refused(fin_pop):
    with pytest.raises(ValueError, match=r"finished must be a bool array of shape \(4, 7\)"):
        dataclasses.replace(fin_pop, finished=np.full((4, 7), 0.5))


def test_prompt_mean_predictions_are_uninformative(fin_pop):
    pop = with_predictions(fin_pop, "prompt_mean")
    for q in range(4):
        u = ~fin_pop.finished[q]
        assert np.ptp(pop.p_hat[q, u]) == 0.0 and np.ptp(pop.c_hat[q, u]) == 0.0
        assert pop.p_hat[q, u][0] == pytest.approx(fin_pop.p_hat[q, u].mean(), rel=1e-14)
    np.testing.assert_array_equal(pop.rewards, fin_pop.rewards)


def test_hindsight_predictions_are_the_realised_outcomes(fin_pop):
    pop = with_predictions(fin_pop, "hindsight")
    u = ~fin_pop.finished
    np.testing.assert_array_equal(pop.p_hat[u], fin_pop.rewards[u])
    np.testing.assert_array_equal(pop.c_hat[u], fin_pop.costs[u])
    with pytest.raises(ValueError, match="predictions must be one of"):
        with_predictions(fin_pop, "oracle")


def test_shrunk_predictions_are_pulled_to_the_group_mean_by_the_measured_factor(fin_pop):
    """shrunk_slope / shrunk_skill: p' = p_bar + s (p - p_bar) over every candidate of a
    prompt, c' = c_bar + s (c - c_bar) over its unfinished ones, with the factor the trainer
    would use, measured on the stored predictions (shrinkage_measures, recomputed here by
    hand); finished candidates keep their c_hat."""
    from pairht.audit.predictions import shrinkage_measures

    u = ~fin_pop.finished
    r = np.clip(fin_pop.rewards, 0.0, 1.0)
    pm = fin_pop.p_hat.mean(axis=1, keepdims=True)
    cm = (np.where(u, fin_pop.c_hat, 0.0).sum(axis=1) / u.sum(axis=1))[:, None]
    x, y = (fin_pop.p_hat - pm).ravel(), (r - pm).ravel()
    xc, yc = (fin_pop.c_hat - cm)[u], (fin_pop.costs - cm)[u]
    want = {"slope_success": x @ y / (x @ x), "slope_cost": xc @ yc / (xc @ xc),
            "skill_success": 1 - np.sum((fin_pop.p_hat - r) ** 2) / np.sum((r.mean() - r) ** 2)}
    got = shrinkage_measures(fin_pop)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12)
    for mode, by in (("shrunk_slope", "slope"), ("shrunk_skill", "skill")):
        s_p = float(np.clip(got[f"{by}_success"], 0, 1))
        s_c = float(np.clip(np.nan_to_num(got[f"{by}_cost"]), 0, 1))
        pop = with_predictions(fin_pop, mode)
        np.testing.assert_allclose(pop.p_hat, pm + s_p * (fin_pop.p_hat - pm), rtol=0,
                                   atol=1e-14)
        np.testing.assert_allclose(pop.c_hat[u], (cm + s_c * (fin_pop.c_hat - cm))[u],
                                   rtol=1e-12)
        np.testing.assert_array_equal(pop.c_hat[~u], fin_pop.c_hat[~u])
        assert pop.meta["shrinkage"] == {"success": s_p, "cost": s_c}


def test_shrinking_by_slope_keeps_calibrated_predictions_and_by_skill_does_not():
    """Oracle predictions (the synthetic generator's true p) have reliability slope 1, so
    shrunk_slope leaves them almost unchanged, while their Brier skill is far below 1."""
    from pairht.audit.predictions import shrinkage_measures

    pop = synthetic_population(48, 16, rng=0)
    m = shrinkage_measures(pop)
    assert abs(m["slope_success"] - 1.0) < 0.1 and m["skill_success"] < 0.5
    by_slope = with_predictions(pop, "shrunk_slope")
    by_skill = with_predictions(pop, "shrunk_skill")
    spread = lambda q: np.std(q.p_hat - q.p_hat.mean(axis=1, keepdims=True))  # noqa: E731
    assert spread(by_slope) > 0.9 * spread(pop) > spread(by_skill) / 0.5


def test_the_cli_lists_the_audits_prediction_modes():
    from pairht.audit import PREDICTIONS
    from pairht.cli import Predictions

    assert tuple(m.value for m in Predictions) == PREDICTIONS


@pytest.mark.parametrize("cost", [lambda s: 3.0 * s, lambda s: s**3 + 0.1 * s,
                                  lambda s: np.floor(1e6 * s) / 1e6 + s])
def test_the_budget_scale_solver_hits_the_target(cost):
    from pairht.audit.allocations import solve_scale

    s = solve_scale(cost, cost(0.37), 0.08, 1.0)
    assert abs(cost(s) - cost(0.37)) <= 1e-12 * cost(0.37)
    assert s == pytest.approx(0.37, abs=1e-6)
    assert solve_scale(cost, cost(0.01), 0.08, 1.0) == 0.08  # unreachable: nearer end
    assert solve_scale(cost, cost(1.0) + 1.0, 0.08, 1.0) == 1.0


def _illinois(cost, target, lo, hi):
    """The hand-written Illinois false-position solver scipy's brentq replaced (reference)."""
    f_lo, f_hi = cost(lo) - target, cost(hi) - target
    if f_lo >= 0.0 or f_hi <= 0.0:
        return lo if abs(f_lo) <= abs(f_hi) else hi
    side, best, best_gap = 0, lo, abs(f_lo)
    for _ in range(100):
        mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        if not lo < mid < hi:
            mid = 0.5 * (lo + hi)
        f_mid = cost(mid) - target
        if abs(f_mid) < best_gap:
            best, best_gap = mid, abs(f_mid)
        if best_gap <= 1e-12 * abs(target) or hi - lo <= 1e-15:
            break
        if f_mid > 0.0:
            hi, f_hi = mid, f_mid
            f_lo, side = (0.5 * f_lo if side == -1 else f_lo), -1
        else:
            lo, f_lo = mid, f_mid
            f_hi, side = (0.5 * f_hi if side == 1 else f_hi), 1
    return best


@pytest.mark.parametrize("cost", [lambda s: 3.0 * s, lambda s: s**3 + 0.1 * s,
                                  lambda s: np.floor(1e6 * s) / 1e6 + s,
                                  lambda s: np.sqrt(s) + np.exp(3 * s)])
@pytest.mark.parametrize("at", [0.1, 0.37, 0.5, 0.9])
def test_brentq_gives_the_hand_written_solvers_scale(cost, at):
    # Both stop within a few ulps of the root (old: |cost - target| <= 1e-12 target; brentq:
    # a bracket of 4 eps relative); the costs' slopes are >= 0.1, so the scales agree to 1e-13.
    from pairht.audit.allocations import solve_scale

    got = solve_scale(cost, cost(at), 0.08, 1.0)
    assert abs(got - _illinois(cost, cost(at), 0.08, 1.0)) <= 1e-13
    assert abs(cost(got) - cost(at)) <= 1e-12 * cost(at)
