"""The one TRL-specific collective a PAIR step needs: scoring each process's own rows."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


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
