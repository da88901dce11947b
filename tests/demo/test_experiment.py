"""The compute-matched experiment (pairht.demo.experiment): its statistics and a short run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("trl")

from pairht.demo import experiment as ex
from pairht.demo.tasks import TASKS, RunSettings

#: Two steps of the short chains from a 20-step warm start: the arms and the report, quickly.
SHORT_CHAIN = RunSettings("chain", 2, warmup_steps=20, prompts_per_step=4)


def test_auc_is_the_mean_of_the_piecewise_linear_curve():
    # y = x on [0, 2] then flat at 2: mean over [0, 4] = (2 + 4) / 4 = 1.5
    assert ex._auc([0, 2, 4], [0, 2, 2], 4.0) == pytest.approx(1.5, abs=1e-12)
    # upto inside the curve: mean of y = x over [0, 1] = 0.5
    assert ex._auc([0, 2, 4], [0, 2, 2], 1.0) == pytest.approx(0.5, abs=1e-12)


def test_first_reach_interpolates_and_is_nan_when_never_reached():
    assert ex._first_reach([0, 10, 20], [0.2, 0.4, 0.8], 0.6) == pytest.approx(15.0)
    assert ex._first_reach([0, 10], [0.7, 0.8], 0.6) == 0.0
    assert math.isnan(ex._first_reach([0, 10], [0.1, 0.2], 0.6))


def test_bootstrap_interval_covers_the_mean_and_shrinks_with_data():
    rng = np.random.default_rng(0)
    small = rng.normal(size=(3, 8))
    big = rng.normal(size=(3, 512))
    lo, hi = ex._bootstrap(small, 500, 0)
    assert lo <= small.mean() <= hi
    lo2, hi2 = ex._bootstrap(big, 500, 0)
    assert hi2 - lo2 < hi - lo
    assert ex._bootstrap(small, 500, 0) == (lo, hi)  # seeded


@pytest.mark.parametrize("seeds", [2, 3, 4, 5])
def test_seed_interval_by_scipy_gives_the_hand_written_interval(seeds):
    # scipy.stats.bootstrap (percentile) against the hand-written two-level resampler with one
    # prompt per seed: both draw the resampled seeds from the same generator stream, so they
    # agree to the rounding of a mean of <= 5 numbers of order 1 (1e-12).
    values = np.random.default_rng(seeds).normal(size=seeds)
    for seed in range(3):
        want = ex._bootstrap(values[:, None], 2000, seed)
        np.testing.assert_allclose(ex._seed_interval(values, 2000, seed), want, rtol=0,
                                   atol=1e-12)


def test_report_time_split_lists_each_arms_phases_and_its_step_against_the_reference():
    rows = [
        {"arm": "grpo", "reference": "grpo",
         "time_split": {"generation": 0.5, "update": 0.3, "total": 0.8}},
        {"arm": "pair", "reference": "grpo",
         "time_split": {"prefix": 0.05, "continuation": 0.25, "update": 0.1, "total": 0.4}},
    ]
    text = "\n".join(ex.render_time_split(rows))
    assert "| phase | grpo | pair |" in text
    assert "| prefix | 0 | 50 |" in text and "| update | 300 | 100 |" in text
    assert "| total | 800 | 400 |" in text and "| step vs grpo | 1.00x | 0.50x |" in text
    assert "| features |" not in text  # phases no arm spent time in are left out
    assert ex.render_time_split([{"arm": "a", "reference": "a", "time_split": {}}]) == []


def test_unknown_arms_and_tasks_are_refused_naming_the_registry():
    with pytest.raises(ValueError, match="arms must be a non-empty subset"):
        ex.run_experiment(["nope"], [0])
    with pytest.raises(ValueError, match="grpo_small matches PAIR"):
        ex.run_experiment(["grpo", "grpo_small"], [0])
    with pytest.raises(ValueError, match="task must be one of"):
        ex.run_experiment(["grpo"], [0], RunSettings(task="nope"))


@pytest.mark.slow
def test_short_run_writes_the_report_and_matches_small_group_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("PAIRHT_CACHE", str(tmp_path / "cache"))
    res = ex.run_experiment(
        ["grpo", "grpo_small", "pair", "adaptive_unweighted"], [0], SHORT_CHAIN,
        out_dir=tmp_path / "out", bootstrap=200,
        progress=False,
    )  # the short chains: this tests the arms and the report (the demo's test runs chain_long)
    text = res.report_path.read_text()
    for arm in ("grpo", "grpo_small", "pair", "adaptive_unweighted"):
        assert f"| {arm} |" in text
    assert "## Per-step time split" in text and "| continuation |" in text
    # The unweighted arm draws PAIR's design (same seed): its first step completes the same
    # candidates with the same rewards; only the weights of its update differ.
    unw = next(r for r in res.runs if r.arm == "adaptive_unweighted").result
    pair = next(r for r in res.runs if r.arm == "pair").result
    assert unw.train_reward[0] == pair.train_reward[0] and len(unw.train_reward) == 2
    by = {r.arm: r for r in res.runs}
    g, p, s = by["grpo"].result, by["pair"].result, by["grpo_small"].result
    assert p.prefix_tokens > 0 and g.prefix_tokens == 0
    assert p.generated_tokens < g.generated_tokens
    expected_g = max(2, round(8 * p.generated_tokens / g.generated_tokens))
    assert by["grpo_small"].group_size == expected_g
    for r in res.runs:
        assert len(r.result.wall) == len(r.result.curve)
        assert len(r.final_by_item) == len(TASKS["chain"].eval_items)
    assert s.generated_tokens > 0
    data = json.loads((res.report_path.parent / "runs.json").read_text())
    assert {row["arm"] for row in data["summary"]} == {"grpo", "grpo_small", "pair",
                                                       "adaptive_unweighted"}
    assert (tmp_path / "cache").exists()  # the warm start was cached
    for path in res.figure_paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_pairht_command_passes_experiment_options_through(capsys):
    from pairht.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--arms" in out and "--seeds" in out


def test_the_narrow_arm_resolves_its_width_from_the_audits_rule():
    """pair_dr_narrow's prefix_group_size is the audit's narrow_width at the G' a pilot's
    mean length gives: half way from G toward G' (the long chains: 6 of 8)."""
    from pairht.audit.two_stage import narrow_width

    assert ex.ARMS["pair_dr_narrow"].options["prefix_group_size"] == ex.NARROW
    for length, g, tau, b in ((94.0, 8, 8, 0.5), (30.0, 8, 8, 0.25), (12.0, 6, 3, 0.5)):
        g_prime = g * (tau + b * (length - tau)) / length
        assert ex._narrow_size(length, g, tau, b) == narrow_width(g, g_prime)
    assert ex._narrow_size(94.0, 8, 8, 0.5) == 6
    assert ex._narrow_size(5.0, 8, 8, 0.5) == 8  # every response ends inside the prefix


@pytest.mark.slow
def test_short_run_of_the_narrow_arm_generates_fewer_prefixes(tmp_path, monkeypatch):
    monkeypatch.setenv("PAIRHT_CACHE", str(tmp_path / "cache"))
    widths: list[int] = []
    resolve = ex._narrow_size
    monkeypatch.setattr(ex, "_narrow_size", lambda *a: widths.append(resolve(*a)) or widths[-1])
    res = ex.run_experiment(["pair_dr", "pair_dr_narrow"], [0], SHORT_CHAIN,
                            out_dir=tmp_path / "out", bootstrap=100, progress=False)
    assert "| pair_dr_narrow |" in res.report_path.read_text()
    by = {r.arm: r.result for r in res.runs}
    (w,) = widths
    assert 2 <= w < 8
    # prefixes for w of 8 candidates: their tokens scale by about w / 8 (same prompts, seed)
    ratio = by["pair_dr_narrow"].prefix_tokens / by["pair_dr"].prefix_tokens
    assert 0.5 * w / 8 < ratio < min(1.0, 1.5 * w / 8)


@pytest.mark.slow
def test_short_run_of_the_default_arm_counts_its_audit_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("PAIRHT_CACHE", str(tmp_path / "cache"))
    res = ex.run_experiment(["pair", "default"], [0], SHORT_CHAIN, out_dir=tmp_path / "out",
                            bootstrap=100, progress=False)
    assert "| default |" in res.report_path.read_text()
    by = {r.arm: r.result for r in res.runs}
    d = by["default"]
    # one audit before step 1 (none after the last step): 8 prompts x G whole completions
    assert d.audit_tokens > 0 and by["pair"].audit_tokens == 0
    assert d.generated_tokens == d.prefix_tokens + d.suffix_tokens + d.audit_tokens
    # the curve's token axis counts the audit too
    assert d.curve[-1][1] == d.generated_tokens
