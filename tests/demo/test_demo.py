"""``pairht demo`` (pairht.demo.demo): the verdict, the time split and the cost cuts it relies on.

The fast tests check the pieces with exact expectations (the first-reach rule, the printed
verdict and split from hand-made results, the BLAS thread switch); the slow one runs a short
comparison on the chain task (the demo's default) and checks that both runs report a per-step
split whose phases add up and that the table prints the verdict and the split.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")

from pairht.demo import demo
from pairht.demo.tasks import RunSettings
from pairht.trl.timing import PHASES


def _record(name, curve, wall, split=None) -> demo.MethodResult:
    r = demo.MethodResult(name, curve[-1][0], curve[-1][2], curve[0][2], 0, curve[-1][1],
                          wall[-1])
    r.curve, r.wall = list(curve), list(wall)
    r.time_split = split or {}
    return r


def test_reach_is_the_first_evaluation_at_or_above_the_target():
    r = _record("pair", [(0, 0, 0.5), (5, 100, 0.6), (10, 200, 0.7), (15, 300, 0.65)],
                [0.0, 1.0, 2.0, 3.0])
    assert demo.reach(r, 0.6) == (5, 100, 1.0)  # equality counts as reached
    assert demo.reach(r, 0.65) == (10, 200, 2.0)  # the first point, not the last
    assert demo.reach(r, 0.5) == (0, 0, 0.0)
    assert demo.reach(r, 0.71) is None


def _split(**phases: float) -> dict[str, float]:
    out = {**dict.fromkeys(PHASES, 0.0), **phases}
    out["total"] = sum(out.values())
    return out


def _comparison(pair_curve, pair_wall) -> demo.ComparisonResult:
    g = _record("grpo", [(0, 0, 0.5), (10, 1000, 0.75)], [0.0, 10.0],
                _split(generation=0.5, update=0.5))
    p = _record("pair", pair_curve, pair_wall,
                _split(prefix=0.1, continuation=0.2, heads=0.05, update=0.25))
    p.prefix_tokens, p.suffix_tokens = 200, p.curve[-1][1] - 200
    p.full_suffix_ht = 2.0 * p.suffix_tokens
    settings = dict(task="chain", steps=10, budget_ratio=0.5, kernel_load_seconds=0.5,
                    eval="held-out success", match_tokens=False)
    return demo.ComparisonResult({"grpo": g, "pair": p}, Path("."), Path("t.txt"), None,
                                 settings)


def test_printed_verdict_names_tokens_and_seconds_to_grpo_final_reward():
    from rich.console import Console

    res = _comparison([(0, 0, 0.5), (5, 300, 0.7), (10, 600, 0.8)], [0.0, 3.0, 6.0])
    text = demo._print_table(res, Console(file=io.StringIO(), width=200))
    flat = " ".join(text.split())
    assert "GRPO: 10 steps, 1,000 tokens, 10.0 s, final held-out reward 0.750" in flat
    assert "PAIR: 10 steps, 600 tokens, 6.0 s, final held-out reward 0.800" in flat
    assert ("PAIR first reached GRPO's final held-out reward (0.750) at step 10: 600 tokens "
            "(0.60x GRPO's) and 6.0 s (0.60x GRPO's)") in flat  # no eval count: no verdict
    # the split: GRPO's step 1.0 s, PAIR's 0.6 s
    assert "PAIR's step took 600 ms against GRPO's 1000 ms (0.60x) for 0.60x" in flat
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Per-step wall-clock"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].strip())
    rows = {line.split()[0]: line.split() for line in lines[start + 2:end]}
    assert rows["update"][1:] == ["500.0", "50.0%", "250.0", "41.7%"]
    assert rows["total"][1:] == ["1000.0", "100.0%", "600.0", "100.0%"]
    # generation 0.3 s vs 0.5 s (0.60x) at 0.60x the tokens; update 0.50x
    assert "its generation time fell with its tokens" in flat
    assert "does not shrink" not in flat


def _verdict(pair_final: float, n: int = 512) -> str:
    g = _record("grpo", [(0, 0, 0.7), (40, 1000, 0.9)], [0.0, 10.0])
    p = _record("pair", [(0, 0, 0.7), (45, 630, pair_final), (72, 1000, pair_final)],
                [0.0, 7.5, 12.0])
    return " ".join(" ".join(demo.verdict(g, p, n)).split())


def test_verdict_says_reached_only_outside_one_standard_error_of_the_difference():
    # difference of two evaluations of 512 completions near 0.9: sqrt(0.09/512 * 2) = 0.0188
    se = math.hypot(math.sqrt(0.9 * 0.1 / 512), math.sqrt(0.93 * 0.07 / 512))
    above = _verdict(0.93)  # +0.030, 1.7 SE: reached, at the first crossing (step 45)
    assert f"+0.030 +/- {se:.3f}" in above and "+1.7 SE" in above
    assert ("PAIR reached GRPO's final held-out reward (0.900) at step 45: 630 tokens (0.63x "
            "GRPO's) and 7.5 s (0.75x GRPO's)") in above
    level = _verdict(0.91)  # +0.010: within one SE
    assert "end level within one standard error" in level
    assert "at step 45" in level and "within evaluation noise, not a measured gain" in level
    assert "PAIR reached" not in level
    below = _verdict(0.87)  # -0.030
    assert "ended below GRPO's final held-out reward by more than one standard error" in below
    # the same +0.030 from evaluations of 64 completions is within noise (SE about 0.05)
    assert "end level within one standard error" in _verdict(0.93, n=64)


def test_eval_standard_error_is_the_binomial_one_and_names_bad_input():
    assert demo.eval_standard_error(0.9, 512) == pytest.approx(math.sqrt(0.09 / 512), rel=1e-15)
    assert demo.eval_standard_error(1.0, 8) == 0.0
    with pytest.raises(ValueError, match=r"n must be an int >= 1.*got 0"):
        demo.eval_standard_error(0.5, 0)
    with pytest.raises(ValueError, match=r"rate must be a success rate in \[0, 1\]; got 1.5"):
        demo.eval_standard_error(1.5, 10)


def test_explanation_names_latency_bound_decoding_and_the_full_update_when_measured():
    g = _split(generation=0.5, update=0.5)
    p = _split(prefix=0.1, continuation=0.35, heads=0.05, update=0.45)
    text = " ".join(demo._explain(g, p, 0.6).split())
    assert "(450 ms in all, 0.90x GRPO's): a decode step of a tiny model" in text
    assert "its generation time fell less than its tokens" in text
    assert "(0.90x; TRL's loss ran" in text and "did not shrink with the tokens" in text
    # an update that shrank with the skipped rows is explained as the dropped rows
    p2 = _split(prefix=0.1, continuation=0.35, heads=0.05, update=0.25)
    text2 = " ".join(demo._explain(g, p2, 0.6).split())
    assert "(0.50x; PAIR's update runs over the continued rows only" in text2


def test_printed_verdict_says_so_when_pair_never_reaches_grpo():
    from rich.console import Console

    res = _comparison([(0, 0, 0.5), (10, 600, 0.7)], [0.0, 6.0])
    text = demo._print_table(res, Console(file=io.StringIO(), width=200))
    flat = " ".join(text.split())
    assert ("PAIR did not reach GRPO's final held-out reward (0.750) at any evaluation "
            "(best 0.700)") in flat


def test_single_blas_thread_sets_and_restores_the_blas_pools():
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = blas_threads()
    assert before, "numpy loaded no BLAS library threadpoolctl can see"
    with demo.single_blas_thread():
        assert blas_threads() == [1] * len(before)
        # numpy still computes (and exactly the same way) on one thread
        a = np.arange(64.0).reshape(8, 8)
        assert (a @ a.T)[0, 0] == float(np.dot(np.arange(8.0), np.arange(8.0)))
    assert blas_threads() == before


def test_warm_kernels_runs_the_step_and_returns_its_seconds():
    seconds = demo.warm_kernels()
    assert math.isfinite(seconds) and seconds > 0


def test_command_compares_at_matched_tokens_unless_told_fixed_steps(monkeypatch, tmp_path):
    """``pairht demo`` (``make demo``) lets PAIR train to GRPO's generated tokens by default;
    ``--fixed-steps`` gives both methods ``--steps`` steps; the two flags exclude each other."""
    seen = []

    def fake(**kwargs):
        seen.append(kwargs)
        return demo.ComparisonResult({}, tmp_path, tmp_path / "t.txt", None, {})

    monkeypatch.setattr(demo, "run_comparison", fake)
    assert demo.main(["--no-plot", "--no-progress"]) == 0
    assert demo.main(["--match-tokens"]) == 0
    assert demo.main(["--fixed-steps", "--seed", "2"]) == 0
    assert [k["match_tokens"] for k in seen] == [True, True, False]
    assert seen[2]["seed"] == 2
    with pytest.raises(SystemExit):
        demo.main(["--fixed-steps", "--match-tokens"])


def test_bad_task_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"task must be one of \['chain', 'chain_early', "
                                         r"'chain_long', 'toy'\]"):
        demo.run_comparison(RunSettings(task="nope"))


@pytest.mark.slow
def test_short_chain_comparison_matches_tokens_and_reports_a_split_that_adds_up(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PAIRHT_CACHE", str(tmp_path / "cache"))
    out = io.StringIO()
    from rich.console import Console

    res = demo.run_comparison(RunSettings(steps=3, warmup_steps=20, prompts_per_step=4),
                              out_dir=tmp_path, match_tokens=True, plot=False, progress=False,
                              console=Console(file=out, width=200))
    # the default task: long chains (docs/experiment.md); prompts_per_step given here
    assert res.settings["task"] == "chain_long" and res.settings["tau"] == 8
    assert res.settings["prompts_per_step"] == 4
    for r in res.results.values():
        split = r.time_split
        assert split["total"] > 0
        assert sum(split[k] for k in PHASES) == pytest.approx(split["total"], rel=1e-9)
    g, p = res.results["grpo"].time_split, res.results["pair"].time_split
    assert g["generation"] > 0 and g["prefix"] == 0 and g["continuation"] == 0
    assert p["prefix"] > 0 and p["continuation"] > 0 and p["heads"] > 0
    assert p["allocation"] > 0
    text = " ".join(out.getvalue().split())
    assert "Per-step wall-clock split" in text and "GRPO: 3 steps" in text
    assert f"PAIR: {res.results['pair'].steps} steps" in text
    assert "python benchmarks/demo_population.py" in text  # where the audit answers why
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["results"]["pair"]["time_split"]["total"] == p["total"]
    # PAIR trained until it had generated GRPO's tokens (evaluated every step here), at most
    # 2 x 3 steps: the step before the last had not reached them yet.
    grpo, pair = res.results["grpo"], res.results["pair"]
    assert grpo.steps == 3 and 3 < pair.steps <= 6
    tokens = [c[1] for c in pair.curve]
    assert [c[0] for c in pair.curve] == list(range(pair.steps + 1))
    assert tokens[-2] < grpo.generated_tokens
    assert tokens[-1] >= grpo.generated_tokens or pair.steps == 6
    assert tokens[-1] == pair.generated_tokens
