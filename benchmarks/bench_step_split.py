r"""PAIR's step against GRPO's, per phase, in CPU time: the demo's setting in one process.

The long chains (``pairht.demo.chain``, the demo's warm-started policy, 16 prompts x G = 8,
``tau = 8``, budget ratio 0.5, exact mode) with both decoders of each arm: GRPO
(``pairht.demo.grpo.RowDropGRPOTrainer``, finished rows leave the batch; ``grpo_generate``:
``trl.GRPOTrainer``'s own ``generate``) and PAIR (``PairGRPOTrainer``; ``pair_generate``: its
backend with ``drop_finished_rows=False``). Every round runs each arm from the same warm model
and seed (the order rotated every round); per-phase *process CPU time* (the trainer's
``StepTimer`` with ``time.process_time``, torch and BLAS at one thread), the first step of each
run skipped, so a loaded machine's waiting does not count. Prints each arm's step and tokens
per step relative to ``grpo``'s of the same round, and the mean split::

    python benchmarks/bench_step_split.py                 # 3 rounds of 8 steps
    python benchmarks/bench_step_split.py --rounds 2 --steps 5

(The phase-1 features forward is timed with wall-clock inside the trainer; ``prefix +
features`` is the CPU time of phase 1 up to that difference.)
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import tempfile
import time

ARMS = ("grpo", "pair", "grpo_generate", "pair_generate")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arms", default=",".join(ARMS))
    args = ap.parse_args()
    arms = args.arms.split(",")

    import numpy as np
    import torch
    from transformers import TrainerCallback

    from pairht.demo import toy
    from pairht.demo.chain import CHAIN_LONG_TASK as task
    from pairht.demo.demo import (
        _DrawMeter,
        _TokenMeter,
        quiet_trainer,
        single_blas_thread,
        trainer_kwargs,
        warm_kernels,
    )
    from pairht.demo.grpo import RowDropGRPOTrainer
    from pairht.demo.warm_cache import warm_model
    from pairht.trl import PairGRPOConfig, PairGRPOTrainer
    from pairht.trl.timing import PHASES, instrument
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    G, P = 8, 16
    base = warm_model(task, 0, 1500, toy.ToyModelConfig(max_positions=160))
    tok = toy.make_tokenizer(task)
    warm_kernels()
    splits: dict[str, list[dict[str, float]]] = {a: [] for a in arms}
    tokens: dict[str, list[float]] = {a: [] for a in arms}

    class Poll(TrainerCallback):
        def __init__(self, meter):
            self.meter = meter

        def on_step_end(self, *a, **k):
            self.meter.poll()

    with single_blas_thread(), tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for arm in arms[r % len(arms):] + arms[: r % len(arms)]:
                kw = trainer_kwargs(pathlib.Path(tmp) / arm, steps=args.steps, seed=r,
                                  num_generations=G, prompts_per_step=P, learning_rate=1e-4,
                                  max_completion_length=task.max_new_tokens)
                data = task.dataset(args.steps * P, rng=r, split="train")
                model = copy.deepcopy(base)
                if arm.startswith("grpo"):
                    meter = _TokenMeter(task.reward)
                    cls = RowDropGRPOTrainer if arm == "grpo" else GRPOTrainer
                    trainer = cls(model=model, reward_funcs=meter, args=GRPOConfig(**kw),
                                  train_dataset=data, processing_class=tok)
                    timer = instrument(trainer)
                else:
                    draws = _DrawMeter()
                    cfg = PairGRPOConfig(**kw, mode="exact", tau=8, snap_window=8,
                                         budget_ratio=0.5, design_seed=r, width="prefixes")
                    trainer = PairGRPOTrainer(model=model, reward_funcs=task.reward, args=cfg,
                                              train_dataset=data, processing_class=tok)
                    draws.trainer = trainer
                    trainer.add_callback(Poll(draws))
                    trainer.generation_backend.drop_finished_rows = arm == "pair"
                    timer = trainer.step_timer
                quiet_trainer(trainer)
                timer.clock = time.process_time
                torch.manual_seed(r)
                trainer.train()
                splits[arm].append(timer.mean(skip=1))
                n = meter.tokens if arm.startswith("grpo") else sum(draws.poll())
                tokens[arm].append(n / args.steps)
                print(f"round {r} {arm}: step {splits[arm][-1]['total']:.3f} CPU s, "
                      f"{tokens[arm][-1]:.0f} tokens per step", flush=True)
    ref = np.array([s["total"] for s in splits[arms[0]]])
    ref_tok = np.array(tokens[arms[0]])
    print(f"\n| arm | step / {arms[0]} per round | mean | tokens / {arms[0]} |")
    print("|---|---|---|---|")
    for arm in arms:
        t = np.array([s["total"] for s in splits[arm]])
        k = np.array(tokens[arm]) / ref_tok
        print(f"| {arm} | {', '.join(f'{x:.2f}' for x in t / ref)} | {np.mean(t / ref):.3f} | "
              f"{np.mean(k):.3f} |")
    print("\nCPU ms per step, mean over rounds:\n")
    print("| phase | " + " | ".join(arms) + " |")
    print("|---|" + "---|" * len(arms))
    for ph in (*PHASES, "total"):
        row = [1000 * np.mean([s[ph] for s in splits[a]]) for a in arms]
        if any(abs(x) >= 0.5 for x in row):
            print(f"| {ph} | " + " | ".join(f"{x:.0f}" for x in row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
