r"""The audit tables of docs/audit.md: every baseline and PAIR variant at equal realised cost.

One command prints the markdown tables (real-model population and a synthetic population of
the same shape, budgets 0.25 and 0.5, prefix checkpoints tau = 8 and 32)::

    python benchmarks/audit_tables.py            # real 532 s + synthetic 730 s (2 busy cores)
    python benchmarks/audit_tables.py --small    # the CI populations (12 prompts)
    python benchmarks/audit_tables.py --style steps --sources real   # reasoning-length answers
    python benchmarks/audit_tables.py --reference both   # both references from one audit
    python benchmarks/audit_tables.py --rows default default@hindsight   # only these rows

``--rows`` audits only the rows named (``key`` or ``key@hindsight`` / ``key@prompt_mean``),
the reference's baselines and a choice row's options: a row's cells do not depend on which
other rows run (exact moments, one bootstrap seed per comparison), so they are the cells of
the whole table.

Each cell is ``mean_q MSE_row / mean_q MSE_best`` (exact MSEs, no Monte Carlo) with its 95%
percentile bootstrap interval over prompts (B = 2000), where ``best`` is the trivial baseline
(:data:`pairht.audit.BASELINE_ROWS`) with the lowest exact MSE on that population at that
budget: the audit's own summary line (:func:`pairht.audit.compare_to_baselines`), computed
for every row. With ``--reference prefix`` small-group GRPO is left out of the reference
(the best *prefix* baseline), so the table also answers "given that I generate the prefixes".

Rows come from the audit's registry by key, run through :func:`pairht.audit.run_audit`, so
the table follows whatever the step's allocator does when it is rerun. Two rows re-run PAIR
on replaced predictions (:func:`pairht.audit.with_predictions`): ``hindsight`` (``p_hat =
r``, ``c_hat = C``, ``m_hat = ||s||``: the best any prefix head could do) and
``prompt_mean`` (uninformative heads); they are compared with the baselines of the *stored*
predictions, so every ratio in a column has the same denominator.

The last lines give the unweighted adaptive estimator's bias share of its MSE,
``sum_q ||b_q||^2 / sum_q MSE_q`` (the PAIR paper reports about 1%).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")

#: Rows of the table, in order: the baselines, then PAIR and its variants.
ROW_KEYS = ("default", "uniform_ht", "srswor", "pointwise_ht", "grpo_small", "pair_width",
            "pair", "pair_batch", "pair_strata", "pair_dr", "pair_dr_narrow", "pair_energy",
            "pair_cps", "pair_energy_cps", "pair_drr", "adaptive_unweighted")
#: PAIR rows re-run on replaced predictions (suffix ``@mode`` in the table).
PREDICTION_ROWS = {"hindsight": ("default", "pair_width", "pair", "pair_batch", "pair_strata",
                                 "pair_dr", "pair_dr_narrow", "pair_cps"),
                   "prompt_mean": ("default", "pair_width", "pair", "pair_batch", "pair_strata",
                                   "pair_dr", "pair_dr_narrow")}


def parse_rows(rows: list[str] | tuple[str, ...] | None
               ) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """Split table rows (``key`` or ``key@mode``) into the plain rows and the rows of each
    replaced-predictions audit, in table order; ``None`` means every row of the table.

    Raises
    ------
    ValueError
        If a name is not a row of the table (:data:`ROW_KEYS`, or ``key@mode`` with ``key`` in
        :data:`PREDICTION_ROWS` ``[mode]``).

    Examples
    --------
    >>> parse_rows(["default@hindsight", "default"])
    (('default',), {'hindsight': ('default',), 'prompt_mean': ()})
    """
    if rows is None:
        return ROW_KEYS, dict(PREDICTION_ROWS)
    known = list(ROW_KEYS) + [f"{k}@{m}" for m, ks in PREDICTION_ROWS.items() for k in ks]
    unknown = [r for r in rows if r not in known]
    if unknown:
        raise ValueError(f"rows must be rows of the table; got {unknown}, known: {known}")
    asked = set(rows)
    return (tuple(k for k in ROW_KEYS if k in asked),
            {m: tuple(k for k in ks if f"{k}@{m}" in asked) for m, ks in PREDICTION_ROWS.items()})


def _relabel(row: Any, mode: str) -> Any:
    """A row of a replaced-predictions audit, renamed ``key@mode`` and out of the baselines."""
    return dataclasses.replace(row, key=f"{row.key}@{mode}", label=f"{row.label} ({mode})",
                               group=f"predictions:{mode}")


def bias_share(pop: Any, key: str, budget: float, seed: int) -> float:
    """``sum_q ||b_q||^2 / sum_q (||b_q||^2 + tr Cov_q)`` of row ``key`` (exact)."""
    from pairht.audit import AuditConfig
    from pairht.audit.exact import row_moments
    from pairht.audit.rows import select_rows

    cfg = AuditConfig(budget_ratio=budget, seed=seed)
    row = select_rows([key])[0]
    plan = row.plan(pop, cfg, {})
    mom = row_moments(row, plan, pop, pop.reduced_scores(), cfg)
    if mom.bias is None or mom.trace_cov is None:
        return float("nan")
    b2 = float(np.einsum("pd,pd->", mom.bias, mom.bias))
    return b2 / (b2 + float(mom.trace_cov.sum()))


def audit_cell(pop: Any, budget: float, *, seed: int, reference: str, n_boot: int,
               rows: list[str] | tuple[str, ...] | None = None
               ) -> tuple[dict[str, tuple[float, float, float]], str, float]:
    """Every row's (or ``rows``': :func:`parse_rows`) ``(ratio, low, high)`` against the best
    baseline at ``budget``.

    Returns ``(cells, best_baseline_key, best_baseline_mse)``.
    """
    return audit_cells(pop, budget, seed=seed, references=(reference,), n_boot=n_boot,
                       rows=rows)[reference]


def audit_cells(pop: Any, budget: float, *, seed: int, references: tuple[str, ...],
                n_boot: int, rows: list[str] | tuple[str, ...] | None = None
                ) -> dict[str, tuple[dict[str, tuple[float, float, float]], str, float]]:
    """:func:`audit_cell` for each reference (``"all"``, ``"prefix"``) from one audit.

    Only ``rows`` (every row of the table when None) are returned; the baselines are audited
    whether asked for or not, since every ratio's denominator is the best of them.
    """
    from pairht.audit import (
        BASELINE_ROWS,
        ROWS,
        AuditConfig,
        run_audit,
        with_predictions,
    )

    plain, by_mode = parse_rows(rows)
    cfg = AuditConfig(budget_ratio=budget, seed=seed)
    table = [k for k in ROW_KEYS if k in ROWS]
    keys = [k for k in table if k in plain or k in BASELINE_ROWS]
    res = run_audit(pop, rows=keys, config=cfg, n_draws=0)
    for mode, mode_rows in by_mode.items():
        if not mode_rows:
            continue
        extra = run_audit(with_predictions(pop, mode), rows=[k for k in mode_rows if k in ROWS],
                          config=cfg, n_draws=0)
        res.rows.extend(_relabel(r, mode) for r in extra.rows)
    shown = set(plain) | {f"{k}@{m}" for m, ks in by_mode.items() for k in ks}
    out = {}
    for reference in references:
        bases = tuple(k for k in BASELINE_ROWS if k in table
                      and (reference == "all" or k != "grpo_small"))
        cells, best, best_mse = ratio_cells(res, bases, n_boot=n_boot, seed=seed)
        out[reference] = ({k: v for k, v in cells.items() if k in shown}, best, best_mse)
    return out


def ratio_cells(res: Any, bases: tuple[str, ...], *, n_boot: int, seed: int
                ) -> tuple[dict[str, tuple[float, float, float]], str, float]:
    """Every row of the audit ``res`` as ``(ratio, low, high)`` to the best of ``bases``
    (:func:`pairht.audit.compare_to_baselines`; NaN for a row without exact MSEs), with the
    best baseline's key and mean exact MSE."""
    from pairht.audit import compare_to_baselines

    cells: dict[str, tuple[float, float, float]] = {}
    best, best_mse = "", float("nan")
    for r in res.rows:
        if not r.ok or "mse_exact" not in r.per_prompt:
            cells[r.key] = (float("nan"),) * 3
            continue
        c = compare_to_baselines(res, r.key, baselines=bases, n_boot=n_boot, seed=seed)
        cells[r.key] = (c.ratio, c.low, c.high)
        best = c.baseline
        best_mse = float(res.row(best).per_prompt["mse_exact"].mean())
    return cells, best, best_mse


def print_table(cols: dict[str, dict[str, tuple[float, float, float]]],
                foot: list[str]) -> None:
    """Print the markdown table of :func:`audit_cell` columns (header -> cells), then ``foot``
    as bullets."""
    keys = list(next(iter(cols.values())))
    print("| row | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for k in keys:
        vals = []
        for c in cols.values():
            r, lo, hi = c.get(k, (float("nan"),) * 3)
            vals.append("n/a" if np.isnan(r) else f"{r:.3f} [{lo:.3f}, {hi:.3f}]")
        print(f"| `{k}` | " + " | ".join(vals) + " |")
    print()
    for line in foot:
        print(f"* {line}")


#: Real-population file stems by prompt style (``benchmarks/real_population.py --style``).
STYLES = {"short": "smollm2_arith", "steps": "smollm2_steps"}


def population(source: str, tau: int, *, small: bool, data: str, seed: int,
               shape: tuple[int, int], style: str = "short") -> Any:
    """The real population file for ``tau`` (of prompt ``style``: short answers or step by
    step), or a synthetic one of ``shape`` (oracle heads)."""
    from pairht.audit import load_population, synthetic_population

    if source == "real":
        suffix = "_small" if small else ""
        return load_population(os.path.join(data, f"{STYLES[style]}_tau{tau}{suffix}.npz"))
    return synthetic_population(shape[0], shape[1], prefix_tokens=tau, rng=seed)


def population_parser(doc: str) -> argparse.ArgumentParser:
    """The command line the population studies share (``shrinkage.py``, ``width_rule.py``,
    ``default_rule.py``): ``--population`` files to add and the ``--budgets`` weighed."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--population", nargs="*", default=[], help="more population files")
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5])
    return ap


def population_files(paths: list[str]) -> dict[str, Any]:
    """The population files ``paths``, loaded, by file name."""
    from pairht.audit import load_population

    return {os.path.basename(p): load_population(p) for p in paths}


def smollm2_populations(style: str = "short", label: str = "SmolLM2") -> dict[str, Any]:
    """The committed SmolLM2 populations of prompt ``style`` at tau 8 and 32, named
    ``f"{label} tau={tau}"``."""
    return {f"{label} tau={t}": population("real", t, small=False, data=DATA, seed=0,
                                           shape=(0, 0), style=style) for t in (8, 32)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--taus", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--sources", nargs="+", default=["real", "synthetic"],
                    choices=["real", "synthetic"])
    ap.add_argument("--reference", choices=["all", "prefix", "both"], default="all",
                    help="baselines the ratio is taken to: all, or all but small-group GRPO "
                         "(both: the two tables from the same audits)")
    ap.add_argument("--small", action="store_true", help="the small (CI) real populations")
    ap.add_argument("--style", choices=sorted(STYLES), default="short",
                    help="the real population's prompts: short answers (default) or step by "
                         "step (smollm2_steps_tau*.npz)")
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--rows", nargs="+", default=None,
                    help="only these rows (key or key@hindsight / key@prompt_mean; default: "
                         "every row); the baselines are audited for the ratio either way")
    ap.add_argument("--no-bias-share", action="store_true",
                    help="skip the adaptive estimator's bias-share line (an extra audit)")
    args = ap.parse_args(argv)
    parse_rows(args.rows)  # a bad name fails before any audit runs
    t0 = time.perf_counter()
    # The synthetic population takes the real one's shape (prompts x G).
    real = population("real", args.taus[0], small=args.small, data=args.data, seed=args.seed,
                      shape=(0, 0), style=args.style)
    shape = (real.n_prompts, real.group_size)
    refs = ("all", "prefix") if args.reference == "both" else (args.reference,)
    for source in args.sources:
        cols: dict[str, dict[tuple[int, float], dict[str, tuple[float, float, float]]]] = {
            ref: {} for ref in refs}
        foot: dict[str, list[str]] = {ref: [] for ref in refs}
        for tau in args.taus:
            pop = population(source, tau, small=args.small, data=args.data, seed=args.seed,
                             shape=shape, style=args.style)
            fin = 0.0 if pop.finished is None else float(pop.finished.mean())
            for b in args.budgets:
                found = audit_cells(pop, b, seed=args.seed, references=refs, n_boot=args.n_boot,
                                    rows=args.rows)
                tail = "" if args.no_bias_share else (
                    "; adaptive_unweighted bias share of MSE "
                    f"{100 * bias_share(pop, 'adaptive_unweighted', b, args.seed):.1f}%")
                for ref, (cells, best, best_mse) in found.items():
                    cols[ref][(tau, b)] = cells
                    foot[ref].append(f"tau={tau}, budget={b}: best baseline {best} (exact MSE "
                                     f"{best_mse:.4g}); finished fraction {fin:.3f}{tail}")
        name = {"real": "SmolLM2-135M-Instruct arithmetic population"
                        + (", step by step" if args.style == "steps" else ""),
                "synthetic": "synthetic population (oracle heads)"}[source]
        for ref in refs:
            print(f"\n### {name}, {shape[0]} prompts x G={shape[1]}, reference = "
                  f"{'best baseline' if ref == 'all' else 'best prefix baseline'}\n")
            print_table({f"tau={t}, b={b}": c for (t, b), c in cols[ref].items()}, foot[ref])
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
