r"""How low can any prefix design go? The Godambe-Joshi bound against small-group GRPO.

For each population and budget it prints, in units of small-group GRPO's exact MSE at the
same generated tokens, **under the independent-directions model** (every Gram matrix replaced
by its diagonal, :func:`pairht.audit.bounds.independent_directions`):

* ``bound (batch)``: :func:`pairht.audit.bounds.neyman_bound`, the lowest expected MSE of any
  design-unbiased estimator that generates every prefix, given hindsight-perfect rewards,
  costs and score norms, one budget for the batch;
* ``bound (per prompt)``: the same with each prompt at its own budget;
* ``pair_dr@hindsight``: the difference estimator at Neyman's allocation with hindsight
  predictions (the audit's row, floor ``pi_min = 0.08``), model and frozen populations.

A bound above 0.80 means no prefix design reaches the issue's 0.80x GRPO in that cell::

    python benchmarks/neyman_bound.py                          # the four SmolLM2 populations
    python benchmarks/neyman_bound.py synthetic:8 synthetic:32 chain.npz
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
DEFAULT = [os.path.join(DATA, f"smollm2_{s}_tau{t}.npz") for s in ("arith", "steps")
           for t in (8, 32)]


def load(spec: str):
    """A population file, or ``synthetic:<tau>`` (48 x 16, oracle heads, seed 0)."""
    from pairht.audit import load_population, synthetic_population

    if spec.startswith("synthetic:"):
        return synthetic_population(48, 16, prefix_tokens=int(spec.split(":")[1]), rng=0)
    return load_population(spec)


def cell(pop, budget: float) -> dict[str, float]:
    from pairht.audit import AuditConfig, run_audit, with_predictions
    from pairht.audit.bounds import independent_directions, neyman_bound

    cfg = AuditConfig(budget_ratio=budget)
    out: dict[str, float] = {}
    for name, p in (("model", independent_directions(pop)), ("frozen", pop)):
        grpo = run_audit(p, ["grpo_small"], cfg, n_draws=0).row("grpo_small")
        g = float(grpo.per_prompt["mse_exact"].mean())
        dr = run_audit(with_predictions(p, "hindsight"), ["pair_dr"], cfg, n_draws=0)
        out[f"pair_dr@hindsight ({name})"] = float(dr.row("pair_dr").per_prompt["mse_exact"]
                                                   .mean()) / g
        if name == "model":
            out["bound (batch)"] = float(neyman_bound(p, budget).mean()) / g
            out["bound (per prompt)"] = float(neyman_bound(p, budget, batch=False).mean()) / g
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("populations", nargs="*", default=DEFAULT)
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5])
    args = ap.parse_args(argv)
    cols = ["bound (batch)", "bound (per prompt)", "pair_dr@hindsight (model)",
            "pair_dr@hindsight (frozen)"]
    print("| population | budget | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for spec in args.populations:
        pop = load(spec)
        for b in args.budgets:
            c = cell(pop, b)
            name = os.path.basename(spec).removesuffix(".npz")
            print(f"| {name} | {b} | " + " | ".join(f"{c[k]:.3f}" for k in cols) + " |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
