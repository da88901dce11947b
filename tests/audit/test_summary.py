"""The summary line: PAIR against the best baseline, percentile bootstrap over prompts."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pairht.audit import AuditConfig, compare_to_baselines, run_audit, synthetic_population
from pairht.audit.summary import ratio_interval
from pairht.cli import app

ROWS = ["uniform_ht", "srswor", "pointwise_ht", "grpo_small", "pair", "pair_cps"]


@pytest.fixture(scope="module")
def exact_audit():
    return run_audit(synthetic_population(12, 6, rng=3), ROWS, AuditConfig(seed=1), n_draws=0)


def test_the_best_baseline_has_the_lowest_mean_exact_mse(exact_audit):
    c = compare_to_baselines(exact_audit)
    means = {k: exact_audit.row(k).per_prompt["mse_exact"].mean()
             for k in ("uniform_ht", "srswor", "pointwise_ht", "grpo_small")}
    assert c.baseline == min(means, key=means.get)
    assert c.ratio == pytest.approx(
        exact_audit.row("pair").per_prompt["mse_exact"].mean() / means[c.baseline], rel=1e-14)
    assert c.ratios[c.baseline] == pytest.approx(1.0, rel=1e-14)


def test_the_interval_is_the_percentile_bootstrap_over_prompts(exact_audit):
    """Recomputed by hand: the same seeded resamples, ratio of means, 2.5/97.5 quantiles."""
    c = compare_to_baselines(exact_audit, n_boot=500, seed=7)
    a = exact_audit.row("pair").per_prompt["mse_exact"]
    b = exact_audit.row(c.baseline).per_prompt["mse_exact"]
    rng = np.random.default_rng(np.random.SeedSequence([7, 2000]))
    idx = rng.integers(0, a.size, size=(500, a.size))
    boot = a[idx].mean(axis=1) / b[idx].mean(axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    assert (c.low, c.high) == (pytest.approx(lo, rel=1e-14), pytest.approx(hi, rel=1e-14))
    assert c.low < c.ratio < c.high
    assert compare_to_baselines(exact_audit, n_boot=500, seed=7) == c  # seeded


def test_the_line_names_the_baseline_ratio_and_interval(exact_audit):
    line = compare_to_baselines(exact_audit).line()
    c = compare_to_baselines(exact_audit)
    assert line.startswith(f"pair: exact MSE {c.ratio:.3f}x the best baseline {c.baseline}")
    assert f"[{c.low:.3f}, {c.high:.3f}]" in line and "B=2000" in line


def test_without_exact_metrics_there_is_no_comparison():
    res = run_audit(synthetic_population(2, 5, rng=0), ["uniform_ht", "pair"], n_draws=50,
                    exact=False)
    with pytest.raises(ValueError, match="row 'pair' has no per-prompt exact MSE"):
        compare_to_baselines(res)
    with pytest.raises(ValueError, match="n_boot must be an int >= 1"):
        compare_to_baselines(res, n_boot=0)


def test_the_cli_prints_the_summary_line_and_accepts_the_new_options(tmp_path):
    res = CliRunner().invoke(app, [
        "audit", "--prompts", "4", "--group-size", "6", "--draws", "0", "--quiet",
        "--rows", ",".join(ROWS), "--predictions", "prompt_mean", "--prefix-tokens", "32",
        "--budget", "0.25", "--compare", "pair_cps", "--no-figures", "--out", str(tmp_path)],
        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Summary: pair_cps: exact MSE")]
    assert len(lines) == 1 and "bootstrap interval over prompts" in lines[0]
    assert "Summary: pair_cps" in (tmp_path / "audit.md").read_text()


@pytest.mark.parametrize(("rows", "row"), [("srswor,grpo_small,pair,default", "default"),
                                           ("srswor,grpo_small,pair,pair_width", "pair"),
                                           ("srswor,grpo_small,pair", "pair")])
def test_the_cli_summary_defaults_to_the_default_row_when_it_ran(tmp_path, rows, row):
    res = CliRunner().invoke(app, [
        "audit", "--prompts", "4", "--group-size", "6", "--draws", "0", "--quiet",
        "--rows", rows, "--no-figures", "--out", str(tmp_path)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert next(ln for ln in res.output.splitlines() if ln.startswith("Summary:")).startswith(
        f"Summary: {row}: exact MSE")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_imports_run_one_way_rows_never_import_the_evaluators():
    """Regression: rows <-> exact <-> montecarlo imported each other (at run time)."""
    audit = Path(__import__("pairht.audit", fromlist=["x"]).__file__).parent
    rows = _imports(audit / "rows.py")
    assert not rows & {"pairht.audit.exact", "pairht.audit.montecarlo", "pairht.audit.runner"}
    assert "pairht.audit.rows" not in _imports(audit / "exact.py")
    assert "pairht.audit.rows" not in _imports(audit / "montecarlo.py")
    assert "importlib" not in rows  # no name resolution at run time (the old need())


def _hand_written_ratio_interval(x, ref, n_boot=2000, level=0.95, seed=0):
    """The percentile bootstrap as it was written by hand before scipy's (the reference)."""
    ratio = float(x.mean() / ref.mean()) if ref.mean() > 0 else math.nan
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2000]))
    idx = rng.integers(0, x.shape[0], size=(n_boot, x.shape[0]))
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = x[idx].mean(axis=1) / ref[idx].mean(axis=1)
    if not np.isfinite(ratio) or not np.isfinite(boot).any():
        return ratio, math.nan, math.nan
    lo, hi = np.nanquantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return ratio, float(lo), float(hi)


@pytest.mark.parametrize("prompts", [1, 2, 3, 7, 48])
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_scipy_bootstrap_gives_the_hand_written_interval(prompts, level):
    # scipy.stats.bootstrap (paired, percentile) draws the same rng.integers(0, P, (B, P))
    # indices from the same generator, so the interval is the same to the last bit; zeros in
    # the reference make some resample ratios infinite or NaN, handled the same way.
    rng = np.random.default_rng(prompts)
    x, ref = rng.exponential(size=prompts), rng.exponential(size=prompts)
    if prompts == 7:
        ref[:5] = 0.0
    got = ratio_interval(x, ref, level=level, seed=prompts)
    want = _hand_written_ratio_interval(x, ref, level=level, seed=prompts)
    np.testing.assert_array_equal(got, want)
