"""Run by test_distributed.py under ``accelerate launch --num_processes 2 --cpu``.

G = 4 candidates and 6 rows per process: the global generation batch of 12 rows holds 3
groups and group 1 (global rows 4..7) spans both processes. Each process records the design
draws it holds and the loss mask of its own rows, for the test to compare.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from pair_helpers import make_trainer


def main(out_dir: str, steps: int) -> None:
    trainer = make_trainer(
        out_dir, num_generations=4, per_device_train_batch_size=6, max_steps=steps,
        n_prompts=12,
    )
    masks = []
    original = trainer._generate_and_score_completions

    def record(inputs):
        out = original(inputs)
        masks.append((out["completion_mask"].sum(-1) > 0).tolist())
        return out

    trainer._generate_and_score_completions = record
    trainer.train()
    rank = trainer.accelerator.process_index
    draws = [
        {"pi": d["pi"].tolist(), "mask": d["mask"].tolist()} for d in trainer.draw_history
    ]
    with open(os.path.join(out_dir, f"draws-rank{rank}.json"), "w") as fh:
        json.dump({"draws": draws, "local_loss_rows": masks, "rank": rank,
                   "world": trainer.accelerator.num_processes,
                   "heads_labels": trainer.head_trainer.n_labels,
                   "rng": str(trainer.design_rng.bit_generator.state)}, fh)
    assert np.isfinite(trainer.state.log_history[-1].get("train_loss", 0.0))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
