r"""How PAIR's default was chosen: its options, confidence and margin, measured on populations.

PAIR's default (the audit row ``default``, the TRL trainer's ``width="auto"``) runs, per fold
of prompts, small-group GRPO, ``pair_dr_narrow`` or ``pair_dr``
(:data:`pairht.audit.width.DEFAULT_OPTIONS`), a prefix option only when history puts its
ratio to GRPO below the margin :data:`~pairht.audit.width.DEFAULT_MAX_RATIO` with the
confidence :data:`~pairht.audit.width.DEFAULT_CONFIDENCE`. This script prints, per
population, prediction mode and budget, the exact MSE ratio to the best baseline (95%
bootstrap interval over prompts) of each option and of the choice at every (confidence,
margin) of a grid, and the cells where a rule fails "at or below the best baseline,
interval's upper end at or below 1.05", under two cross-fittings: ``k4`` (the audit's four
folds) and ``loo`` (each prompt decided from all the others)::

    python benchmarks/default_rule.py --cache /tmp/rule     # the tuning populations
    python benchmarks/default_rule.py --population chain_long.npz --no-tuning

The tuning populations are the committed SmolLM2 ones (short answers and step by step, tau 8
and 32; stored, hindsight and prompt-mean predictions), the synthetic ones (tau 8 and 32) and
two draws of the paper's regime (``benchmarks/paper_regime.py``, seeds ``--paper-seeds``, 10
and 11, 128 prompts x G = 16, each predictor skill and hindsight); the paper regime's table
seeds (0, 1) and its third draw (2) are kept out, as are the long chains. Any population
given with ``--population`` is added. ``--cache DIR`` keeps every audit's per-prompt exact
MSEs (one ``.npz`` per population, predictions and budget), so the grid reruns in seconds.
"""

from __future__ import annotations

import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

#: (confidence, margin) pairs weighed; the default is one of them.
GRID = tuple((c, m) for c in (0.5, 0.75, 0.9, 0.95) for m in (1.0, 0.9, 0.85, 0.8))
#: Seeds of the paper-regime draws among the tuning populations (the tables' are 0 and 1).
PAPER_SEEDS = (10, 11)


def populations(extra: list[str], tuning: bool, modes: list[str],
                paper_seeds: list[int]) -> list[tuple[str, object, list[str]]]:
    """``(name, population, prediction modes)`` of every population weighed."""
    from audit_tables import STYLES, population_files, smollm2_populations
    from pairht.audit import synthetic_population
    from paper_regime import populations as paper_populations

    pops: list[tuple[str, object, list[str]]] = []
    if tuning:
        for style in STYLES:
            pops += [(name, pop, modes) for name, pop
                     in smollm2_populations(style, label=f"SmolLM2 {style}").items()]
        for tau in (8, 32):
            pops.append((f"synthetic tau={tau}",
                         synthetic_population(48, 16, prefix_tokens=tau, rng=0), modes))
        for seed in paper_seeds:
            # each column is its own predictor (the hindsight column is hindsight already)
            for col, pop in paper_populations(128, 16, tau=256, seed=seed).items():
                pops.append((f"paper regime seed={seed} {col}", pop, ["stored"]))
    pops += [(name, pop, modes) for name, pop in population_files(extra).items()]
    return pops


def option_mse(pop: object, mode: str, budget: float, rows: list[str],
               cache: str | None, name: str) -> dict[str, np.ndarray]:
    """Every row's per-prompt exact MSE on ``pop`` with ``mode`` predictions at ``budget``
    (read from, or written to, ``cache``)."""
    from pairht.audit import AuditConfig, run_audit, with_predictions

    path = None
    if cache is not None:
        stem = re.sub(r"[^A-Za-z0-9.]+", "_", f"{name}_{mode}_b{budget}")
        path = os.path.join(cache, stem + ".npz")
        if os.path.exists(path):
            with np.load(path) as f:
                if all(k in f for k in rows):
                    return {k: f[k] for k in rows}
    p = with_predictions(pop, mode)  # type: ignore[arg-type]
    res = run_audit(p, rows=rows, n_draws=0, config=AuditConfig(budget_ratio=budget, seed=0))
    mse = {k: res.row(k).per_prompt["mse_exact"] for k in rows}
    if path is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.savez(path, **mse)  # type: ignore[arg-type]
    return mse


def main(argv: list[str] | None = None) -> int:
    from audit_tables import population_parser
    from pairht.audit.rows import BASELINE_ROWS
    from pairht.audit.summary import ratio_interval as _ratio
    from pairht.audit.width import (
        DEFAULT_CONFIDENCE,
        DEFAULT_MAX_RATIO,
        DEFAULT_OPTIONS,
        cross_fitted_choice,
    )

    ap = population_parser(__doc__)
    ap.add_argument("--no-tuning", action="store_true", help="only the populations given")
    ap.add_argument("--predictions", nargs="+", default=["stored", "hindsight", "prompt_mean"])
    ap.add_argument("--paper-seeds", type=int, nargs="*", default=list(PAPER_SEEDS),
                    help="seeds of the paper-regime tuning draws (none: leave them out)")
    ap.add_argument("--cache", default=None, help="folder for per-prompt exact MSEs")
    args = ap.parse_args(argv)
    rows = list(dict.fromkeys([*BASELINE_ROWS, *DEFAULT_OPTIONS]))
    fails: dict[tuple[float, float], list[str]] = {r: [] for r in GRID}
    paper: dict[tuple[float, float], list[float]] = {r: [] for r in GRID}
    print(f"default: confidence {DEFAULT_CONFIDENCE}, margin {DEFAULT_MAX_RATIO}\n")
    print("| population | predictions | budget | pair_dr_narrow | pair_dr | default (k4) | "
          "default (loo) |")
    print("|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for name, pop, modes in populations(args.population, not args.no_tuning,
                                        args.predictions, args.paper_seeds):
        for mode in modes:
            for b in args.budgets:
                mse = option_mse(pop, mode, b, rows, args.cache, name)
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
                        if name.startswith("paper regime") and scheme == "k4":
                            paper[r].append(v)
                cells = ["{:.3f} [{:.3f}, {:.3f}]".format(*_ratio(mse[k], ref))
                         for k in DEFAULT_OPTIONS[1:]]
                cells += ["{:.3f} [{:.3f}, {:.3f}]".format(*_ratio(
                    rule(DEFAULT_CONFIDENCE, DEFAULT_MAX_RATIO, folds), ref))
                    for folds in (4, P)]
                print(f"| {name} | {mode} | {b} | " + " | ".join(cells) + " |", flush=True)
    print("\nCells where a (confidence, margin) is above the best baseline or its interval "
          "above 1.05 (and, with paper-regime draws, their mean ratio under k4):")
    for r in GRID:
        gain = f"; paper regime mean {np.mean(paper[r]):.3f}" if paper[r] else ""
        print(f"- confidence {r[0]}, margin {r[1]}: {len(fails[r])}{gain}"
              + ("" if not fails[r] else " (" + "; ".join(fails[r]) + ")"))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
