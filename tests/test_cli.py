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


def test_audit_and_sweep_take_one_declaration_of_the_population_options():
    import typer.main

    group = typer.main.get_command(app).commands["audit"]
    audit = {p.name: p for p in group.params}
    sweep = {p.name: p for p in group.commands["sweep"].params}
    for name in ("population", "prompts", "group_size", "reward", "calibration", "noise"):
        assert (audit[name].opts, audit[name].help) == (sweep[name].opts, sweep[name].help)
        assert (audit[name].default == sweep[name].default) == (name != "prompts"), name
    assert (audit["prompts"].default, sweep["prompts"].default) == (64, 32)


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


# ---------------------------------------------------------------------- a new user's findings
def _pairht_without(module: str, args: list[str], cwd) -> subprocess.CompletedProcess:
    """``pairht <args>`` in a fresh interpreter in which ``module`` cannot be imported
    (``sys.modules[name] = None`` makes every ``import name`` raise ModuleNotFoundError, as
    on a core install without the extra)."""
    code = (f"import sys; sys.modules[{module!r}] = None; "
            f"from pairht.cli import main; main({args!r})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize(("module", "args", "line"), [
    ("typer", ["--help"],
     'pairht: the pairht command needs typer; install it with pip install "pairht[cli]"'),
    ("typer", ["audit", "--budget", "0.5"],
     "pairht: the 'audit' command needs typer; install it with pip install \"pairht[cli]\""),
    ("torch", ["demo", "--steps", "1", "--out-dir", "demo-out"],
     "pairht: the 'demo' command needs torch; install it with pip install \"pairht[trl]\""),
    ("torch", ["experiment", "--seeds", "0", "--steps", "1", "--out-dir", "exp-out"],
     "pairht: the 'experiment' command needs torch; install it with pip install "
     "\"pairht[trl]\""),
], ids=["help-without-typer", "audit-without-typer", "demo-without-torch",
        "experiment-without-torch"])
def test_a_missing_optional_dependency_is_one_line_naming_the_extra(tmp_path, module, args,
                                                                     line):
    # used to be a traceback ending "No module named 'typer'" (43 lines for torch)
    done = _pairht_without(module, args, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [line], done.stderr
    assert done.stdout == ""


def test_an_import_error_of_the_package_itself_keeps_its_traceback(tmp_path):
    # only the optional dependencies are named; a broken install of pairht is a bug to show
    done = _pairht_without("pairht.demo", ["demo", "--steps", "1"], tmp_path)
    assert done.returncode == 1 and "Traceback" in done.stderr, done.stderr
    from pairht.cli import missing_dependency_message

    assert missing_dependency_message(ImportError("cannot import name 'x'"), ["demo"]) is None
    assert missing_dependency_message(
        ModuleNotFoundError("No module named 'torch.nn'", name="torch.nn"), ["demo"]
    ) == "pairht: the 'demo' command needs torch; install it with pip install \"pairht[trl]\""


def test_the_entry_point_module_imports_no_optional_dependency():
    code = ("import sys; sys.modules['typer'] = None; import pairht.cli; "
            "print(sorted(m for m in ('typer', 'click', 'rich') if sys.modules.get(m)))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_random_bytes_as_a_population_say_it_is_not_an_npz_and_never_mention_pickles(tmp_path):
    # the old message: "contains pickled (object) data ... allow_pickle=" (wrong, and unsafe)
    path = tmp_path / "random.npz"
    path.write_bytes(np.random.default_rng(1).bytes(2048))
    res = _run(["audit", "--population", str(path), "--out", str(tmp_path / "o")])
    _one_line_error(res, f"population: {path} is not a .npz archive (numpy cannot read it as "
                         f"a zip file")
    assert "pickle" not in res.output


def test_an_unknown_compare_row_is_a_one_line_error_listing_the_known_rows(tmp_path):
    # used to exit 0 without a summary and without a word
    from pairht.audit import ROWS

    res = _run(["audit", *TINY, "--compare", "nosuch", "--out", str(tmp_path)])
    _one_line_error(res, "--compare must name an audit row", "got 'nosuch'", ", ".join(ROWS))
    assert not (tmp_path / "audit.csv").exists()  # refused before the audit ran
    res = _run(["audit", *TINY, "--rows", "uniform_ht,pair", "--compare", "pair_cps",
                "--out", str(tmp_path)])
    _one_line_error(res, "--compare pair_cps is not among the rows this audit runs "
                         "(--rows uniform_ht,pair)")


def test_a_summary_that_cannot_be_computed_says_why(tmp_path):
    res = _run(["audit", *TINY, "--rows", "pair", "--no-figures", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "Note: no summary line: no baseline row with an exact MSE" in res.output
    assert "Summary:" not in res.output


@pytest.mark.parametrize("budget", ["0", "-0.5", "1.5"])
def test_a_budget_outside_zero_one_is_a_short_one_line_error_with_the_rule(tmp_path, budget):
    # --budget 0 used to print one line naming 22 rows (--pi-min exceeding it)
    res = _run(["audit", *TINY, "--budget", budget, "--out", str(tmp_path)])
    _one_line_error(res, f"--budget must be in (0, 1] (the fraction of the full suffix cost "
                         f"each row spends); got {float(budget):g}")
    assert "pair_cps" not in res.output and len(res.output) < 120
    res = _run(["audit", "sweep", "--axis", "budget", "--values", f"0.5,{budget}", "--rows",
                "pair", "--quiet", "--out", str(tmp_path)])
    _one_line_error(res, "--values of --axis budget must be in (0, 1]")


def test_pi_min_above_the_budget_names_a_few_rows_not_all():
    res = _run(["audit", *TINY, "--pi-min", "0.9", "--budget", "0.5"])
    _one_line_error(res, "--pi-min 0.9 exceeds --budget 0.5", " more) give every candidate")


def test_version_and_python_dash_m_reach_the_same_command():
    import subprocess
    import sys

    import pairht

    out = subprocess.run([sys.executable, "-m", "pairht", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"pairht {pairht.__version__}"
    help_text = subprocess.run([sys.executable, "-m", "pairht", "--help"], capture_output=True,
                               text=True, check=True).stdout
    for command in ("audit", "demo", "experiment"):
        assert command in help_text


def test_the_demo_task_choices_are_the_task_registry():
    pytest.importorskip("torch")
    from pairht._cli_app import DEFAULT_DEMO_TASK, DemoTask
    from pairht.demo.tasks import DEFAULT_TASK, TASKS

    assert [t.value for t in DemoTask] == sorted(TASKS)
    assert DEFAULT_DEMO_TASK.value == DEFAULT_TASK


def test_every_command_is_typer_with_the_same_help_conventions():
    for command in ("audit", "audit-demo", "demo", "experiment", "figures", "train"):
        res = _run([command, "--help"])
        assert res.exit_code == 0, command
        text = " ".join(res.output.split())
        assert "Usage: pairht " + command in text and "--help" in text, command


def test_python_dash_m_pairht_prints_the_version():
    from pairht import __version__

    out = subprocess.run([sys.executable, "-m", "pairht", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"pairht {__version__}"


def test_settings_check_reads_allocation_and_design_from_vertex_rows_only():
    # Only a VertexRow declares an allocation (pi floored at pi_min unless "full") and a
    # design (fixed-size ones need the order-3/4 inclusion table, refused above G = 168).
    from pairht._cli_app import _check_settings

    _check_settings(["grpo_small", "direct_edge_ht", "full"], 0.5, 0.9)
    with pytest.raises(ValueError, match=r"--pi-min 0.9 exceeds --budget 0.5: the adaptive "
                                         r"rows \(uniform_ht\)"):
        _check_settings(["grpo_small", "uniform_ht", "full"], 0.5, 0.9)
    _check_settings(["pair_bernoulli", "grpo_small"], 0.5, 0.08, group_sizes=(200,))
    with pytest.raises(ValueError, match=r"G = 200 is too large: .*fixed-size rows \(pair\)"):
        _check_settings(["pair_bernoulli", "grpo_small", "pair"], 0.5, 0.08, group_sizes=(200,))
