"""The audit across one axis: budget ratio, probability floor, group size or calibration.

Each sweep point is a full :func:`~pairht.audit.runner.run_audit`; the result is a list of
flat records (one per point and row) that :func:`sweep_to_csv` writes and
:func:`pairht.audit.plots.sweep_figure` draws. ``G`` and ``calibration`` regenerate the
synthetic population with the same seed: for ``calibration`` this keeps rewards, costs and
scores identical and changes only the predictions (the generator draws them last).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from pairht.audit.population import Population, synthetic_population
from pairht.audit.report import METRICS
from pairht.audit.rows import AuditConfig
from pairht.audit.runner import AuditResult, run_audit

#: Sweep axes and their default values.
AXES: dict[str, tuple[Any, ...]] = {
    "budget": (0.25, 0.375, 0.5, 0.625, 0.75),
    "pi_min": (0.02, 0.05, 0.08, 0.15),
    "G": (4, 8, 16, 32),
    "calibration": ("oracle", "noisy", "miscalibrated"),
}


def records(result: AuditResult, **extra: Any) -> list[dict[str, Any]]:
    """Flat records of an audit (one per row), with ``mse`` / ``bias`` the exact value when
    it exists and the Monte Carlo one otherwise (``mse_source`` says which)."""
    out = []
    for r in result.rows:
        rec: dict[str, Any] = {**extra, "key": r.key, "label": r.label, "status": r.status}
        for m in METRICS:
            rec[m] = float(r.metrics.get(m, math.nan))
        exact_ok = math.isfinite(rec["mse_exact"])
        rec["mse"] = rec["mse_exact"] if exact_ok else rec["mse_mc"]
        rec["mse_source"] = "exact" if exact_ok else "mc"
        rec["bias"] = rec["bias_exact"] if math.isfinite(rec["bias_exact"]) else rec["bias_mc"]
        rec["tokens"] = rec["tokens_exact"]
        rec["flags"] = "; ".join(r.flags)
        out.append(rec)
    return out


def budget_curve(pop: Population, rows: Sequence[str] | None, cfg: AuditConfig,
                 budgets: Sequence[float], *, n_draws: int,
                 main: AuditResult | None = None) -> list[dict[str, Any]]:
    """Records of the audit at each budget ratio (``main`` reused at ``cfg.budget_ratio``)."""
    out: list[dict[str, Any]] = []
    for b in budgets:
        if main is not None and math.isclose(b, cfg.budget_ratio):
            res = main
        else:
            res = run_audit(pop, rows, dataclasses.replace(cfg, budget_ratio=float(b)),
                            n_draws=n_draws)
        out.extend(records(res, budget=float(b)))
    return out


def run_sweep(axis: str, population: Population, rows: Sequence[str] | None,
              cfg: AuditConfig, values: Sequence[Any] | None = None, *, n_draws: int = 5000,
              synthetic: dict[str, Any] | None = None,
              log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Audit ``population`` at every value of ``axis``; return the flat records.

    Parameters
    ----------
    axis : {"budget", "pi_min", "G", "calibration"}
    population : Population
        The population of the ``budget`` and ``pi_min`` sweeps.
    rows : row keys (None: all)
    cfg : AuditConfig
        Base settings; the swept field is replaced.
    values : sequence, optional
        Axis values (default :data:`AXES`).
    n_draws : int
        Monte Carlo draws per prompt, row and point.
    synthetic : dict, optional
        Arguments of :func:`~pairht.audit.population.synthetic_population` (``n_prompts``,
        ``G``, ``reward``, ``calibration``, ``noise``, ``rng``), required by the ``G`` and
        ``calibration`` axes.
    log : callable, optional
        Receives one line per sweep point.
    """
    if axis not in AXES:
        raise ValueError(f"axis must be one of {tuple(AXES)}; got {axis!r}")
    vals = tuple(values) if values is not None else AXES[axis]
    if axis in ("G", "calibration") and synthetic is None:
        raise ValueError(f"axis {axis!r} regenerates the synthetic population; pass synthetic= "
                         f"(it cannot be swept on a population read from disk)")
    out: list[dict[str, Any]] = []
    for v in vals:
        pop, c = population, cfg
        if axis == "budget":
            c = dataclasses.replace(cfg, budget_ratio=float(v))
        elif axis == "pi_min":
            c = dataclasses.replace(cfg, pi_min=float(v))
        elif synthetic is None:  # unreachable: checked above (keeps the type checker informed)
            raise ValueError(f"axis {axis!r} needs synthetic=")
        elif axis == "G":
            if float(v) != int(v):
                raise ValueError(f"G values must be integers; got {v!r}")
            args = {**synthetic, "G": int(v)}
            pop = synthetic_population(args.pop("n_prompts"), args.pop("G"), **args)
        else:
            args = {**synthetic, "calibration": str(v)}
            pop = synthetic_population(args.pop("n_prompts"), args.pop("G"), **args)
        if log is not None:
            log(f"sweep {axis} = {v}")
        res = run_audit(pop, rows, c, n_draws=n_draws)
        out.extend(records(res, axis=axis, value=v))
    return out


def sweep_to_csv(table: list[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """Write sweep records as CSV (NaN as empty cells)."""
    if not table:
        raise ValueError("sweep table is empty: nothing to write")
    fields = list(table[0])
    with open(os.fspath(path), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for rec in table:
            w.writerow({k: ("" if isinstance(v, float) and not math.isfinite(v) else v)
                        for k, v in rec.items()})
