"""Batched PAIR allocation vs the appendix's SLSQP reference, measured in the same run.

Problems as in the paper's setting: B = 128 groups, p ~ Beta(0.7, 0.7), costs log-normal
around 400 tokens, budget half of the full cost, pi_min = 0.08. For each G the script prints
the CPU time of one batched ``allocate`` call over the B problems (``ours``; the ``ratio``
column is for this entry point), of the per-problem ``reference_slsqp`` loop and of B
single-problem ``allocate`` calls in a Python loop (``single``: the same solver, paying the
per-call validation and set-up B times; its ratio is reported next to the batched one), as
medians over ``--repeats`` rounds with the sides alternating within each round (so a change
of the machine's load reaches all of them), the ratios, convergence counts (ours: KKT
residual <= 1e-8; SLSQP: its success flag, and how many of its points also reach KKT
<= 1e-8), the largest relative objective gap ``(ours - slsqp) / slsqp`` over problems
where SLSQP's point is budget-feasible, and the effect of warm-starting from a perturbed
previous solution.

BLAS runs on one thread (``--blas-threads 1``, the default, through threadpoolctl): SLSQP
calls LAPACK on small matrices, and an OpenBLAS pool's spinning threads add CPU time that
depends on the machine's load (at G = 32 on a busy 2-core machine, 2-10 s per batch instead
of 0.17 s), which would inflate the ratio. ``--blas-threads 0`` keeps the libraries' default.

Run:  .venv/bin/python benchmarks/bench_allocation.py [--slsqp-cap-64 32] [--repeats 5]
      [--sizes 16,32]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from pairht.allocation import (
    allocate,
    covariance_term,
    edge_proxy,
    proxy_value,
    reference_slsqp,
)


def problems(B: int, G: int, rng: np.random.Generator):
    p = rng.beta(0.7, 0.7, (B, G))
    c = 400.0 * np.exp(rng.normal(0.0, 0.5, (B, G)))
    return p, c, 0.5 * c.sum(axis=1)


def cpu_time(fn) -> float:
    """CPU time (process_time) of one call: the machine may be shared, and CPU time is far
    less sensitive to other processes than wall time."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def interleaved_medians(fns, repeats: int, spread: bool = False):
    """Median CPU time of each function over ``repeats`` rounds, each round calling every
    function once in turn (so both sides of a ratio see the same load). With ``spread``, also
    the smallest and largest per-round ratio of the second function's time to the first's."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for out, fn in zip(times, fns):
            out.append(cpu_time(fn))
    med = [float(np.median(t)) for t in times]
    if not spread:
        return med
    r = np.asarray(times[1]) / np.asarray(times[0])
    return med, (float(r.min()), float(r.max()))


def feasible(pi, c, budget, pi_min):
    """Shrink a point towards the floor until the budget holds (raises its objective)."""
    cost = np.einsum("bi,bi->b", c, pi)
    fl = pi_min * c.sum(axis=1)
    t = np.where(cost > budget, (budget - fl) / (cost - fl), 1.0)
    return pi_min + t[:, None] * (pi - pi_min)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--slsqp-cap-64", type=int, default=32,
                    help="problems given to SLSQP at G = 64 (it takes seconds each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5,
                    help="interleaved rounds (ours, SLSQP) per G; medians are reported")
    ap.add_argument("--sizes", default="8,16,32,64",
                    help="comma-separated group sizes G to measure")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS threads for both sides (0: the libraries' default)")
    args = ap.parse_args()
    if args.blas_threads > 0:
        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            run(args)
    else:
        run(args)


def run(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    allocate(*problems(2, 4, rng))  # compile the numba kernel outside the timings
    print(f"{'G':>3} {'ours ms':>9} {'slsqp ms':>10} {'n_slsqp':>7} {'ratio':>8} "
          f"{'single ms':>9} {'single rat':>10} {'spread':>13} "
          f"{'ours conv':>9} {'slsqp ok':>8} {'slsqp kkt':>9} {'max gap':>10} "
          f"{'iters':>6} {'warm it':>7} {'warm ms':>8} {'raw gap':>9} "
          f"{'abs ms':>9} {'abs ok':>8} {'abs rat':>8}")
    for G in (int(g) for g in args.sizes.split(",")):
        p, c, budget = problems(args.batch, G, rng)
        res = allocate(p, c, budget)
        ns = args.batch if G < 64 else min(args.batch, args.slsqp_cap_64)
        ref = reference_slsqp(p[:ns], c[:ns], budget[:ns], fallback=False)
        (t_ours, t_ref, t_single), spread = interleaved_medians(
            [lambda p=p, c=c, budget=budget: allocate(p, c, budget),
             lambda p=p, c=c, budget=budget, ns=ns: reference_slsqp(
                 p[:ns], c[:ns], budget[:ns], fallback=False),
             lambda p=p, c=c, budget=budget: [allocate(p[k], c[k], budget[k])
                                              for k in range(len(p))]],
            args.repeats if G < 64 else 1, spread=True)
        t0 = time.process_time()
        ref_abs = reference_slsqp(p[:ns], c[:ns], budget[:ns], fallback=False,
                                  relative_ftol=False)
        t_abs = (time.process_time() - t0) * args.batch / ns
        # Compare per problem: SLSQP time scaled to the full batch when capped.
        t_ref_batch = t_ref * args.batch / ns
        # SLSQP overshoots the budget by up to ~1e-6: compare with its point made feasible.
        a = edge_proxy(p[:ns])
        ref_obj = proxy_value(feasible(ref.pi, c[:ns], budget[:ns], 0.08), a,
                              covariance_term(a))
        gap = (res.objective[:ns] - ref_obj) / ref_obj
        max_gap = np.max(gap[ref.converged]) if ref.converged.any() else np.nan
        raw_gap = np.max((res.objective[:ns] - ref.objective) / ref.objective)
        # Warm start: previous step's probabilities, perturbed by 5% multiplicative noise.
        prev = np.clip(res.pi * np.exp(rng.normal(0.0, 0.05, res.pi.shape)), 0.0, 1.0)
        warm = allocate(p, c, budget, warm_start=prev)
        t_warm = interleaved_medians([lambda p=p, c=c, budget=budget, prev=prev: allocate(
            p, c, budget, warm_start=prev)], args.repeats)[0]
        scale = args.batch / ns  # SLSQP's per-round ratios, scaled like its median
        lo_r, hi_r = spread[0] * scale, spread[1] * scale
        print(f"{G:>3} {1e3 * t_ours:>9.2f} {1e3 * t_ref_batch:>10.1f} {ns:>7d} "
              f"{t_ref_batch / t_ours:>8.1f} {1e3 * t_single:>9.1f} "
              f"{t_ref_batch / t_single:>10.2f} {f'{lo_r:.0f}-{hi_r:.0f}':>13} "
              f"{int(res.converged.sum()):>5d}/{args.batch:<3d} "
              f"{int(ref.converged.sum()):>4d}/{ns:<3d} {int((ref.kkt_residual <= 1e-8).sum()):>5d}"
              f"/{ns:<3d} {max_gap:>10.2e} {res.iterations.mean():>6.2f} "
              f"{warm.iterations.mean():>7.2f} {1e3 * t_warm:>8.2f} {raw_gap:>9.2e} "
              f"{1e3 * t_abs:>9.1f} {int(ref_abs.converged.sum()):>4d}/{ns:<3d} "
              f"{t_abs / t_ours:>8.1f}")
        assert warm.converged.all()
    print(f"times are CPU ms, medians of {args.repeats} interleaved rounds (one round for "
          f"G = 64 and for abs ms), BLAS threads: {args.blas_threads or 'default'};\n"
          "ratio = SLSQP CPU time per batch (extrapolated from n_slsqp problems when capped) / "
          "ours, ours = ONE batched allocate() call over the batch;\n"
          "single ms / single rat = the batch as single-problem allocate() calls in a Python "
          "loop, and SLSQP's time over it;\nspread = smallest-largest per-round ratio "
          "(SLSQP / batched);\n"
          "max gap = max (ours - slsqp)/slsqp over SLSQP-successful problems, SLSQP's point "
          "first shrunk onto the budget (negative: ours is lower);\n"
          "raw gap = the same with SLSQP's own (slightly over-budget) objective;\n"
          "iters / warm it = mean interior-point iterations, cold / warm-started from the "
          "solution perturbed by 5%;\nabs ms / abs ok / abs rat = SLSQP with SciPy's ftol on "
          "the raw (unscaled) objective: time per batch, successes, time ratio to ours.")


if __name__ == "__main__":
    main()
