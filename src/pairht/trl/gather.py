"""The collectives of a PAIR step in TRL: scoring each process's own rows, and gathering
every process's predictions for the plan."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np


@contextlib.contextmanager
def process_local_reward_gather() -> Iterator[None]:
    """Make TRL's final ``gather`` in ``_calculate_rewards`` a no-op for one call.

    Each process scores only its selected rows, whose number differs between processes, and
    ``accelerate.utils.gather`` needs equal shapes. The caller gathers the full-size result
    itself. This patches the module-level name TRL 1.16 calls (the trainer checks it exists at
    import time). It lives in its own module so that ``pairht.trl.audit_mode`` (which the trainer
    imports) needs nothing from the trainer: imports run one way.
    """
    import trl.trainer.grpo_trainer as grpo_module

    original = grpo_module.gather
    grpo_module.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo_module.gather = original


def gather_predictions(accelerator: Any, prefix: Any, p_hat: Any, c_hat: Any,
                       local: np.ndarray, n_local: int) -> np.ndarray:
    """``(B * G, 4)`` rows ``(p_hat, c_hat, finished, prefix tokens)`` over every process.

    ``local`` are this process's rows (of its ``n_local``) that hold a prefix of ``prefix``
    (in order); the others get the placeholders ``(0.5, 0, 0, 0)``, which the step leaves out.
    """
    from pairht.torch.distributed import gather_rows

    done = np.asarray(prefix.prefix_done.cpu(), dtype=bool)
    lengths = np.array([len(ids) for ids in prefix.prefix_ids], dtype=np.int64)
    rows = np.zeros((n_local, 4))
    rows[:, 0] = 0.5
    rows[local] = np.stack([np.asarray(p_hat, np.float64), np.asarray(c_hat, np.float64),
                            done, lengths], axis=1)[: len(local)]
    return gather_rows(accelerator, rows)
