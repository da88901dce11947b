"""The training figures' data tables came from the current code, and the docs quote them.

A training figure's table is the ``runs.json`` that ``pairht experiment`` wrote
(docs/data/NAME.json), with the short form of the same command beside it
(docs/data/NAME_short.json). Checked here: the summary stored in each table is what
:func:`pairht.demo.experiment.summarise` computes from the table's own runs; docs/experiment.md
quotes the long table's command and its summary rows as the report renders them; and the short
command, rerun now, trains what its committed table records.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("matplotlib")

from typer.testing import CliRunner

from pairht.cli import app
from pairht.demo import demo
from pairht.demo import experiment as ex
from pairht.figures import FIGURES, experiment_command, load_table

ROOT = Path(__file__).resolve().parents[1]
TRAINING = [k for k, f in FIGURES.items() if f.table is None]


def _short(name: str) -> dict:
    fig = FIGURES[name]
    return json.loads((ROOT / fig.data_path.with_name(fig.data_path.stem + "_short.json"))
                      .read_text())


def _runs(table: dict) -> list[ex.ArmRun]:
    return [ex.ArmRun(r["arm"], r["seed"], r["group_size"],
                      demo.MethodResult(**{**r["result"],
                                           "curve": [tuple(c) for c in r["result"]["curve"]]}),
                      r["final_by_item"]) for r in table["runs"]]


def _json(x):
    return json.loads(json.dumps(x))


def _close(got, want, path=""):
    """Equal structure; floats equal to 1e-12 relative (sums and percentiles of a few thousand
    numbers of order 1 in float64: another CPU's summation order moves the last bits)."""
    if isinstance(want, dict):
        assert list(got) == list(want), path
        for k in want:
            _close(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(
            want, rel=1e-12, abs=1e-15), path
    else:
        assert got == want, path


@pytest.mark.parametrize("name", TRAINING)
@pytest.mark.parametrize("which", ["long", "short"])
def test_stored_summary_is_what_the_experiment_computes_from_the_stored_runs(name, which):
    table = load_table(name, ROOT) if which == "long" else _short(name)
    s = table["settings"]
    got = ex.summarise(_runs(table), s["arms"], s["seeds"], bootstrap=s["bootstrap"])
    _close(_json(got), table["summary"])


@pytest.mark.parametrize("name", TRAINING)
def test_docs_quote_the_command_and_every_summary_row_of_the_table(name):
    table = load_table(name, ROOT)
    text = " ".join((ROOT / "docs" / "experiment.md").read_text().replace("\\\n", " ").split())
    assert experiment_command(table["settings"]) in text
    report = ex.render_report(table["summary"], table["settings"], []).splitlines()
    start = next(i for i, ln in enumerate(report) if ln.startswith("| arm |"))
    main = report[start + 2:report.index("", start)]  # the summary table's rows
    ranking = [ln for ln in ex.render_ranking(table["summary"])
               if ln.startswith("| ") and not ln.startswith("| rank |")]
    assert len(main) == len(ranking) == len(table["settings"]["arms"])
    for row in main + ranking:
        assert " ".join(row.split()) in text, f"docs/experiment.md does not quote: {row}"


#: Settings the short form changes (the rest must be the long command's).
SIZES = ("seeds", "steps", "warmup_steps", "prompts_per_step", "eval_every")

# What sampling decides is compared with a tolerance. A fresh machine whose BLAS sums in another
# order may flip one sampled token and follow another sample path of the same model and prompts
# from there: a smaller change than another seed's (its own warm start, prompts and path). Two
# seeds of the short form (0 and 1) differed by at most TOKENS_SPREAD (relative: any arm, any
# token part, any evaluation point) and ACC_SPREAD (absolute: any evaluation); tokens may move by
# 1.5x that. Accuracy near 0.02 moves by whole samples of 512, so its tolerance is also at least
# three standard errors of the difference of two evaluations of 512 samples at the stored
# accuracy. On one machine every number repeats exactly (this test, run on the machine that
# wrote the table, compared it). What no sample path changes is compared exactly: the settings,
# which runs, their evaluation steps, the group size of every arm but grpo_small, and
# grpo_small's G' as the rule computes it from the rerun's own tokens.
TOKENS_SPREAD = 0.0423
ACC_SPREAD = 1 / 512
TOKENS_TOL = 1.5 * TOKENS_SPREAD


def _acc_tol(accuracy: float) -> float:
    return max(1.5 * ACC_SPREAD, 3 * math.sqrt(2 * accuracy * (1 - accuracy) / 512))


def _matched_group_size(table: dict, seed: int) -> int:
    """grpo_small's G' from a table's own tokens: G x PAIR's tokens / full-group GRPO's
    (pairht.demo.experiment.run_experiment's rule), PAIR's tokens those of ``pair`` if it ran,
    else the mean of the PAIR arms'."""
    def tokens(r):
        return r["result"]["prefix_tokens"] + r["result"]["suffix_tokens"] + \
            r["result"]["audit_tokens"]

    runs = {r["arm"]: r for r in table["runs"] if r["seed"] == seed}
    pair = {a: tokens(r) for a, r in runs.items() if ex.ARMS[a].kind == "pair"}
    spent = pair.get("pair", float(np.mean(list(pair.values()))))
    g = table["settings"]["num_generations"]
    return max(2, round(g * spent / tokens(runs["grpo"])))


def _short_run_mismatches(got: dict, want: dict) -> list[str]:
    """Where a rerun of the short command differs from the committed short table beyond what a
    sample path explains (empty when it reproduces)."""
    if got["settings"] != want["settings"]:
        return ["settings"]

    def key(table):
        return [(r["arm"], r["seed"], r["group_size"] if r["arm"] != "grpo_small" else None,
                 [c[0] for c in r["result"]["curve"]], len(r["final_by_item"]))
                for r in table["runs"]]

    if key(got) != key(want):
        return ["runs, evaluation steps or group sizes"]
    out = []
    for g, w in zip(got["runs"], want["runs"]):
        gr, wr, arm = g["result"], w["result"], g["arm"]
        if arm == "grpo_small" and g["group_size"] != _matched_group_size(got, g["seed"]):
            out.append(f"grpo_small's G' {g['group_size']} is not the rule's")
        for part in ("prefix_tokens", "suffix_tokens", "audit_tokens"):
            if abs(gr[part] - wr[part]) > TOKENS_TOL * max(wr[part], 1):
                out.append(f"{arm} {part}: {gr[part]} against {wr[part]}")
        for (step, gt, ga), (_, wt, wa) in zip(gr["curve"], wr["curve"]):
            if abs(gt - wt) > TOKENS_TOL * max(wt, 1):
                out.append(f"{arm} tokens at step {step}: {gt} against {wt}")
            if abs(ga - wa) > _acc_tol(wa):
                out.append(f"{arm} accuracy at step {step}: {ga} against {wa}")
    return out


@pytest.mark.parametrize("name", TRAINING)
def test_short_form_is_the_long_command_with_smaller_sizes(name):
    long, short = load_table(name, ROOT)["settings"], _short(name)["settings"]
    assert {k: v for k, v in short.items() if k not in SIZES} == \
        {k: v for k, v in long.items() if k not in SIZES}
    assert len(short["seeds"]) == 1 and short["steps"] < long["steps"]


@pytest.mark.parametrize("name", TRAINING)
def test_short_run_comparison_catches_a_change_beyond_the_tolerance(name):
    want = _short(name)
    assert _short_run_mismatches(json.loads(json.dumps(want)), want) == []
    for part in ("suffix_tokens", "curve"):
        bad = json.loads(json.dumps(want))
        res = bad["runs"][0]["result"]
        if part == "curve":
            res["curve"][-1][2] += 2 * _acc_tol(res["curve"][-1][2])
        else:
            res[part] = round(res[part] * (1 + 2 * TOKENS_TOL))
        assert _short_run_mismatches(bad, want), part
    bad = json.loads(json.dumps(want))
    bad["runs"][0]["group_size"] += 1
    assert _short_run_mismatches(bad, want) == ["runs, evaluation steps or group sizes"]
    small = [i for i, r in enumerate(want["runs"]) if r["arm"] == "grpo_small"]
    for i in small:
        bad = json.loads(json.dumps(want))
        bad["runs"][i]["group_size"] += 1
        assert "grpo_small's G'" in " ".join(_short_run_mismatches(bad, want))


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAINING)
def test_short_command_rerun_now_trains_what_its_committed_table_records(name, tmp_path,
                                                                       monkeypatch):
    want = _short(name)
    command = shlex.split(experiment_command(want["settings"]))
    # an empty cache: the warm start is trained by today's code too
    monkeypatch.setenv("PAIRHT_CACHE", str(tmp_path / "cache"))
    res = CliRunner().invoke(app, [*command[1:], "--out-dir", str(tmp_path), "--no-progress"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "runs.json").read_text())
    assert _short_run_mismatches(got, want) == []


@pytest.mark.parametrize("name", TRAINING)
def test_docs_quote_the_paired_default_against_small_group_grpo_as_the_table_gives_it(name):
    # docs/experiment.md's comparison of PAIR's default with small-group GRPO at equal tokens:
    # per seed, the difference of the two runs' curves read at T and of their AUC(tokens),
    # with the report's percentile bootstrap over seeds
    table = load_table(name, ROOT)
    s = table["settings"]
    if not {"default", "grpo_small"} <= set(s["arms"]):
        pytest.skip("the table has no default and grpo_small arms to compare")
    by = {(r["arm"], r["seed"]): r["result"]["curve"] for r in table["runs"]}
    T = table["summary"][0]["equal_tokens"]

    def read(arm, seed):
        c = by[(arm, seed)]
        x, y = [p[1] for p in c], [p[2] for p in c]
        return ex._at_tokens(x, y, T), ex._auc(x, y, T)

    at = np.array([read("default", x)[0] - read("grpo_small", x)[0] for x in s["seeds"]])
    auc = np.array([read("default", x)[1] - read("grpo_small", x)[1] for x in s["seeds"]])
    text = " ".join((ROOT / "docs" / "experiment.md").read_text().split())
    for d, seed in ((at, 5), (auc, 6)):
        lo, hi = ex._seed_interval(d, 2000, seed)
        assert f"{d.mean():+.3f} [{lo:+.3f}, {hi:+.3f}]" in text
    assert "(per seed " + ", ".join(f"{v:+.3f}" for v in at) + ")" in text
