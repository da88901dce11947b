r"""PAIR at every prefix width between small-group GRPO and full width, exactly.

For a stored population (e.g. ``python benchmarks/demo_population.py --out chain.npz``) and a
budget, prints PAIR's exact MSE at each width ``w`` (a uniform ``w``-subset gets prefixes, PAIR's
default runs among them at the budget that spends what full-width PAIR spends;
:func:`pairht.audit.advice.two_stage_mse`, by enumerating the ``C(G, w)`` subsets) relative to
small-group GRPO at the same generated tokens, with the stored and the hindsight-perfect
predictions::

    python benchmarks/demo_population.py --out chain.npz
    python benchmarks/audit_widths.py chain.npz --budget 0.5      # widths G, G-1, ... > G'

``--row pair_dr`` runs the difference estimator among the ``w`` candidates instead (closed
form under its Bernoulli design, so ``G = 16`` takes seconds; docs/audit.md, "Prefixes for a
subset only")::

    python benchmarks/audit_widths.py benchmarks/data/smollm2_arith_tau32.npz --budget 0.25 \
        --row pair_dr
"""

from __future__ import annotations

import argparse
import math


def main(argv: list[str] | None = None) -> int:
    from pairht.audit import AuditConfig, load_population, run_audit, with_predictions
    from pairht.audit.advice import two_stage_mse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("population")
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--widths", default=None, help="comma-separated; default every width "
                                                   "from G down to the first above G'")
    ap.add_argument("--max-subsets", type=int, default=5000)
    ap.add_argument("--row", default="pair", help="the audit row run among the w candidates "
                                                  "(e.g. pair_dr)")
    args = ap.parse_args(argv)
    pop = load_population(args.population)
    cfg = AuditConfig(budget_ratio=args.budget)
    print("| predictions | width | suffix budget b_w | exact MSE / GRPO's |")
    print("|---|---|---|---|")
    for mode in ("stored", "hindsight"):
        p = with_predictions(pop, mode)
        grpo = run_audit(p, rows=["grpo_small"], config=cfg, n_draws=0).row("grpo_small")
        ref = float(grpo.per_prompt["mse_exact"].mean())
        g_prime = grpo.metrics["budget_scale"] * p.group_size
        widths = ([int(w) for w in args.widths.split(",")] if args.widths else
                  list(range(p.group_size, math.floor(g_prime), -1)))
        for w in widths:
            try:
                mse, b_w = two_stage_mse(p, args.budget, w, row=args.row,
                                         max_subsets=args.max_subsets)
            except ValueError as exc:
                print(f"| {mode} | {w} | n/a | n/a ({exc}) |")
                continue
            print(f"| {mode} | {w} | {b_w:.3f} | {mse.mean() / ref:.3f} |")
        print(f"| {mode} | G' = {g_prime:.2f} (small-group GRPO) | 1 | 1.000 |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
