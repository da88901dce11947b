"""``pairht train``: a local model folder, a JSONL file, a verifier and PAIR's options, from
the command line and from a YAML file in TRL's style; bad input is one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairht.cli import app
from pairht.demo import toy
from pairht.trl.launch import build_config, load_yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data" / "arithmetic.jsonl"
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-model")
    toy.make_model(0).save_pretrained(path)
    toy.make_tokenizer().save_pretrained(path)
    return path


SHORT = ["-G", "4", "--per-device-train-batch-size", "8", "--max-completion-length", "24",
         "--max-steps", "2", "--set", "logging_steps=1", "--set", "save_strategy=no"]


@pytest.mark.slow
def test_train_runs_end_to_end_on_the_tiny_model(tiny, tmp_path):
    out = tmp_path / "out"
    res = runner.invoke(app, ["train", "--model", str(tiny), "--data", str(DATA),
                              "--reward", "math", "--budget", "0.5", "--width", "prefixes",
                              "--output-dir", str(out), *SHORT], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "trained 2 steps" in res.output
    assert (out / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_yaml_config_sets_fields_and_the_command_line_overrides_it(tiny, tmp_path):
    cfg = tmp_path / "pair.yaml"
    out = tmp_path / "out"
    cfg.write_text(f"model: {tiny}\ndata: {DATA}\nreward: math\nbudget_ratio: 0.25\n"
                   f"width: prefixes\noutput_dir: {out}\nmax_steps: 5\n")
    res = runner.invoke(app, ["train", "--config", str(cfg), *SHORT], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "trained 2 steps" in res.output  # --max-steps 2 over the file's 5


def test_yaml_keys_are_config_fields(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("budget_ratio: 0.25\nnum_generations: 4\nper_device_train_batch_size: 8\n"
                   "max_completion_length: 24\nreport_to: []\n")
    built = build_config({**load_yaml(cfg), "model": "unused", "reward": "math"})
    assert (built.budget_ratio, built.num_generations) == (0.25, 4)


@pytest.mark.parametrize("args, needle", [
    (["--reward", "math"], "pairht train needs --model, --data"),
    (["--model", "m", "--data", "missing.jsonl", "--reward", "math"],
     "--data must be a JSONL file"),
    (["--model", "m", "--data", str(DATA), "--reward", "chess"], "--reward must be one of"),
    (["--model", "m", "--data", str(DATA), "--reward", "math", "--set", "budget_ration=0.5"],
     "unknown PairGRPOConfig field(s): 'budget_ration' (did you mean budget_ratio"),
    (["--model", "m", "--data", str(DATA), "--reward", "math", "--set", "noequals"],
     "--set must be KEY=VALUE"),
    (["--model", "m", "--data", str(DATA), "--reward", "math", "--answer-field", "gold"],
     "--reward math reads the answer field 'gold'"),
])
def test_bad_input_is_one_line_naming_it(args, needle):
    res = runner.invoke(app, ["train", *args])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], lines
