"""PairGRPOTrainer as a drop-in for TRL's GRPOTrainer: the args TRL takes, the defaults PAIR
changes (announced once at WARNING), TRL's own metrics estimated for the full batch, and TRL's
quick start with the two class names changed, logging to tensorboard."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pairht.demo import toy
from pairht.trl import PairGRPOConfig, PairGRPOTrainer
from pairht.trl import defaults as pair_defaults
from trl import GRPOConfig

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "06_trl_grpo_quickstart.py"
SMALL = dict(report_to=[], use_cpu=True, num_generations=4, per_device_train_batch_size=8,
             max_completion_length=24)


@pytest.fixture
def fresh_announcements(monkeypatch):
    """Each test sees the announcement as a new process would (it is once per process)."""
    monkeypatch.setattr(pair_defaults, "_ANNOUNCED", set())


def test_a_grpo_config_is_converted_field_by_field(tmp_path, fresh_announcements):
    plain = GRPOConfig(output_dir=str(tmp_path), learning_rate=3e-6, temperature=0.7,
                       seed=7, logging_steps=3, gradient_accumulation_steps=2,
                       **SMALL)
    cfg = pair_defaults.as_pair_config(plain, "org/model")
    assert type(cfg) is PairGRPOConfig
    changed = {c.field for c in pair_defaults.CHANGED_DEFAULTS}
    differ = [f.name for f in dataclasses.fields(GRPOConfig)
              if f.name not in changed and getattr(cfg, f.name) != getattr(plain, f.name)]
    assert differ == []
    assert (cfg.loss_type, cfg.scale_rewards, cfg.num_iterations) == ("dr_grpo", "none", 1)
    assert cfg.vllm_importance_sampling_correction is False


def test_a_grpo_config_value_exact_mode_cannot_run_is_refused_with_its_rule(tmp_path):
    plain = GRPOConfig(output_dir=str(tmp_path), beta=0.04, **SMALL)
    with pytest.raises(ValueError, match=r"beta must be 0 \(no KL term\)"):
        pair_defaults.as_pair_config(plain, "org/model")


def test_args_none_takes_trls_output_folder_and_pairs_defaults():
    model = toy.make_model(0)
    model.config._name_or_path = "org/tiny-toy"
    cfg = pair_defaults.as_pair_config(None, model)
    assert cfg.output_dir == "tiny-toy-GRPO"  # GRPOTrainer's f"{model_name}-GRPO"
    assert (cfg.mode, cfg.loss_type, cfg.scale_rewards) == ("exact", "dr_grpo", "none")
    with pytest.raises(ValueError, match=r"args must be None, a trl\.GRPOConfig or a "
                                         r"PairGRPOConfig.*got dict"):
        pair_defaults.as_pair_config({"output_dir": "x"}, model)


def test_changed_defaults_are_announced_once_at_warning(caplog, fresh_announcements):
    with caplog.at_level(logging.WARNING, logger="pairht.trl"):
        PairGRPOConfig(output_dir="unused", **SMALL)
        PairGRPOConfig(output_dir="unused", **SMALL)  # same change: not repeated
    lines = [r for r in caplog.records if r.name == "pairht.trl"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "loss_type='dapo' -> 'dr_grpo'" in lines[0].getMessage()
    assert "vllm_importance_sampling_correction" not in lines[0].getMessage()  # no vLLM here


def test_use_vllm_needs_no_importance_correction_argument(caplog, fresh_announcements):
    with caplog.at_level(logging.WARNING, logger="pairht.trl"):
        cfg = PairGRPOConfig(output_dir="unused", use_vllm=True, **SMALL)
    assert cfg.vllm_importance_sampling_correction is False
    (line,) = [r.getMessage() for r in caplog.records if r.name == "pairht.trl"]
    assert "vllm_importance_sampling_correction=True -> False" in line
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction=False"):
        PairGRPOConfig(output_dir="unused", use_vllm=True,
                       vllm_importance_sampling_correction=True, **SMALL)


def test_trls_reward_and_completion_metrics_are_the_ht_estimates(tmp_path):
    """TRL's `reward`, `reward_std` and `completions/*` of a PAIR step, recomputed here from
    the logged design: (1/N) sum J r / pi, the pair-form variance, lengths over completed."""
    tok = toy.make_tokenizer()
    cfg = PairGRPOConfig(output_dir=str(tmp_path), max_steps=1, logging_steps=1,
                         width="prefixes", tau=4, snap_window=4, save_strategy="no",
                         **{**SMALL, "max_completion_length": toy.response_length(6) + 8})
    trainer = PairGRPOTrainer(model=toy.make_model(0), reward_funcs=toy.toy_reward, args=cfg,
                              train_dataset=toy.make_dataset(8, rng=0), processing_class=tok)
    trainer.train()
    log = next(e for e in trainer.state.log_history if "reward" in e)
    d = trainer.last_draw
    assert not d.mask.all()  # some candidates were not continued: the estimates matter
    n = d.mask.size
    r = np.where(d.mask, d.rewards, 0.0)
    assert log["reward"] == pytest.approx((r / d.pi).sum() / n, rel=1e-12, abs=1e-12)
    pairs = sum((d.rewards[b, i] - d.rewards[c, j]) ** 2
                / (d.joint[b, i, j] if b == c else d.pi[b, i] * d.pi[c, j])
                for b in range(d.mask.shape[0]) for c in range(d.mask.shape[0])
                for i in range(d.mask.shape[1]) for j in range(d.mask.shape[1])
                if (b, i) < (c, j) and d.mask[b, i] and d.mask[c, j])
    assert log["reward_std"] == pytest.approx(np.sqrt(pairs / (n * (n - 1))), rel=1e-9)
    length = d.prefix_len + d.suffix_len
    assert log["completions/mean_length"] == pytest.approx(
        (np.where(d.mask, length, 0) / d.pi).sum() / n, rel=1e-12)
    assert log["completions/max_length"] == length[d.mask].max()
    assert log["completions/min_length"] == length[d.mask].min()


def _tiny_model_folder(path: Path) -> Path:
    toy.make_model(0).save_pretrained(path)
    toy.make_tokenizer().save_pretrained(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("pair_config", [True, False], ids=["both-names", "trainer-only"])
def test_trls_quick_start_with_the_class_names_changed_trains(tmp_path, pair_config):
    """The quick start script with GRPOTrainer -> PairGRPOTrainer (and GRPOConfig ->
    PairGRPOConfig, or the plain GRPOConfig kept) trains two steps on CPU and writes the
    pair/* metrics to tensorboard."""
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator")
    text = QUICKSTART.read_text()
    names = (("GRPOTrainer", "PairGRPOTrainer"),
             *((("GRPOConfig", "PairGRPOConfig"),) if pair_config else ()))
    pair_text = text.replace("from trl import GRPOConfig, GRPOTrainer",
                             "from trl import GRPOConfig, GRPOTrainer\n"
                             f"from pairht.trl import {', '.join(new for _, new in names)}")
    for old, new in names:
        pair_text = re.sub(rf"\b{old}\(", f"{new}(", pair_text)
    script = tmp_path / "pair_quickstart.py"
    script.write_text(pair_text)
    model = _tiny_model_folder(tmp_path / "model")
    data = tmp_path / "train.jsonl"
    toy.make_dataset(16, rng=0).select_columns(["prompt"]).to_json(str(data))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script), str(model), str(data), str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "changes TRL's GRPOConfig defaults" in proc.stderr  # the WARNING, shown by default
    (run,) = [p for p in (out / "runs").iterdir()]
    acc = event_accumulator.EventAccumulator(str(run))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("train/pair/suffix_tokens", "train/pair/completed", "train/reward",
                "train/completions/mean_length"):
        assert tag in tags, sorted(tags)
        assert len(acc.Scalars(tag)) == 2  # logging_steps=1, two steps
