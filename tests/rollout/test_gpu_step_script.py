"""benchmarks/gpu_step.py in its CI form (--tiny: 2-layer Qwen2, 8 rows, fp32, CPU).

The GPU numbers come from the same code; here the accounting is checked against what the
backend returned: with greedy decoding and a budget that affords every suffix, PAIR resumes
every row and must reproduce GRPO's completions token for token (so the same token count);
with sampling, PAIR's count is every prefix plus each resumed row's suffix.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_step


def test_full_budget_greedy_pair_reproduces_grpo_completions(capsys):
    (rec,) = gpu_step.main(["--tiny", "--greedy", "--budget-ratio", "1.0", "--no-train"])
    g, p = rec["grpo"], rec["pair"]
    assert p["rows_trained"] == len(g["completions"]) == 8
    assert [p["completions"][i] for i in range(8)] == g["completions"]
    assert p["tokens"] == g["tokens"]
    out = capsys.readouterr().out
    assert out.count("| 8 | fp32 |") == 1 and "token ratio" in out


def test_sampled_step_counts_prefixes_plus_resumed_suffixes():
    (rec,) = gpu_step.main(["--tiny"])
    p = rec["pair"]
    comps = p["completions"]
    assert 0 < p["rows_resumed"] <= p["rows_trained"] == len(comps) <= 8
    assert set(p["seconds"]) == {"p1", "plan", "p2", "train"}
    # Every trained row's completion is counted in the training pass.
    assert p["train_tokens"] == sum(len(c) for c in comps.values())
    assert rec["grpo"]["train_tokens"] == rec["grpo"]["tokens"]
    lengths = p["prefix_lengths"]
    assert p["prefix_tokens"] == sum(lengths) > 0
    suffixes = sum(len(comps[i]) - lengths[i] for i in p["resumed"])
    assert p["tokens"] == p["prefix_tokens"] + suffixes
    # Rows not resumed were complete after phase 1: their completion is the prefix itself.
    assert all(len(comps[i]) == lengths[i] for i in comps if i not in p["resumed"])


def test_eos_bias_gives_the_stop_probability():
    # e^x / (e^x + V - 1) = 1 / L at x = eos_bias(V, L), for uniform logits.
    import math

    V, L = 151936, 160.0
    x = gpu_step.eos_bias(V, L)
    assert abs(math.exp(x) / (math.exp(x) + V - 1) - 1 / L) < 1e-15
