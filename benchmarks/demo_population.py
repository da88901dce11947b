r"""Does PAIR pay on the demo's own task? The audit on the chain task's policy population.

``make demo`` trains PAIR and GRPO on a chain-arithmetic task (:mod:`pairht.demo.chain`; by
default the long one, ``chain_long``). This
script asks the frozen-population audit the question the training run cannot answer with
intervals: at equal generated tokens, how does PAIR's gradient compare with the baselines' on
that task, with the heads the trainer has after ``--train-steps`` PAIR steps, and with
hindsight-perfect heads? It

1. warm-starts the demo's tiny Llama (the demo's cache), trains it ``--train-steps`` steps with
   :class:`pairht.trl.PairGRPOTrainer` in the demo's setting (``G = 8`` or ``--group-size``,
   the task's ``tau`` and prompts per step, budget 0.5) so the prefix heads have labels,
2. writes a population of ``--prompts`` fresh training prompts x ``G`` candidates generated to
   the end (:func:`pairht.trl.audit_mode.collect_population`: rewards, realised suffix tokens,
   the heads' predictions at the checkpoint, autograd scores on the final norm weight),
3. runs the audit at budgets 0.25 and 0.5 with exact metrics (the rows of
   ``benchmarks/audit_tables.py``: every baseline, PAIR's default, PAIR deciding its width, and
   PAIR with hindsight-perfect and prompt-mean predictions) and prints the markdown table.

::

    python benchmarks/demo_population.py                 # chain_long: ~4 CPU-minutes, cached
    python benchmarks/demo_population.py --seed 1 --prompts 32
    python benchmarks/demo_population.py --task chain        # the short chains
    python benchmarks/demo_population.py --task chain_early --group-size 16 --tau 6
    python benchmarks/demo_population.py --out chain_long.npz      # keep the population
    python benchmarks/demo_population.py --population chain_long.npz --rows default \
        default@hindsight default@prompt_mean      # audit a kept one again, only these rows
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def build_population(seed: int, prompts: int, train_steps: int, path: str,
                     task_name: str = "chain", group_size: int = 8, tau: int | None = None):
    """Train PAIR ``train_steps`` steps on a chain task, then collect a population
    (``group_size`` candidates per prompt; ``tau``: the task's demo default when None)."""
    from pairht.demo import toy
    from pairht.demo.demo import single_blas_thread, trainer_kwargs
    from pairht.demo.tasks import TASK_DEFAULTS, get_task
    from pairht.demo.warm_cache import warm_model
    from pairht.trl import PairGRPOConfig, PairGRPOTrainer
    from pairht.trl.audit_mode import collect_population

    task, d = get_task(task_name), TASK_DEFAULTS[task_name]
    tokenizer = toy.make_tokenizer(task)
    base = warm_model(task, seed, int(d["warmup_steps"]),
                      toy.ToyModelConfig(max_positions=int(d["max_positions"])))
    G, per_step = group_size, int(d["prompts_per_step"])
    dataset = task.dataset(max(train_steps, 1) * per_step + prompts, rng=seed, split="train")
    with tempfile.TemporaryDirectory() as tmp, single_blas_thread():
        kwargs = trainer_kwargs(Path(tmp), steps=max(train_steps, 1), seed=seed, num_generations=G,
                              prompts_per_step=per_step,
                              learning_rate=float(d["learning_rate"]),
                              max_completion_length=task.max_new_tokens)
        cfg = PairGRPOConfig(**kwargs, mode="exact",
                             tau=int(d["tau"]) if tau is None else tau, snap_window=8,
                             budget_ratio=0.5, design_seed=seed,
                             width="prefixes")  # the heads learn from every prefix
        trainer = PairGRPOTrainer(model=copy.deepcopy(base), reward_funcs=task.reward,
                                  args=cfg, train_dataset=dataset, processing_class=tokenizer)
        if train_steps > 0:
            trainer.train()
        # Prompts the training stream did not reach first (the last rows of the dataset).
        examples = [dict(dataset[len(dataset) - 1 - i]) for i in range(prompts)]
        trainer.model.eval()
        return collect_population(trainer, examples, path)


def main(argv: list[str] | None = None) -> int:
    from pairht.demo.tasks import DEFAULT_TASK, TASKS

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--task", default=DEFAULT_TASK, choices=sorted(TASKS))
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--group-size", type=int, default=8, help="candidates per prompt (G)")
    ap.add_argument("--tau", type=int, default=None, help="default: the demo's for the task")
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--out", default=None, help="also keep the population here (.npz)")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--population", default=None,
                    help="audit this population (.npz, from --out) instead of building one "
                         "(the build options are then ignored)")
    ap.add_argument("--rows", nargs="+", default=None,
                    help="only these rows (benchmarks/audit_tables.py --rows)")
    args = ap.parse_args(argv)
    import numpy as np

    from audit_tables import audit_cell, bias_share, parse_rows, print_table
    from pairht.audit import load_population

    parse_rows(args.rows)  # a bad name fails before the training
    t0 = time.perf_counter()
    if args.population is not None:
        pop = load_population(args.population)
    else:
        path = args.out or os.path.join(tempfile.mkdtemp(), "chain_population.npz")
        pop = build_population(args.seed, args.prompts, args.train_steps, path, args.task,
                               args.group_size, args.tau)
    finished = np.zeros(pop.rewards.shape, bool) if pop.finished is None else pop.finished
    fin = float(finished.mean())
    whole = pop.prefix_len + np.where(finished, 0, pop.costs)
    built = (f"population {args.population}" if args.population is not None else
             f"Task {args.task}, seed {args.seed}, after {args.train_steps} PAIR steps")
    print(f"\n### {built}: {pop.n_prompts} prompts x G={pop.group_size}\n")
    print(f"* success rate {pop.rewards.mean():.3f}; mean completion {whole.mean():.1f} "
          f"tokens, prefix {pop.prefix_len.mean():.1f}; finished at the checkpoint "
          f"{fin:.3f}\n")
    cols = {}
    foot = []
    for b in args.budgets:
        cells, best, best_mse = audit_cell(pop, b, seed=args.seed, reference="all",
                                           n_boot=args.n_boot, rows=args.rows)
        cols[b] = cells
        tail = "" if args.rows is not None and "adaptive_unweighted" not in args.rows else (
            "; adaptive_unweighted bias share of MSE "
            f"{100 * bias_share(pop, 'adaptive_unweighted', b, args.seed):.1f}%")
        foot.append(f"budget={b}: best baseline {best} (exact MSE {best_mse:.4g}){tail}")
    print_table({f"b={b}": c for b, c in cols.items()}, foot)
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
