"""End to end: ``pairht.demo.demo.run_comparison`` trains GRPO and PAIR on the toy task (CPU).

Always the demo's full 60 steps per method (about 1.5 min on two cores), also in CI's short form
of the slow tests: this is the suite's check that PAIR training raises the held-out reward, and
12 steps are too few to move it.
"""

from __future__ import annotations

import json

import pytest

from pairht.demo import demo
from pairht.demo.tasks import RunSettings

STEPS = 60

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return demo.run_comparison(RunSettings("toy", STEPS), seed=0, out_dir=out, progress=False)


def test_writes_table_json_and_plot(result):
    text = result.table_path.read_text()
    assert "GRPO" in text and "PAIR" in text and "held-out success" in text
    assert result.plot_path is not None
    assert result.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((result.out_dir / "results.json").read_text())
    assert set(data["results"]) == {"grpo", "pair"}
    steps = data["settings"]["steps"]
    assert steps == STEPS
    for r in data["results"].values():
        assert r["curve"][0][0] == 0 and r["curve"][-1][0] == steps
        assert len(r["train_reward"]) == steps
        assert r["generated_tokens"] == r["prefix_tokens"] + r["suffix_tokens"]


def test_both_runs_start_from_the_same_policy_and_are_scored_on_the_same_draws(result):
    g, p = result.results["grpo"], result.results["pair"]
    assert g.initial_reward == p.initial_reward
    assert 0.3 <= g.initial_reward <= 0.6  # the warm-up band (tests/trl/test_toy.py)


def test_prefixes_stop_at_the_snapped_checkpoint(result):
    """Every PAIR candidate's prefix ends at the first newline at or after token tau, within
    snap_window more tokens, or at an earlier EOS; toy responses are >= 12 tokens, so the mean
    prefix length lies in [tau, tau + snap_window]."""
    s = result.settings
    rows = s["steps"] * s["prompts_per_step"] * s["num_generations"]
    mean_prefix = result.results["pair"].prefix_tokens / rows
    assert s["tau"] <= mean_prefix <= s["tau"] + s["snap_window"]
    assert result.results["grpo"].prefix_tokens == 0


def test_pair_suffix_tokens_are_about_the_budget_ratio_of_grpo(result):
    """PAIR's budget caps *predicted* expected suffix cost at budget_ratio (0.5) of the full
    group's. Tolerance 0.1 absolute, from three sources: Bernoulli draw noise (3,840 rows in
    60 steps x 64 rows: standard deviation of the realised fraction about 0.01), prefix-head cost
    predictions that are learned online (only their relative errors matter, the budget being a
    ratio), and the GRPO run standing in for the full-group cost (same prompts, but its policy
    drifts apart from PAIR's during training). A PAIR that continued every candidate gives a
    ratio near 1, one that continued none gives 0."""
    ratio = result.suffix_ratio()
    assert abs(ratio - result.settings["budget_ratio"]) <= 0.1, ratio
    # Within the PAIR run, against the Horvitz-Thompson estimate of its own full-group suffix
    # cost (design-unbiased): only draw noise and the heads' relative cost errors remain.
    within = result.results["pair"].suffix_fraction
    assert abs(within - result.settings["budget_ratio"]) <= 0.1, within


def test_training_raises_held_out_reward(result):
    # Measured at seed 0, 60 steps: GRPO 0.461 -> 0.812, PAIR 0.461 -> 0.844 (128 sampled
    # completions, standard deviation about 0.04); 0.15 is well clear of evaluation noise.
    for r in result.results.values():
        assert r.final_reward >= r.initial_reward + 0.15, (r.method, r.curve)
