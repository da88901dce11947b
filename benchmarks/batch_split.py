r"""Is one budget for the batch worth it? The room in the split, and what ``pair_batch`` gets.

``pair_batch`` (:class:`pairht.step.allocators.PairBatchAllocator`) spends one suffix budget
on the whole batch: it splits it across prompts by PAIR's value curves, then runs PAIR's
default in each prompt. This script answers two questions per population and budget, with
exact MSEs (no Monte Carlo):

1. **How much room is there in the split?** The fixed-size uniform design (``srswor``) is
   audited at a grid of budgets (0.10, 0.15, ..., 1.0 of each prompt's suffix tokens), giving
   every prompt's *true* exact-MSE curve; the best split of the same total suffix tokens over
   those curves (a Lagrangian sweep over the grid, so the split is restricted to the grid) is
   compared with every prompt at the same share. ``room`` is the ratio: what a split that knew
   every prompt's variance would buy. It comes from prompts whose candidates all agree (their
   MSE is 0 at any budget) or nearly so.
2. **What does ``pair_batch`` get** from the heads' predictions (``stored``), from prompt-mean
   predictions (``prompt_mean``: the prompt's difficulty only) and from hindsight-perfect ones
   (``hindsight``), next to ``pair`` (each prompt at its own budget)? Each cell is the row's
   mean exact MSE over small-group GRPO's at the same generated tokens (the audit's best
   baseline on these populations).

::

    python benchmarks/batch_split.py                        # synthetic + SmolLM2 (both styles)
    python benchmarks/batch_split.py --extra chain_long.npz  # + a population file

``chain_long.npz`` comes from ``python benchmarks/demo_population.py --task chain_long --out
chain_long.npz`` (docs/audit.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
GRID = np.round(np.arange(0.10, 1.0001, 0.05), 4)


def split_room(pop, budget: float) -> float:
    """Best split of ``budget`` over the prompts' true SRSWOR exact-MSE curves (on ``GRID``)
    over every prompt at ``budget`` (itself on the grid)."""
    from pairht.audit import AuditConfig, run_audit
    from pairht.audit.base import suffix_costs

    curves = np.stack([run_audit(pop, rows=["srswor"], n_draws=0,
                                 config=AuditConfig(budget_ratio=float(b))
                                 ).row("srswor").per_prompt["mse_exact"] for b in GRID], axis=1)
    cost = suffix_costs(pop).sum(axis=1)
    equal = curves[:, int(np.argmin(np.abs(GRID - budget)))].mean()
    best = equal
    for lam in np.geomspace(1e-10, 1e4, 3000):  # each lambda: the grid point per prompt
        pick = np.argmin(curves + lam * cost[:, None] * GRID[None, :], axis=1)
        if (GRID[pick] * cost).sum() <= budget * cost.sum() * (1 + 1e-12):
            best = min(best, curves[np.arange(len(cost)), pick].mean())
    return float(best / equal) if equal > 0 else float("nan")


def rows_vs_grpo(pop, budget: float) -> dict[str, float]:
    """``pair`` and ``pair_batch`` under three predictions, over ``grpo_small``'s exact MSE."""
    from pairht.audit import AuditConfig, run_audit, with_predictions

    cfg = AuditConfig(budget_ratio=budget)
    grpo = run_audit(pop, rows=["grpo_small"], config=cfg, n_draws=0).row("grpo_small")
    ref = float(grpo.per_prompt["mse_exact"].mean())
    out = {}
    for mode in ("stored", "prompt_mean", "hindsight"):
        res = run_audit(with_predictions(pop, mode), rows=["pair", "pair_batch"], config=cfg,
                        n_draws=0)
        for key in ("pair", "pair_batch"):
            out[f"{key}@{mode}"] = float(res.row(key).per_prompt["mse_exact"].mean()) / ref
    return out


def main(argv: list[str] | None = None) -> int:
    from pairht.audit import load_population, synthetic_population

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extra", nargs="*", default=[], help="more population files (.npz)")
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5])
    args = ap.parse_args(argv)
    pops = {"synthetic tau=8 (48 x 16)": synthetic_population(48, 16, prefix_tokens=8, rng=0),
            "SmolLM2 short, tau=8": load_population(os.path.join(DATA,
                                                                 "smollm2_arith_tau8.npz")),
            "SmolLM2 step by step, tau=8": load_population(os.path.join(DATA,
                                                                        "smollm2_steps_tau8.npz"))}
    for path in args.extra:
        pops[os.path.basename(path)] = load_population(path)
    t0 = time.perf_counter()
    cols = ["pair@stored", "pair_batch@stored", "pair@prompt_mean", "pair_batch@prompt_mean",
            "pair@hindsight", "pair_batch@hindsight"]
    print("| population | budget | room in the split (SRSWOR) | " + " | ".join(
        f"`{c}`" for c in cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    for name, pop in pops.items():
        for b in args.budgets:
            r = rows_vs_grpo(pop, b)
            print(f"| {name} | {b} | {split_room(pop, b):.3f} | "
                  + " | ".join(f"{r[c]:.3f}" for c in cols) + " |", flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
