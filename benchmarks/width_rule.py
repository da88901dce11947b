r"""How sure must history be before PAIR leaves small-group GRPO? The width rule, measured.

``pair_width`` (:mod:`pairht.audit.width`) runs, per fold of prompts, small-group GRPO or
PAIR's default, from the other folds' exact MSEs. This script compares the plain argmin with
the confident rule (PAIR only when the ``c`` quantile of its bootstrap MSE ratio to GRPO on
the seen prompts is below 1) for ``c`` in 0.75, 0.9, 0.95, on the committed SmolLM2
populations, the synthetic ones (tau 8 and 32) and any population files given, with stored
and hindsight-perfect predictions, at budgets 0.25 and 0.5. Each cell is the rule's exact MSE
over small-group GRPO's with a 95% bootstrap interval over prompts: a rule never worse than
GRPO keeps every cell at or below 1 (interval included); a rule that gains keeps the hindsight
cells well below 1::

    python benchmarks/demo_population.py --task chain_long --out chain_long.npz
    python benchmarks/width_rule.py --population chain_long.npz

With ``--options all`` the choice weighs every prefix option ``pair_width`` weighs
(:data:`pairht.audit.width.PREFIX_OPTIONS`, the level Bonferroni-corrected for them), which is
how :data:`pairht.audit.width.CONFIDENCE` is chosen::

    python benchmarks/width_rule.py --options all --population \
        benchmarks/data/smollm2_steps_tau8.npz benchmarks/data/smollm2_steps_tau32.npz \
        chain.npz chain_long.npz
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
RULES: tuple[float | None, ...] = (None, 0.75, 0.9, 0.95)


def _ratio(x: np.ndarray, ref: np.ndarray, n_boot: int = 2000) -> str:
    take = np.random.default_rng(0).integers(len(x), size=(n_boot, len(x)))
    lo, hi = np.quantile(x[take].mean(axis=1) / ref[take].mean(axis=1), [0.025, 0.975])
    return f"{x.mean() / ref.mean():.3f} [{lo:.3f}, {hi:.3f}]"


def main(argv: list[str] | None = None) -> int:
    from audit_tables import population_files, population_parser, smollm2_populations
    from pairht.audit import AuditConfig, run_audit, synthetic_population, with_predictions
    from pairht.audit.width import PREFIX_OPTIONS, cross_fitted_choice

    ap = population_parser(__doc__)
    ap.add_argument("--options", choices=["pair", "all"], default="pair",
                    help="GRPO against PAIR's default only, or against every prefix option "
                         "pair_width weighs (pairht.audit.width.PREFIX_OPTIONS)")
    args = ap.parse_args(argv)
    opts = ["grpo_small", "pair"] if args.options == "pair" else ["grpo_small",
                                                                   *PREFIX_OPTIONS]
    pops = smollm2_populations()
    pops.update({f"synthetic tau={t}": synthetic_population(48, 16, prefix_tokens=t, rng=0)
                 for t in (8, 32)})
    pops.update(population_files(args.population))
    head = " | ".join("argmin" if c is None else f"confidence {c}" for c in RULES)
    print(f"| population | predictions | budget | PAIR | {head} |")
    print("|---|---|---|---|" + "---|" * len(RULES))
    for name, pop in pops.items():
        for mode in ("stored", "hindsight"):
            p = with_predictions(pop, mode)
            for b in args.budgets:
                res = run_audit(p, rows=opts, n_draws=0,
                                config=AuditConfig(budget_ratio=b, seed=0))
                mse = {k: res.row(k).per_prompt["mse_exact"] for k in opts}
                cells = [_ratio(cross_fitted_choice(mse, opts, confidence=c)[1],
                                mse["grpo_small"])
                         for c in RULES]
                print(f"| {name} | {mode} | {b} | {_ratio(mse['pair'], mse['grpo_small'])} | "
                      + " | ".join(cells) + " |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
