"""Run by test_distributed.py under ``torch.distributed.run --nproc_per_node 2``.

G = 4 candidates and 6 rows per process: the global generation batch of 12 rows holds 3
groups and group 1 (global rows 4..7) spans both processes. Each process records the design
draws it holds, the loss mask of its own rows and the rows of its update batch (mode "drop":
drop_unselected_rows=True, else False), for the test to compare.

Arguments: ``OUT STEPS MODE [float64] [subset]`` runs one training run (``subset``: width
"subset" with 2 rows per process, see ``main``); ``--jobs OUT,STEPS,MODE[,float64][,subset]
...`` runs several, one after the other in the same two processes (one process group). Starting
the two processes (importing torch, transformers and TRL in each) takes most of a launch's time,
so the test launches once for all its runs; each run builds a fresh model and trainer, and the
trainer re-seeds every generator from its config, so a run computes what it would alone.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))

from pair_helpers import make_trainer, use_float64_logprobs


def main(out_dir: str, steps: int, drop: bool, float64: bool = False,
         subset: bool = False) -> None:
    # float64: a float64 model, float64 log-probabilities and plain SGD, so that the parameter
    # change is the gradient itself and runs can be compared to float64 rounding
    extra: dict = dict(optim="sgd", learning_rate=1.0) if float64 else {}
    rows = 6
    if subset:
        # width "subset", prefixes for 2 of 4 with 2 rows per process: each group spans both
        # processes, and one holds no prefixed row whenever the subset is the other's half
        extra.update(width="subset", prefix_group_size=2, allocator="pair_dr")
        rows = 2
    trainer = make_trainer(
        out_dir, num_generations=4, per_device_train_batch_size=rows, max_steps=steps,
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
        {"pi": d["pi"].tolist(), "mask": d["mask"].tolist(),
         **({"subset": d["subset"].tolist()} if "subset" in d else {})}
        for d in trainer.draw_history
    ]
    with open(os.path.join(out_dir, f"draws-rank{rank}.json"), "w") as fh:
        json.dump({"draws": draws, "local_loss_rows": masks, "update_rows": rows, "rank": rank,
                   "world": trainer.accelerator.num_processes,
                   "heads_labels": trainer.head_trainer.n_labels,
                   "rng": str(trainer.design_rng.bit_generator.state)}, fh)
    assert np.isfinite(trainer.state.log_history[-1].get("train_loss", 0.0))
    # the next run (if any) starts with both processes done with this one
    trainer.accelerator.wait_for_everyone()


def run_jobs(jobs: list[tuple[str, int, bool, bool, bool]]) -> None:
    """Run ``main(*job)`` for every job, then shut the process group down once."""
    for job in jobs:
        main(*job)
    # Without this the gloo process group is torn down during interpreter finalisation, where
    # its worker threads can abort the process ("terminate called without an active
    # exception", SIGABRT) after training succeeded: seen once in CI. PyTorch documents
    # destroy_process_group() at the end of every trainer process.
    torch.distributed.destroy_process_group()
    # It still aborted once more in CI at interpreter finalisation (the same message, after
    # every job had written its files): leave without finalisation, once everything is
    # written and flushed. A failure before this line still exits non-zero.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _job(spec: list[str]) -> tuple[str, int, bool, bool, bool]:
    return spec[0], int(spec[1]), spec[2] == "drop", "float64" in spec[3:], "subset" in spec[3:]


if __name__ == "__main__":
    if sys.argv[1] == "--jobs":
        run_jobs([_job(spec.split(",")) for spec in sys.argv[2:]])
    else:
        run_jobs([_job(sys.argv[1:])])
