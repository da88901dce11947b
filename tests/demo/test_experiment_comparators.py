"""The comparator arms of the compute-matched experiment (issue 16) and the report's ranking of
all arms at equal generated tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("trl")

from pairht.demo import demo
from pairht.demo import experiment as ex
from pairht.demo.tasks import RunSettings
from pairht.step import allocator_names


def test_comparator_arms_are_pair_trainer_runs_of_registered_allocators():
    for name in ex.COMPARATOR_ARMS:
        arm = ex.ARMS[name]
        assert arm.kind == "pair" and not arm.matched
        assert arm.options == {"allocator": name}
        assert name in allocator_names()


def _run(arm: str, seed: int, curve: list[tuple[int, int, float]]) -> ex.ArmRun:
    res = demo.MethodResult(arm, curve[-1][0], curve[-1][2], curve[0][2], 0, curve[-1][1], 1.0)
    res.curve = curve
    res.wall = [float(i) for i in range(len(curve))]
    return ex.ArmRun(arm, seed, 8, res, [curve[-1][2]] * 4)


def _runs() -> list[ex.ArmRun]:
    # "grpo" spends 400 tokens, the others 200: every arm is read at T = 200.
    # At T = 200: grpo 0.2 + (0.6 - 0.2) * 200/400 = 0.4 (seed 0), 0.5 (seed 1);
    # vip 0.5, 0.7; hora 0.3, 0.3.
    return [
        _run("grpo", 0, [(0, 0, 0.2), (2, 400, 0.6)]),
        _run("grpo", 1, [(0, 0, 0.2), (2, 400, 0.8)]),
        _run("vip", 0, [(0, 0, 0.2), (1, 100, 0.4), (2, 200, 0.5)]),
        _run("vip", 1, [(0, 0, 0.2), (1, 100, 0.4), (2, 200, 0.7)]),
        _run("hora", 0, [(0, 0, 0.2), (2, 200, 0.3)]),
        _run("hora", 1, [(0, 0, 0.2), (2, 200, 0.3)]),
    ]


def test_accuracy_at_equal_tokens_is_each_curve_read_at_the_fewest_tokens_spent():
    rows = {r["arm"]: r for r in ex.summarise(_runs(), ["grpo", "vip", "hora"], [0, 1],
                                              bootstrap=400)}
    assert rows["grpo"]["equal_tokens"] == 200.0
    assert rows["grpo"]["acc_at_equal_tokens"] == pytest.approx(0.45, abs=1e-12)
    assert rows["vip"]["acc_at_equal_tokens"] == pytest.approx(0.6, abs=1e-12)
    assert rows["hora"]["acc_at_equal_tokens"] == pytest.approx(0.3, abs=1e-12)
    assert rows["vip"]["delta_at_equal_tokens"] == pytest.approx(0.15, abs=1e-12)
    # two seeds: the bootstrap means lie between the two per-seed values
    lo, hi = rows["vip"]["acc_at_equal_tokens_ci"]
    assert 0.5 <= lo <= 0.6 <= hi <= 0.7
    assert rows["hora"]["acc_at_equal_tokens_ci"] == pytest.approx((0.3, 0.3), abs=1e-12)


def test_ranking_orders_arms_by_accuracy_at_equal_tokens_not_final_accuracy():
    summary = ex.summarise(_runs(), ["grpo", "vip", "hora"], [0, 1], bootstrap=400)
    lines = ex.render_ranking(summary)
    table = [ln for ln in lines if ln.startswith("| ") and ln[2].isdigit()]
    # grpo has the best final accuracy (0.7) but at 200 tokens vip leads
    assert [ln.split(" | ")[1] for ln in table] == ["vip", "grpo", "hora"]
    assert "T = 200 tokens" in "\n".join(lines)


def test_one_seed_gives_no_interval_rather_than_a_degenerate_one():
    runs = [r for r in _runs() if r.seed == 0]
    summary = ex.summarise(runs, ["grpo", "vip"], [0], bootstrap=100)
    assert all(math.isnan(v) for v in summary[1]["acc_at_equal_tokens_ci"])
    assert "[n/a]" in "\n".join(ex.render_ranking(summary))


@pytest.mark.parametrize("epochs", [0, 1.5, True])
def test_epochs_must_be_a_positive_int(epochs):
    with pytest.raises(ValueError, match="epochs must be an int >= 1"):
        ex.run_experiment(["pair"], [0], epochs=epochs)


def test_the_cli_expands_comparators_to_the_comparator_arms(monkeypatch):
    seen = {}

    def fake(arms, seeds, **kw):
        seen["arms"] = list(arms)
        seen["epochs"] = kw["epochs"]
        raise SystemExit(3)  # stop here: ex.main returns 0 only when the run succeeded

    monkeypatch.setattr(ex, "run_experiment", fake)
    with pytest.raises(SystemExit):
        ex.main(["--arms", "pair,comparators", "--seeds", "0", "--steps", "1", "--epochs", "3"])
    assert seen["arms"] == ["pair", *ex.COMPARATOR_ARMS]
    assert seen["epochs"] == 3
    assert np.all([a in ex.ARMS for a in seen["arms"]])


@pytest.mark.slow
def test_short_run_of_the_comparator_arms_writes_a_ranked_report(tmp_path, monkeypatch):
    monkeypatch.setenv("PAIRHT_CACHE", str(tmp_path / "cache"))
    arms = ["pair", *ex.COMPARATOR_ARMS]
    # the short chain task: this test is about the comparator arms, not the task
    res = ex.run_experiment(arms, [0], RunSettings("chain", 2, warmup_steps=20,
                                                   prompts_per_step=4),
                            out_dir=tmp_path / "out", bootstrap=100, progress=False)
    text = res.report_path.read_text()
    assert "## Ranking at equal generated tokens" in text
    for arm in arms:
        assert f"| {arm} |" in text
    by = {r.arm: r.result for r in res.runs}
    # DPPO completes every candidate: the most tokens of any arm at the same prompts
    assert by["dppo"].generated_tokens >= max(r.generated_tokens for r in by.values())
    assert all(r.generated_tokens > 0 for r in by.values())
