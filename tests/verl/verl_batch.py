"""Builders of real verl batches for the verl suite: a plan from pairht.step.plan_step, its
rows in a ``DataProto`` (shuffled, as verl may reorder rows), rewards on the response tokens."""

from __future__ import annotations

import numpy as np
import torch
from verl import DataProto

from pairht.verl.advantage import plan_fields_from_extra
from pairht.verl.rows import FIELDS, plan_rows


def rows_of(plan, uids) -> list[dict]:
    """Every group's plan rows, each with its ``uid``."""
    return [{"uid": u, **row} for b, u in enumerate(uids) for row in plan_rows(plan, b)]


def data_proto(rows: list[dict], rewards: np.ndarray, *, length: int = 4, order=None,
               dtype=torch.float64) -> DataProto:
    """A ``DataProto`` of the rows (in ``order``), each reward on its last response token.

    ``rewards`` is ``(B, G)`` in plan order; response lengths vary (1 .. ``length``).
    """
    n = len(rows)
    order = np.arange(n) if order is None else np.asarray(order)
    g = len(rows[0]["pair_joint"])
    lengths = 1 + (np.arange(n) % length)
    mask = torch.zeros(n, length, dtype=torch.int64)
    scores = torch.zeros(n, length, dtype=dtype)
    flat = np.asarray(rewards, dtype=np.float64).reshape(-1)
    for k, src in enumerate(order):
        mask[k, : lengths[k]] = 1
        scores[k, lengths[k] - 1] = float(flat[src])
    non_tensors = {"uid": np.array([rows[s]["uid"] for s in order], dtype=object),
                   **plan_fields_from_extra([rows[s] for s in order])}
    assert sorted(FIELDS) == sorted(set(non_tensors) - {"uid"})
    assert non_tensors["pair_joint"].shape == (n, g)
    return DataProto.from_dict(tensors={"token_level_rewards": scores, "response_mask": mask},
                               non_tensors=non_tensors)


def per_row(data: DataProto, key: str = "advantages") -> np.ndarray:
    """The per-row value of a token field written on the row's response tokens (0 if none)."""
    x = data.batch[key].double()
    m = data.batch["response_mask"].double()
    return (x * m).sum(-1).numpy() / np.maximum(m.sum(-1).numpy(), 1)
