"""Benchmark of the frozen-population audit (plain script; prints, asserts nothing).

One full audit of every registered row on a synthetic population of 64 prompts x G = 16
with 50,000 Monte Carlo draws per prompt (every row at equal expected realised suffix tokens,
budgets solved by bisection), then per-row Monte Carlo throughput (draws per
second, a draw being one prompt's design sample plus its estimate and metrics), and, as a
reference measured in the same run, the throughput of the estimators' own batched
``pair_estimate`` on the same masks (the audit's numba kernels must beat it).

Usage: ``python benchmarks/bench_audit.py [--prompts 64] [--G 16] [--draws 50000]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pairht.audit import (
    ROWS,
    AuditConfig,
    compare_to_baselines,
    run_audit,
    synthetic_population,
    to_markdown,
)
from pairht.audit.exact import _variant_kwargs
from pairht.audit.montecarlo import row_draws


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--G", type=int, default=16)
    ap.add_argument("--draws", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pop = synthetic_population(args.prompts, args.G, rng=args.seed)
    cfg = AuditConfig(seed=args.seed)

    # Compile every numba kernel (ours and the designs') outside the timed run.
    t0 = time.perf_counter()
    run_audit(pop.subset([0]), None, cfg, n_draws=50)
    print(f"warm-up (JIT compile) {time.perf_counter() - t0:.1f} s")

    t0 = time.perf_counter()
    res = run_audit(pop, None, cfg, n_draws=args.draws)
    total = time.perf_counter() - t0
    n_rows = sum(r.ok for r in res.rows)
    print(f"\nfull audit: {n_rows} rows x {args.prompts} prompts x G={args.G} x "
          f"{args.draws} draws: {total:.1f} s")
    print(f"\n{'row':24s} {'draws/s':>12s} {'MC s':>7s} {'design ms/prompt':>17s} "
          f"{'sample us/draw':>15s} {'exact':>22s}")
    for r in res.rows:
        if not r.ok:
            print(f"{r.key:24s} {r.status}")
            continue
        m = r.metrics
        print(f"{r.key:24s} {m['draws_per_s']:12.3e} {m['mc_seconds']:7.2f} "
              f"{m['design_ms']:17.3f} {m['sample_us']:15.3f} {r.exact_method:>22s}")

    # Reference: the estimators' batched pair_estimate on the same masks, PAIR row.
    from pairht.estimators import pair_estimate

    row = ROWS["pair"]
    plan = row.plan(pop, cfg, {})
    L = pop.reduced_scores()
    rng = np.random.default_rng(0)
    n = min(args.draws, 20_000)
    q = 0
    masks = plan.designs[q].sample(rng, size=n)
    kwargs = _variant_kwargs("exact", None, plan.pi[q], plan.joint[q])
    t0 = time.perf_counter()
    pair_estimate(pop.rewards[q], L[q], masks, **kwargs)
    ref = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    row_draws(row, plan, pop, L, q, n, rng)
    ours = n / (time.perf_counter() - t0)
    print(f"\nPAIR row, one prompt, {n} draws: audit kernel {ours:.3e} draws/s (with sampling "
          f"and all metrics) vs batched pair_estimate {ref:.3e} draws/s (estimate only): "
          f"ratio {ours / ref:.1f}x")
    print("\n" + to_markdown(res))
    print("\nSummary: " + compare_to_baselines(res, seed=args.seed).line())


if __name__ == "__main__":
    main()
