r"""What shrinking the heads' predictions costs: by the reliability slope or by the Brier skill.

The trainer pulls the heads' predictions toward their group mean by a held-out factor
(``PairGRPOConfig.shrink_by``). This script measures, on the synthetic populations (oracle,
noisy and miscalibrated heads), the committed SmolLM2 populations and any population file
given, the two factors for success and for cost
(:func:`pairht.audit.predictions.shrinkage_measures`) and the exact
MSE of PAIR's default over SRSWOR's at equal realised cost, with the stored predictions and
with the stored predictions shrunk by each factor (``with_predictions(pop, "shrunk_slope")``,
``"shrunk_skill"``). Prints the markdown table of docs/trl.md::

    python benchmarks/shrinkage.py
    python benchmarks/demo_population.py --task chain_long --out chain_long.npz
    python benchmarks/shrinkage.py --population chain_long.npz
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(argv: list[str] | None = None) -> int:
    from audit_tables import population_files, population_parser, smollm2_populations
    from pairht.audit import (
        AuditConfig,
        compare_to_baselines,
        run_audit,
        synthetic_population,
        with_predictions,
    )
    from pairht.audit.predictions import shrinkage_measures

    ap = population_parser(__doc__)
    ap.add_argument("--no-builtin", action="store_true",
                    help="only the population files given")
    args = ap.parse_args(argv)
    pops = {}
    if not args.no_builtin:
        pops.update({f"synthetic, {cal} heads": synthetic_population(
            48, 16, prefix_tokens=8, calibration=cal, rng=0)
            for cal in ("oracle", "noisy", "miscalibrated")})
        pops.update(smollm2_populations())
    pops.update(population_files(args.population))
    for name, pop in pops.items():
        m = shrinkage_measures(pop)
        for b in args.budgets:
            cfg = AuditConfig(budget_ratio=b, seed=0)
            cells = []
            for mode in ("stored", "shrunk_slope", "shrunk_skill"):
                res = run_audit(with_predictions(pop, mode), rows=["srswor", "pair"],
                                config=cfg, n_draws=0)
                c = compare_to_baselines(res, "pair", baselines=("srswor",), seed=0)
                cells.append(f"{c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}]")
            factors = " | ".join(f"{m[f'{by}_{what}']:.2f}" for what in ("success", "cost")
                                 for by in ("slope", "skill"))
            print(f"| {name} | {factors} | {b} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
