"""The warm-started demo policies, cached on disk.

The supervised warm-up is the slowest part of `pairht demo` and `pairht experiment`; both read
the same cached weights from here (a module of its own, so that neither imports the other).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pairht.demo import toy


def cache_dir() -> Path:
    """``$PAIRHT_CACHE``, else ``$XDG_CACHE_HOME/pairht``, else ``~/.cache/pairht``."""
    root = os.environ.get("PAIRHT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pairht"
    )
    return Path(root)


def warm_model(task: toy.Task, seed: int, steps: int, cfg: toy.ToyModelConfig) -> Any:
    """The policy :func:`pairht.demo.toy.warm_started_model` trains, cached under
    :func:`cache_dir` by task, seed, warm-up steps and model size (written atomically)."""
    import torch

    key = f"warm-{task.name}-s{seed}-n{steps}-h{cfg.hidden_size}-l{cfg.num_layers}" \
          f"-a{cfg.num_heads}-i{cfg.intermediate_size}-p{cfg.max_positions}"
    # tying and init_std change the weights too; the toy defaults keep the short file name
    if (cfg.tie_word_embeddings, cfg.init_std) != (True, None):
        key += f"-t{int(cfg.tie_word_embeddings)}-std{cfg.init_std}"
    key += ".pt"
    path = cache_dir() / key
    model = toy.make_model(seed, cfg, task)
    if path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
        model.eval()
        return model
    model, _ = toy.warm_started_model(seed, steps=steps, config=cfg, task=task)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    tmp.replace(path)
    return model
