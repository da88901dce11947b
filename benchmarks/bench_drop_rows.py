"""Cost of the update with and without the unselected rows (``drop_unselected_rows``).

A/B in one process on the chain task (``pairht.demo.chain``, the demo's warm-started policy,
G = 8, 8 prompts per step, tau = 8, budget ratio 0.5, exact mode): rounds alternate masked and
dropped (the order swapped every round), each a fresh trainer from the same warm model and
seed; per-phase *process CPU time* (``StepTimer(clock=time.process_time)``, torch and BLAS at
one thread), the first step of each run skipped. The per-round ratios are the evidence::

    python benchmarks/bench_drop_rows.py                       # pair, 3 rounds of 12 steps
    python benchmarks/bench_drop_rows.py --allocator dppo --rounds 6

(docs/trl.md, "Cost of the update").
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import tempfile
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--allocator", default="pair")
    args = ap.parse_args()

    from pairht.demo import toy
    from pairht.demo.chain import CHAIN_TASK
    from pairht.demo.demo import quiet_trainer, single_blas_thread, trainer_kwargs, warm_kernels
    from pairht.demo.warm_cache import warm_model
    from pairht.trl import PairGRPOConfig, PairGRPOTrainer

    torch.set_num_threads(1)
    task, G, P = CHAIN_TASK, 8, 8
    base = warm_model(task, 0, 600, toy.ToyModelConfig(max_positions=96))
    tok = toy.make_tokenizer(task)
    warm_kernels()
    res: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with single_blas_thread(), tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for drop in ((False, True) if r % 2 == 0 else (True, False)):
                kw = trainer_kwargs(pathlib.Path(tmp) / f"out{int(drop)}", steps=args.steps,
                                  seed=r, num_generations=G, prompts_per_step=P,
                                  learning_rate=1e-4, max_completion_length=task.max_new_tokens)
                cfg = PairGRPOConfig(**kw, mode="exact", tau=8, snap_window=8, budget_ratio=0.5,
                                     design_seed=r, drop_unselected_rows=drop,
                                     allocator=args.allocator, width="prefixes")
                trainer = PairGRPOTrainer(model=copy.deepcopy(base), reward_funcs=task.reward,
                                          args=cfg, train_dataset=task.dataset(
                                              args.steps * P, rng=r, split="train"),
                                          processing_class=tok)
                quiet_trainer(trainer)
                trainer.step_timer.clock = time.process_time
                torch.manual_seed(r)
                trainer.train()
                split = trainer.step_timer.mean(skip=1)
                res[drop].append(split)
                share = split["update"] / split["total"]
                print(f"round {r} drop={drop}: update {split['update']:.4f} s, step "
                      f"{split['total']:.4f} s, update share {share:.3f}", flush=True)
    for drop in (False, True):
        u = np.array([s["update"] for s in res[drop]])
        t = np.array([s["total"] for s in res[drop]])
        print(f"drop={drop}: update CPU s/step {u.mean():.4f}, step {t.mean():.4f}, "
              f"update share {np.mean(u / t):.3f}")
    ua, ub = (np.array([s["update"] for s in res[d]]) for d in (False, True))
    ta, tb = (np.array([s["total"] for s in res[d]]) for d in (False, True))
    print(f"update ratio dropped/masked per round: {np.round(ub / ua, 3).tolist()}, "
          f"mean {np.mean(ub / ua):.3f}")
    print(f"step ratio dropped/masked per round: {np.round(tb / ta, 3).tolist()}, "
          f"mean {np.mean(tb / ta):.3f}")


if __name__ == "__main__":
    main()
