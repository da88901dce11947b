"""Run by test_distributed.py under ``accelerate launch --num_processes 2 --cpu``.

G = 4 candidates and 6 rows per process: the global generation batch of 12 rows holds 3
groups and group 1 (global rows 4..7) spans both processes. Each process records the design
draws it holds, the loss mask of its own rows and the rows of its update batch (third argument
"drop": drop_unselected_rows=True, else False), for the test to compare.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))

from pair_helpers import make_trainer, use_float64_logprobs


def main(out_dir: str, steps: int, drop: bool, float64: bool = False) -> None:
    # float64: a float64 model, float64 log-probabilities and plain SGD, so that the parameter
    # change is the gradient itself and runs can be compared to float64 rounding
    extra = dict(optim="sgd", learning_rate=1.0) if float64 else {}
    trainer = make_trainer(
        out_dir, num_generations=4, per_device_train_batch_size=6, max_steps=steps,
        n_prompts=12, drop_unselected_rows=drop, double=float64, **extra,
    )
    if float64:
        use_float64_logprobs(trainer)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    masks, rows = [], []
    original = trainer._generate_and_score_completions

    def record(inputs):
        out = original(inputs)
        masks.append((out["completion_mask"].sum(-1) > 0).tolist())
        rows.append(int(out["prompt_ids"].shape[0]))
        return out

    trainer._generate_and_score_completions = record
    trainer.train()
    rank = trainer.accelerator.process_index
    delta = np.concatenate([
        (p.detach() - b).double().reshape(-1).numpy()
        for p, b in zip(trainer.model.parameters(), before)
    ])
    np.save(os.path.join(out_dir, f"delta-rank{rank}.npy"), delta)
    draws = [
        {"pi": d["pi"].tolist(), "mask": d["mask"].tolist()} for d in trainer.draw_history
    ]
    with open(os.path.join(out_dir, f"draws-rank{rank}.json"), "w") as fh:
        json.dump({"draws": draws, "local_loss_rows": masks, "update_rows": rows, "rank": rank,
                   "world": trainer.accelerator.num_processes,
                   "heads_labels": trainer.head_trainer.n_labels,
                   "rng": str(trainer.design_rng.bit_generator.state)}, fh)
    assert np.isfinite(trainer.state.log_history[-1].get("train_loss", 0.0))
    # Without this the gloo process group is torn down during interpreter finalisation, where
    # its worker threads can abort the process ("terminate called without an active
    # exception", SIGABRT) after training succeeded: seen once in CI. PyTorch documents
    # destroy_process_group() at the end of every trainer process.
    trainer.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "drop", "float64" in sys.argv[4:])
