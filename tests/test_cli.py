"""The `pairht` command end to end: files written, one-line errors, lazy imports."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from pairht.audit import save_population, synthetic_population
from pairht.cli import app

runner = CliRunner()
TINY = ["--prompts", "3", "--group-size", "5", "--draws", "200", "--quiet"]
ROWS = "full,uniform_ht,direct_edge_ht,adaptive_unweighted,pair,pair_cps,pair_hajek"


def _run(args):
    return runner.invoke(app, args, catch_exceptions=False)


def test_audit_writes_every_file_it_promises(tmp_path):
    out = tmp_path / "out"
    res = _run(["audit", *TINY, "--rows", ROWS, "--out", str(out)])
    assert res.exit_code == 0, res.output
    for name in ("audit.csv", "audit.json", "audit.md", "bias_mse.png", "mse_tokens.png",
                 "mechanism.png"):
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name
    with open(out / "audit.csv") as fh:
        table = list(csv.DictReader(fh))
    assert [r["key"] for r in table] == ROWS.split(",")
    assert all(r["status"] == "ok" for r in table)
    doc = json.loads((out / "audit.json").read_text())
    assert doc["config"]["budget_ratio"] == 0.5 and doc["population"]["G"] == 5
    assert (out / "bias_mse.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "PAIR" in res.output  # the table was printed


def test_audit_reads_a_population_file(tmp_path):
    path = tmp_path / "pop.npz"
    save_population(path, synthetic_population(2, 4, as_gram=True, rng=1))
    res = _run(["audit", "--population", str(path), "--draws", "100", "--rows", "pair,full",
                "--no-figures", "--quiet", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert doc["population"] == {**doc["population"], "n_prompts": 2, "G": 4,
                                 "scores": "gram"}


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert lines[0].startswith("Error: ")
    for n in needles:
        assert n in lines[0]
    assert "Traceback" not in res.output


def test_a_missing_population_file_is_a_one_line_error(tmp_path):
    res = _run(["audit", "--population", str(tmp_path / "missing.npz"), "--out",
                str(tmp_path / "o")])
    _one_line_error(res, "population file not found", "missing.npz")


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda a: a.update(p_hat=a["p_hat"] + 2.0), "p_hat must lie in [0, 1]"),
        (lambda a: a.update(costs=np.where(a["costs"] > 0, np.nan, 0.0)), "costs must be finite"),
        (lambda a: a.pop("rewards"), "missing key 'rewards'"),
        (lambda a: a.update(format_version=np.array(7)), "unsupported format_version 7"),
    ],
)
def test_a_malformed_population_is_a_one_line_error(tmp_path, mutate, needle):
    pop = synthetic_population(2, 4, rng=0)
    arrays = {k: getattr(pop, k) for k in ("p_hat", "c_hat", "rewards", "costs", "prefix_len",
                                           "scores")}
    arrays["format_version"] = np.array(1)
    mutate(arrays)
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    res = _run(["audit", "--population", str(path), "--out", str(tmp_path / "o")])
    _one_line_error(res, needle)


def test_a_corrupt_file_and_a_bad_out_dir_are_one_line_errors(tmp_path):
    bad = tmp_path / "junk.npz"
    bad.write_bytes(b"\x00" * 10)
    _one_line_error(_run(["audit", "--population", str(bad)]), "cannot read")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _one_line_error(_run(["audit", *TINY, "--out", str(blocker)]), "--out must be a directory")
    _one_line_error(_run(["audit", *TINY, "--rows", "pair,nope"]), "unknown audit rows")


def test_sweep_writes_one_csv_and_one_figure(tmp_path):
    res = _run(["audit", "sweep", "--axis", "budget", "--values", "0.3,0.6", "--prompts", "2",
                "--group-size", "5", "--draws", "100", "--rows", "uniform_ht,pair",
                "--quiet", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    with open(tmp_path / "sweep_budget.csv") as fh:
        table = list(csv.DictReader(fh))
    assert [(r["value"], r["key"]) for r in table] == [
        ("0.3", "uniform_ht"), ("0.3", "pair"), ("0.6", "uniform_ht"), ("0.6", "pair")]
    assert (tmp_path / "sweep_budget.png").stat().st_size > 0


def test_sweeping_G_on_a_file_population_is_refused(tmp_path):
    path = tmp_path / "pop.npz"
    save_population(path, synthetic_population(2, 4, rng=1))
    res = _run(["audit", "sweep", "--axis", "G", "--population", str(path)])
    _one_line_error(res, "--axis G regenerates the synthetic population")


def test_demo_prints_the_table(tmp_path):
    res = _run(["audit-demo", "--prompts", "2", "--group-size", "5", "--draws", "200",
                "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    from pairht.audit import ROWS

    assert ROWS["uniform_ht"].label in res.output and "PAIR" in res.output
    assert (tmp_path / "audit.csv").is_file()


def test_help_explains_every_option():
    res = _run(["audit", "--help"])
    assert res.exit_code == 0
    for opt in ("--population", "--prompts", "--group-size", "--budget", "--pi-min",
                "--draws", "--rows", "--seed", "--out", "--figures", "--enum-limit",
                "--alpha", "--calibration", "--reward", "--cost-budgets"):
        assert opt in res.output, opt
    res = _run(["audit", "sweep", "--help"])
    for opt in ("--axis", "--values", "--draws", "--out"):
        assert opt in res.output, opt


def test_the_cli_imports_neither_matplotlib_nor_torch():
    code = ("import sys, pairht.cli; "
            "bad = [m for m in ('matplotlib', 'torch', 'pairht.audit') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_list_rows_names_every_registered_row():
    from pairht.audit import ROWS

    res = _run(["audit", "--list-rows"])
    assert res.exit_code == 0
    listed = [ln.split()[0] for ln in res.output.splitlines() if ln.strip()]
    assert listed == list(ROWS)


# ---------------------------------------------------------------------- issue 11 regressions
def test_a_negative_seed_is_a_one_line_error_naming_the_option(tmp_path):
    # numpy's own message ("expected non-negative integer") named nothing
    res = _run(["audit", *TINY, "--seed", "-5", "--out", str(tmp_path)])
    _one_line_error(res, "--seed must be a non-negative integer", "got -5")
    res = _run(["audit-demo", "--prompts", "2", "--group-size", "4", "--seed", "-1"])
    _one_line_error(res, "--seed must be a non-negative integer")


@pytest.mark.parametrize("rows", ["", " , ,"])
def test_empty_rows_is_a_one_line_error_not_an_empty_audit(tmp_path, rows):
    # used to exit 0 having audited nothing
    res = _run(["audit", *TINY, "--rows", rows, "--out", str(tmp_path)])
    _one_line_error(res, "--rows must name at least one row")


def test_an_object_array_population_is_a_one_line_error_naming_the_key(tmp_path):
    pop = synthetic_population(2, 4, rng=0)
    arrays = {k: getattr(pop, k) for k in ("p_hat", "c_hat", "rewards", "costs", "prefix_len",
                                           "scores")}
    arrays["format_version"] = np.array(1)
    arrays["costs"] = arrays["costs"].astype(object)
    path = tmp_path / "pickled.npz"
    np.savez(path, **arrays)  # object arrays are pickled; loading them needs allow_pickle
    res = _run(["audit", "--population", str(path), "--out", str(tmp_path / "o")])
    _one_line_error(res, "costs is an object array", "pickled.npz")


def test_pi_min_above_the_budget_is_refused_up_front_naming_both_options(tmp_path):
    # used to exit 0 with every adaptive row "failed"
    res = _run(["audit", *TINY, "--pi-min", "0.9", "--budget", "0.5", "--out", str(tmp_path)])
    _one_line_error(res, "--pi-min 0.9 exceeds --budget 0.5")
    assert not (tmp_path / "audit.csv").exists()
    res = _run(["audit", "sweep", "--axis", "budget", "--values", "0.3,0.05", "--prompts", "2",
                "--group-size", "5", "--draws", "0", "--rows", "pair", "--quiet",
                "--out", str(tmp_path)])
    _one_line_error(res, "--pi-min 0.08 exceeds --budget 0.05")


def test_a_group_too_large_for_the_exact_covariance_is_a_one_line_error(tmp_path):
    # G = 513 died with a 75-line MemoryError traceback (C(513, 4) index rows, ~90 GiB)
    res = _run(["audit", "--prompts", "1", "--group-size", "513", "--draws", "0", "--quiet",
                "--no-figures", "--out", str(tmp_path)])
    _one_line_error(res, "--group-size G = 513", "MAX_INCLUSION_TABLE")
