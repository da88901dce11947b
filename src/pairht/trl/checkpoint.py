"""PAIR's state inside a TRL checkpoint: the design generator, the heads (with their replay
window), the warm start, the pending head labels and the prompt history."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

__all__ = ["PAIR_STATE_FILE", "load_pair_state", "pair_state", "read_pair_state"]

#: File holding the design RNG, the heads and the warm start inside a checkpoint folder.
PAIR_STATE_FILE = "pair_state.pt"


def pair_state(trainer: Any) -> dict[str, Any]:
    """Design RNG state, heads (with replay window), warm start and pending labels."""
    return {
        "design_rng": json.dumps(trainer.design_rng.bit_generator.state),
        "heads": trainer.head_trainer.state_dict(),
        "warm_start": trainer._warm_start,
        "pending_labels": trainer._pending_labels,
        "prompt_history": trainer.prompt_history.state_dict(),
    }


def load_pair_state(trainer: Any, state: dict[str, Any]) -> None:
    """Inverse of :func:`pair_state`."""
    trainer.design_rng.bit_generator.state = json.loads(state["design_rng"])
    trainer.head_trainer.load_state_dict(state["heads"])
    trainer._warm_start = state["warm_start"]
    trainer._pending_labels = state["pending_labels"]
    if "prompt_history" in state:  # checkpoints written before the history existed
        trainer.prompt_history.load_state_dict(state["prompt_history"])


def read_pair_state(checkpoint: str) -> dict[str, Any]:
    """The state saved in ``checkpoint``; ``ValueError`` if it holds none."""
    path = os.path.join(checkpoint, PAIR_STATE_FILE)
    if not os.path.exists(path):
        raise ValueError(
            f"checkpoint {checkpoint!r} has no {PAIR_STATE_FILE}; it was not written by "
            f"PairGRPOTrainer, so the design RNG and heads cannot be restored"
        )
    # Our own file (numpy arrays, the heads' replay window): not a weights-only payload.
    return torch.load(path, map_location="cpu", weights_only=False)  # type: ignore[no-any-return]
