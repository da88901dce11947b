"""PAIR deciding its prefix width from history (pairht.audit.width, row ``pair_width``)."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.audit import ROWS, AuditConfig, run_audit, synthetic_population
from pairht.audit.width import cross_fitted_choice, prompt_folds


@pytest.mark.parametrize(("P", "k"), [(1, 4), (3, 4), (10, 4), (48, 4), (7, 2)])
def test_folds_partition_the_prompts_into_balanced_seeded_parts(P, k):
    folds = prompt_folds(P, n_folds=k, seed=3)
    sizes = np.bincount(folds)
    assert len(sizes) == min(k, P) and sizes.sum() == P
    assert sizes.max() - sizes.min() <= 1
    np.testing.assert_array_equal(folds, prompt_folds(P, n_folds=k, seed=3))
    if P >= 10:
        assert not np.array_equal(folds, prompt_folds(P, n_folds=k, seed=4))


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_folds_refuse_bad_sizes(bad):
    with pytest.raises(ValueError, match="n_prompts"):
        prompt_folds(bad)
    with pytest.raises(ValueError, match="n_folds"):
        prompt_folds(5, n_folds=bad)


def test_choice_is_the_argmin_over_the_other_folds_brute_force():
    rng = np.random.default_rng(0)
    P = 23
    mse = {"a": rng.gamma(2.0, size=P), "b": rng.gamma(2.0, size=P),
           "c": rng.gamma(2.0, size=P)}
    opts = ["a", "b", "c"]
    choice, chosen = cross_fitted_choice(mse, opts, n_folds=4, seed=5, confidence=None)
    folds = prompt_folds(P, n_folds=4, seed=5)
    for q in range(P):
        others = [p for p in range(P) if folds[p] != folds[q]]
        means = [np.mean([mse[o][p] for p in others]) for o in opts]
        assert choice[q] == int(np.argmin(means))
        assert chosen[q] == mse[opts[choice[q]]][q]
    # The choice for a fold does not depend on that fold's own MSEs.
    f0 = folds == 0
    moved = {o: np.where(f0, 1e9 if o == opts[choice[f0][0]] else 0.0, v)
             for o, v in mse.items()}
    np.testing.assert_array_equal(
        cross_fitted_choice(moved, opts, n_folds=4, seed=5, confidence=None)[0][f0], choice[f0])


def test_confident_choice_leaves_the_first_option_only_on_a_bootstrap_bound_below_one():
    """With ``confidence``, the argmin of the other folds replaces the first option only when
    the ``confidence`` quantile of its bootstrap ratio over the seen prompts is below 1
    (recomputed here with the same seeded resamples): a clear winner is chosen, a noisy one
    is not."""
    rng = np.random.default_rng(1)
    P = 40
    first = rng.gamma(2.0, size=P)
    clear = {"a": first, "b": 0.5 * first}
    assert cross_fitted_choice(clear, ["a", "b"], confidence=0.95)[0].tolist() == [1] * P
    # b is lower on average only because one prompt of a is huge: the argmin picks b where it
    # sees that prompt, the confident rule keeps a everywhere.
    spiky = {"a": np.where(np.arange(P) == 3, 200.0, 1.0), "b": rng.gamma(4.0, 1.0, size=P)}
    plain = cross_fitted_choice(spiky, ["a", "b"], confidence=None)[0]
    sure = cross_fitted_choice(spiky, ["a", "b"], confidence=0.75)[0]
    assert plain.any() and not sure.any()
    folds = prompt_folds(P, seed=0)
    gen = np.random.default_rng(np.random.SeedSequence([0, 37]))
    for f in range(4):
        seen = np.flatnonzero(folds != f)
        if spiky["b"][seen].mean() < spiky["a"][seen].mean():
            take = seen[gen.integers(seen.size, size=(400, seen.size))]
            ratio = spiky["b"][take].mean(axis=1) / spiky["a"][take].mean(axis=1)
            assert (np.quantile(ratio, 0.75) < 1.0) == bool(sure[folds == f].all())
    with pytest.raises(ValueError, match="confidence must be a number in"):
        cross_fitted_choice(clear, ["a", "b"], confidence=1.0)
    with pytest.raises(ValueError, match="n_boot must be an int"):
        cross_fitted_choice(clear, ["a", "b"], n_boot=0)


def test_ties_and_a_single_prompt_go_to_the_first_option():
    same = {"x": np.ones(6), "y": np.ones(6)}
    assert cross_fitted_choice(same, ["x", "y"])[0].tolist() == [0] * 6
    assert cross_fitted_choice(same, ["y", "x"])[0].tolist() == [0] * 6
    one = {"x": np.array([5.0]), "y": np.array([1.0])}
    assert cross_fitted_choice(one, ["x", "y"])[0].tolist() == [0]


def test_choice_refuses_bad_input():
    mse = {"x": np.ones(4), "y": np.ones(4)}
    with pytest.raises(ValueError, match="at least two distinct"):
        cross_fitted_choice(mse, ["x"])
    with pytest.raises(ValueError, match="at least two distinct"):
        cross_fitted_choice(mse, ["x", "x"])
    with pytest.raises(ValueError, match=r"options \['z'\]"):
        cross_fitted_choice(mse, ["x", "z"])
    with pytest.raises(ValueError, match="finite"):
        cross_fitted_choice({"x": np.ones(4), "y": np.array([1.0, np.nan, 1.0, 1.0])},
                            ["x", "y"])


@pytest.fixture(scope="module")
def width_audit():
    # Long suffixes (synthetic, tau = 8) at budget 0.5: PAIR and GRPO are close, so the choice
    # is not the same on every fold of 16 prompts (with this seed, also confidently).
    pop = synthetic_population(16, 8, prefix_tokens=8, rng=5)
    cfg = AuditConfig(budget_ratio=0.5, seed=1)
    return pop, cfg, run_audit(pop, rows=["pair_width", "grpo_small"], config=cfg, n_draws=0)


def test_pair_width_takes_each_prompt_from_its_chosen_option(width_audit):
    pop, cfg, res = width_audit
    row = ROWS["pair_width"]
    # Options not asked for are run but not reported.
    assert [r.key for r in res.rows] == ["pair_width", "grpo_small"]
    full = run_audit(pop, rows=list(row.options), config=cfg, n_draws=0)
    mse = {k: full.row(k).per_prompt["mse_exact"] for k in row.options}
    gen = {k: full.row(k).per_prompt["generated"] for k in row.options}
    choice, chosen = cross_fitted_choice(mse, row.options, seed=cfg.seed)
    w = res.row("pair_width")
    assert w.ok and w.exact_method == "choice"
    assert np.unique(choice).size > 1  # this population's folds choose differently
    np.testing.assert_array_equal(w.per_prompt["mse_exact"], chosen)
    np.testing.assert_array_equal(w.per_prompt["choice"], choice)
    assert w.metrics["mse_exact"] == pytest.approx(chosen.mean(), rel=1e-15)
    assert w.metrics["bias_exact"] <= 1e-12  # both options are design-unbiased
    picked = np.stack([gen[k] for k in row.options])[choice, np.arange(pop.n_prompts)]
    from pairht.audit.base import whole_tokens
    assert w.metrics["generated_exact"] == pytest.approx(picked.sum() / whole_tokens(pop),
                                                         rel=1e-12)
    assert sum(w.metrics[f"chose_{k}"] for k in row.options) == pytest.approx(1.0)
    # GRPO's per-prompt generated tokens sum to what PAIR generates (pooled matching).
    assert gen["grpo_small"].sum() == pytest.approx(gen["pair"].sum(), rel=1e-9)


def test_generated_per_prompt_sums_to_the_pooled_metric(width_audit):
    pop, cfg, _ = width_audit
    from pairht.audit.base import whole_tokens
    res = run_audit(pop, rows=["srswor", "grpo_small", "pair"], config=cfg, n_draws=0)
    for r in res.rows:
        assert r.per_prompt["generated"].sum() / whole_tokens(pop) == pytest.approx(
            r.metrics["generated_exact"], rel=1e-12), r.key


def test_choice_row_has_no_plan_of_its_own(width_audit):
    pop, cfg, _ = width_audit
    with pytest.raises(TypeError, match="chooses among"):
        ROWS["pair_width"].plan(pop, cfg, {})


# ------------------------------------------------------------------ intermediate widths
def test_full_width_two_stage_is_the_row_itself(width_audit):
    from pairht.audit.advice import two_stage_mse

    pop, cfg, _ = width_audit
    mse, b_w = two_stage_mse(pop, 0.5, pop.group_size, seed=cfg.seed)
    assert b_w == pytest.approx(0.5, rel=1e-12)
    ref = run_audit(pop, rows=["pair"], config=cfg, n_draws=0).row("pair")
    np.testing.assert_allclose(mse, ref.per_prompt["mse_exact"], rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("width", [2, 3, 5])
def test_width_w_completing_everything_is_small_group_grpo_with_w_completions(width):
    """With no prefix tokens and the full row among the subset (b_w = 1), the two-stage MSE is
    the enumerated E||g_S - g||^2 alone; small-group GRPO with G' = w whole completions has
    the same exact MSE from its design's inclusion probabilities (an independent path)."""
    import dataclasses

    from pairht.audit.advice import two_stage_mse

    pop = synthetic_population(5, 6, rng=4)
    pop = dataclasses.replace(pop, prefix_len=np.zeros_like(pop.prefix_len))
    b = width / pop.group_size
    mse, b_w = two_stage_mse(pop, b, width, row="full", pi_min=0.05)
    assert b_w == pytest.approx(1.0, rel=1e-12)
    grpo = run_audit(pop, rows=["grpo_small"], config=AuditConfig(budget_ratio=b, pi_min=0.05),
                     n_draws=0).row("grpo_small")
    assert grpo.metrics["budget_scale"] * pop.group_size == pytest.approx(width, rel=1e-12)
    np.testing.assert_allclose(mse, grpo.per_prompt["mse_exact"], rtol=1e-10, atol=1e-15)
    # Zero exactly where every reward ties (every pair term is 0), positive elsewhere.
    tied = np.ptp(pop.rewards, axis=1) == 0
    assert np.all(mse[tied] == 0) and np.all(mse[~tied] > 0) and (~tied).any()


def test_two_stage_refuses_what_it_cannot_compute(width_audit):
    from pairht.audit.advice import two_stage_mse
    from pairht.audit.two_stage import subset_population

    pop, _, _ = width_audit
    with pytest.raises(ValueError, match="width must be an int in"):
        subset_population(pop, 1)
    for bad in (9, 2.0, "3", True):
        with pytest.raises(ValueError, match=r"width must be an int in \[2, G = 8\]"):
            two_stage_mse(pop, 0.5, bad)
    with pytest.raises(ValueError, match="max_subsets"):
        two_stage_mse(pop, 0.5, 4, max_subsets=10)
    # Two of eight candidates cannot spend what PAIR spends at budget 0.5.
    with pytest.raises(ValueError, match="outside"):
        two_stage_mse(pop, 0.5, 2)


def test_the_width_benchmark_prints_the_two_ends_exactly(tmp_path, capsys):
    """benchmarks/audit_widths.py (the docs' width table): width G is the pair row and the
    last line of each block is small-group GRPO at 1.000."""
    import importlib.util
    from pathlib import Path

    from pairht.audit import save_population

    pop = synthetic_population(4, 6, prefix_tokens=8, rng=5)
    path = tmp_path / "pop.npz"
    save_population(path, pop)
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "audit_widths.py"
    spec = importlib.util.spec_from_file_location("audit_widths", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([str(path), "--budget", "0.5"]) == 0
    rows = [ln.split("|")[1:-1] for ln in capsys.readouterr().out.splitlines()[2:]]
    cfg = AuditConfig(budget_ratio=0.5)
    for mode in ("stored", "hindsight"):
        from pairht.audit import with_predictions
        p = with_predictions(pop, mode)
        res = run_audit(p, rows=["grpo_small", "pair"], config=cfg, n_draws=0)
        want = res.row("pair").metrics["mse_exact"] / res.row("grpo_small").metrics["mse_exact"]
        mine = [r for r in rows if r[0].strip() == mode]
        assert mine[0][1].strip() == "6" and float(mine[0][3]) == pytest.approx(want, abs=5e-4)
        assert "small-group GRPO" in mine[-1][1] and mine[-1][3].strip() == "1.000"
        assert len(mine) >= 3  # at least one intermediate width


def test_width_advice_has_no_verdict_without_reward_contrast():
    import dataclasses

    from pairht.audit import width_advice

    pop = synthetic_population(4, 6, prefix_tokens=8, rng=1)
    tied = dataclasses.replace(pop, rewards=np.ones_like(pop.rewards))
    adv = width_advice(tied, 0.5)
    assert adv.choice == "none" and np.isnan(adv.ratio) and "no verdict" in adv.line()
    adv = width_advice(pop, 0.5)
    assert adv.choice in ("pair", "pair_batch", "grpo_small") and np.isfinite(adv.ratio)
    assert f"{adv.ratio:.3f}x" in adv.line() and f"({adv.option})" in adv.line()
    for bad in ((), ("pair", "pair"), ("grpo_small",)):
        with pytest.raises(ValueError, match="options must name distinct prefix rules"):
            width_advice(pop, 0.5, options=bad)


def test_width_advice_says_pair_only_when_it_is_confidently_better():
    """The verdict follows pair_width's rule: the prefix rule with the lower mean exact MSE
    (pair or pair_batch) when the CONFIDENCE quantile, Bonferroni-corrected for the rules
    weighed, of its bootstrap MSE ratio to GRPO over the prompts is below 1 (recomputed here
    from the exact per-prompt MSEs with the same seeded resamples), GRPO otherwise, even where
    that rule's mean is lower."""
    from pairht.audit import width_advice, with_predictions
    from pairht.audit.width import CONFIDENCE, N_BOOT, confidently_lower

    seen = set()
    for mode, seed in (("hindsight", 0), ("stored", 0), ("stored", 4)):
        pop = with_predictions(synthetic_population(16, 8, prefix_tokens=8, rng=seed), mode)
        for options in (("pair",), ("pair", "pair_batch")):
            adv = width_advice(pop, 0.5, seed=3, options=options)
            res = run_audit(pop, rows=["grpo_small", *options], n_draws=0,
                            config=AuditConfig(budget_ratio=0.5, seed=3))
            mse = {k: res.row(k).per_prompt["mse_exact"] for k in ("grpo_small", *options)}
            best = min(options, key=lambda k: mse[k].mean())
            level = 1.0 - (1.0 - CONFIDENCE) / len(options)
            sure = confidently_lower(mse[best], mse["grpo_small"], level, N_BOOT,
                                     np.random.default_rng(np.random.SeedSequence([3, 37])))
            assert adv.option == best and adv.choice == (best if sure else "grpo_small")
            assert adv.ratio == pytest.approx(mse[best].mean() / mse["grpo_small"].mean(),
                                              rel=1e-12)
            seen.add(adv.choice)
    assert {"pair", "grpo_small"} <= seen  # both kinds of verdict occur here
