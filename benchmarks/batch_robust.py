r"""Can one budget for the batch lose to each prompt at its own? ``pair_batch`` and
``pair_joint`` against per-prompt ``pair`` and small-group GRPO, by exact MSE.

Each cell is a ratio of mean exact MSEs (no Monte Carlo) at equal realised generated
tokens, per population and budget: ``pair_batch / pair``, ``pair_joint / pair`` (the robust
batch split must keep these <= 1, docs/step.md) and each of ``pair``, ``pair_batch``,
``pair_joint`` over ``grpo_small``. ``rare`` columns sum the exact MSE over the prompts with a
rare outcome (1-3 successes or failures of ``G``), where a plain batch split loses.

Populations: the committed SmolLM2 populations (``benchmarks/data/*.npz``) under their stored
predictions, hindsight ones and prompt means (:func:`pairht.audit.with_predictions`), the
synthetic population at ``tau = 8`` and 32 (48 prompts x 16, oracle heads, as
``benchmarks/audit_tables.py``), and the rare-outcome population of the audit tests
(``tests/audit/conftest.py:rare_outcome_population``: 40 prompts x 16, 40% with a rare
outcome, an overconfident head that barely sees it, answers of 600-8000 tokens).

::

    python benchmarks/batch_robust.py --out after.json             # this code
    PYTHONPATH=<old src> python benchmarks/batch_robust.py --out before.json \
        --rows pair_batch pair_joint                                 # a previous version
    python benchmarks/batch_robust.py --table after.json --before before.json

Every cell is written to ``--out`` as it finishes (per-prompt MSEs; a rerun skips the cells
already there), so the sweep can run in pieces (``--only`` filters populations by name).
The whole sweep takes about 30 min on one core (the 48-prompt populations ~40 s per cell).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
CONFTEST = os.path.join(HERE, os.pardir, "tests", "audit", "conftest.py")
ROWS = ("pair", "grpo_small", "pair_batch", "pair_joint")
#: The prompt-level comparators, reported on the rare-outcome population (docs/audit.md).
COMPARATOR_KEYS = ("vip", "hora", "duet")
MODES = ("stored", "hindsight", "prompt_mean")


def rare_outcome_population() -> Any:
    """The audit tests' rare-outcome population (40 prompts x 16, seed 0)."""
    spec = importlib.util.spec_from_file_location("_audit_conftest", CONFTEST)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.rare_outcome_population(40, 16, seed=0)


def populations(only: list[str]) -> dict[str, Any]:
    """Name -> a thunk building the population (loaded only when its cells run)."""
    from pairht.audit import load_population, synthetic_population, with_predictions

    out: dict[str, Any] = {"rare_outcome": rare_outcome_population}
    for tau in (8, 32):
        out[f"synthetic_tau{tau}"] = (lambda t=tau: synthetic_population(48, 16,
                                                                         prefix_tokens=t, rng=0))
    for f in sorted(os.listdir(DATA)):
        if f.endswith(".npz"):
            for mode in MODES:
                out[f"{f[:-4]}@{mode}"] = (lambda f=f, m=mode: with_predictions(
                    load_population(os.path.join(DATA, f)), m))
    return {k: v for k, v in out.items() if not only or any(o in k for o in only)}


def run(args: argparse.Namespace) -> None:
    from pairht.audit import AuditConfig, run_audit

    done: dict[str, Any] = {}
    if os.path.exists(args.out):
        with open(args.out) as fh:
            done = json.load(fh)
    for name, build in populations(args.only).items():
        pop = None
        for b in args.budgets:
            key = f"{name}|{b}"
            rows = list(args.rows) + (list(COMPARATOR_KEYS) if name == "rare_outcome"
                                      and args.comparators else [])
            rows = [r for r in rows if r not in done.get(key, {})]
            if not rows:
                continue
            pop = build() if pop is None else pop
            t0 = time.perf_counter()
            res = run_audit(pop, rows=rows, config=AuditConfig(budget_ratio=b), n_draws=0)
            cell = done.setdefault(key, {})
            for r in rows:
                cell[r] = res.row(r).per_prompt["mse_exact"].tolist()
            cell["successes"] = pop.rewards.sum(axis=1).tolist()
            cell["G"] = pop.group_size
            with open(args.out, "w") as fh:
                json.dump(done, fh)
            print(f"{key}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)


def table(after_path: str, before_path: str | None) -> None:
    with open(after_path) as fh:
        after = json.load(fh)
    before: dict[str, Any] = {}
    if before_path:
        with open(before_path) as fh:
            before = json.load(fh)

    def mean(cell: dict[str, Any], row: str) -> float:
        return float(np.mean(cell[row])) if row in cell else float("nan")

    def rare(cell: dict[str, Any], row: str) -> float:
        s, G = np.asarray(cell["successes"]), int(cell["G"])
        m = ((s >= 1) & (s <= 3)) | ((s >= G - 3) & (s <= G - 1))
        return float(np.asarray(cell[row])[m].sum()) if row in cell else float("nan")

    cols = ["batch/pair", "joint/pair", "pair/grpo", "batch/grpo", "joint/grpo",
            "rare: pair", "rare: batch", "rare: joint"]
    head = "| population | budget | " + " | ".join(
        (f"{c} before -> after" if before and c not in ("pair/grpo", "rare: pair") else c)
        for c in cols) + " |"
    print(head)
    print("|---|---|" + "---|" * len(cols))
    worst = {"pair_batch": 0.0, "pair_joint": 0.0}
    for key, cell in after.items():
        name, b = key.split("|")
        old = before.get(key, {})
        pair, grpo = mean(cell, "pair"), mean(cell, "grpo_small")
        vals = []
        for row, den, dname in (("pair_batch", pair, "pair"), ("pair_joint", pair, "pair"),
                                ("pair", grpo, "grpo"), ("pair_batch", grpo, "grpo"),
                                ("pair_joint", grpo, "grpo")):
            new = mean(cell, row) / den if den > 0 else float("nan")
            if dname == "pair" and np.isfinite(new):
                worst[row] = max(worst[row], new)
            if old and row != "pair":
                vals.append(f"{mean(old, row) / den:.3f} -> {new:.3f}")
            else:
                vals.append(f"{new:.3f}")
        vals.append(f"{rare(cell, 'pair'):.3g}")
        for row in ("pair_batch", "pair_joint"):
            vals.append(f"{rare(old, row):.3g} -> {rare(cell, row):.3g}" if old
                        else f"{rare(cell, row):.3g}")
        print(f"| {name} | {b} | " + " | ".join(vals) + " |")
    print()
    print(f"* largest pair_batch / pair: {worst['pair_batch']:.4f}; largest pair_joint / "
          f"pair: {worst['pair_joint']:.4f}")
    comp = {k: v for k, v in after.items() if k.startswith("rare_outcome|")}
    for key, cell in comp.items():
        pair, grpo = mean(cell, "pair"), mean(cell, "grpo_small")
        parts = [f"`{r}` {mean(cell, r) / pair:.3f} of pair ({mean(cell, r) / grpo:.3f} of "
                 f"grpo_small; rare prompts {rare(cell, r):.3g})"
                 for r in COMPARATOR_KEYS if r in cell]
        if parts:
            print(f"* {key}: " + "; ".join(parts) + f"; pair's rare prompts "
                  f"{rare(cell, 'pair'):.3g}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="batch_robust.json")
    ap.add_argument("--rows", nargs="+", default=list(ROWS))
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--only", nargs="*", default=[], help="population names containing these")
    ap.add_argument("--no-comparators", dest="comparators", action="store_false",
                    help="skip vip, hora, duet on the rare-outcome population")
    ap.add_argument("--table", metavar="AFTER_JSON", help="print the table of a finished sweep")
    ap.add_argument("--before", metavar="BEFORE_JSON", help="with --table: before -> after")
    args = ap.parse_args(argv)
    if args.table:
        table(args.table, args.before)
    else:
        run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
