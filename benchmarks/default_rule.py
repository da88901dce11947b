r"""How PAIR's default was chosen: its options, confidence and margin, measured on populations.

PAIR's default (the audit row ``default``, the TRL trainer's ``width="auto"``) runs, per fold
of prompts, small-group GRPO, ``pair_dr_narrow`` or ``pair_dr``
(:data:`pairht.audit.width.DEFAULT_OPTIONS`), a prefix option only when history puts it
confidently (:data:`~pairht.audit.width.DEFAULT_CONFIDENCE`) below GRPO by the margin
:data:`~pairht.audit.width.DEFAULT_MAX_RATIO`. This script prints, per population, prediction
mode and budget, the exact MSE ratio to the best baseline (95% bootstrap interval over
prompts) of each option and of the choice at every (confidence, margin) of a grid, and the
cells where a rule fails "at or below the best baseline, interval's upper end at or below
1.05", under two cross-fittings: ``k4`` (the audit's four folds) and ``loo`` (each prompt
decided from all the others)::

    python benchmarks/default_rule.py                       # the tuning populations
    python benchmarks/default_rule.py --population chain_long.npz paper.npz --no-tuning

The tuning populations are the committed SmolLM2 ones (short answers and step by step, tau 8
and 32; stored, hindsight and prompt-mean predictions) and the synthetic ones (tau 8 and 32);
any population given with ``--population`` is added (held-out ones: the long chains, the
paper regime of ``benchmarks/paper_regime.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

#: (confidence, margin) pairs weighed; the default is one of them.
GRID = tuple((c, m) for c in (0.5, 0.75, 0.9) for m in (1.0, 0.9, 0.85, 0.8))


def populations(extra: list[str], tuning: bool) -> dict[str, object]:
    from audit_tables import DATA, STYLES
    from pairht.audit import load_population, synthetic_population

    pops: dict[str, object] = {}
    if tuning:
        for style, stem in STYLES.items():
            for tau in (8, 32):
                pops[f"SmolLM2 {style} tau={tau}"] = load_population(
                    os.path.join(DATA, f"{stem}_tau{tau}.npz"))
        for tau in (8, 32):
            pops[f"synthetic tau={tau}"] = synthetic_population(48, 16, prefix_tokens=tau,
                                                                rng=0)
    for path in extra:
        pops[os.path.basename(path)] = load_population(path)
    return pops


def main(argv: list[str] | None = None) -> int:
    from pairht.audit import AuditConfig, run_audit, with_predictions
    from pairht.audit.rows import BASELINE_ROWS
    from pairht.audit.summary import ratio_interval as _ratio
    from pairht.audit.width import (
        DEFAULT_CONFIDENCE,
        DEFAULT_MAX_RATIO,
        DEFAULT_OPTIONS,
        cross_fitted_choice,
    )

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--population", nargs="*", default=[], help="more population files")
    ap.add_argument("--no-tuning", action="store_true", help="only the populations given")
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--predictions", nargs="+", default=["stored", "hindsight", "prompt_mean"])
    args = ap.parse_args(argv)
    rows = list(dict.fromkeys([*BASELINE_ROWS, *DEFAULT_OPTIONS]))
    fails: dict[tuple[float, float], list[str]] = {r: [] for r in GRID}
    print(f"default: confidence {DEFAULT_CONFIDENCE}, margin {DEFAULT_MAX_RATIO}\n")
    print("| population | predictions | budget | pair_dr_narrow | pair_dr | default (k4) | "
          "default (loo) |")
    print("|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for name, pop in populations(args.population, not args.no_tuning).items():
        for mode in args.predictions:
            p = with_predictions(pop, mode)  # type: ignore[arg-type]
            for b in args.budgets:
                res = run_audit(p, rows=rows, n_draws=0,
                                config=AuditConfig(budget_ratio=b, seed=0))
                mse = {k: res.row(k).per_prompt["mse_exact"] for k in rows}
                best = min(BASELINE_ROWS, key=lambda k: float(mse[k].mean()))
                ref = mse[best]
                P = ref.size

                def rule(conf: float, margin: float, folds: int,
                         mse: dict[str, np.ndarray] = mse) -> np.ndarray:
                    return cross_fitted_choice(mse, DEFAULT_OPTIONS, n_folds=folds,
                                               confidence=conf, max_ratio=margin)[1]

                for r in GRID:
                    for scheme, folds in (("k4", 4), ("loo", P)):
                        v, _lo, hi = _ratio(rule(*r, folds), ref)
                        if v > 1.0 + 1e-9 or hi > 1.05:
                            fails[r].append(f"{name} {mode} b={b} {scheme}: {v:.3f} "
                                            f"[.., {hi:.3f}]")
                cells = ["{:.3f} [{:.3f}, {:.3f}]".format(*_ratio(mse[k], ref))
                         for k in DEFAULT_OPTIONS[1:]]
                cells += ["{:.3f} [{:.3f}, {:.3f}]".format(*_ratio(
                    rule(DEFAULT_CONFIDENCE, DEFAULT_MAX_RATIO, folds), ref))
                    for folds in (4, P)]
                print(f"| {name} | {mode} | {b} | " + " | ".join(cells) + " |", flush=True)
    print("\nCells where a (confidence, margin) is above the best baseline or its interval "
          "above 1.05:")
    for r in GRID:
        print(f"- confidence {r[0]}, margin {r[1]}: {len(fails[r])}"
              + ("" if not fails[r] else " (" + "; ".join(fails[r]) + ")"))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
