"""The accounting of benchmarks/bench_vllm_two_phase.py on the real engine (tiny Llama).

The benchmark compares wall-clock at fixed token counts: with EOS biased out every row must run
to ``max_completion_length`` in the single phase, and the two-phase count must be exactly every
row's ``tau + snap_window`` phase-1 tokens plus each resumed row's ``L - len(prefix)`` suffix.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_vllm_two_phase as bench

ROWS, TAU, WINDOW, L = 6, 4, 4, 20


@pytest.fixture(scope="module")
def settings():
    return argparse.Namespace(tau=TAU, snap_window=WINDOW, max_len=L)


def test_single_phase_runs_every_row_to_max_len(engine, hf_model, tokenizer, settings):
    rows = [[5, 6, 7 + i] for i in range(ROWS)]
    got = bench.single_phase(engine, tokenizer, hf_model, rows, settings, seed=3)
    assert got["tokens"] == ROWS * L
    assert got["t"] > 0 and got["cpu"] > 0


def test_two_phase_tokens_are_prefixes_plus_resumed_suffixes(engine, hf_model, tokenizer,
                                                             settings):
    rows = [[5, 6, 7 + i] for i in range(ROWS)]
    got = bench.two_phase(engine, tokenizer, hf_model, rows, settings, seed=3)
    assert got["resumed"] == ROWS // 2
    assert got["tokens"] == ROWS * (TAU + WINDOW) + got["resumed"] * L - got["resumed_prefix"]
    assert TAU <= got["prefix"] <= TAU + WINDOW
    assert 0 < got["feat"] < got["t"]


def test_mean_ci_is_the_t_interval():
    mean, half = bench.mean_ci([1.0, 2.0, 3.0])
    # Student t with 2 degrees of freedom has a closed-form quantile: (2p - 1) sqrt(2 / (4p(1-p)))
    p = 0.975
    t = (2 * p - 1) * math.sqrt(2 / (4 * p * (1 - p)))
    assert mean == 2.0 and half == pytest.approx(t * 1.0 / math.sqrt(3), rel=1e-12)
    assert math.isnan(bench.mean_ci([1.0])[1])


def test_quick_defaults():
    a = bench.parse_args(["--quick"])
    assert (a.rows, a.repeats, a.max_len, a.steps, a.rounds) == ([16, 64], 2, 64, 1, 2)
    assert (a.shim_ab, a.step_max_len, a.step_tau) == (False, 48, 12)
    assert bench.parse_args([]).rows == [16, 64, 128]
    assert bench.parse_args([]).step_prompts == [2]
    assert bench.parse_args(["--step-prompts", "4,8,16"]).step_prompts == [4, 8, 16]
