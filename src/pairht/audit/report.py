"""Audit tables: CSV (one line per row, every metric), JSON (plus config) and Markdown.

Column glossary (also in ``docs/audit.md``); ``*_exact`` from inclusion probabilities,
``*_mc`` Monte Carlo means with standard errors ``*_mc_se``:

``bias``        mean over prompts of ``||E[hat g] - g||`` (MC: of ``||mean draw - g||``)
``mse``         mean over prompts of ``E||hat g - g||^2`` (trace MSE)
``cos_mean``    cosine of the mean estimate to the target (exact cosine)
``cos``         ``E[cos(hat g, g)]`` over draws (MC only)
``vertices``    completed candidates per prompt; ``edges``: observed edges per prompt
``tokens``      realised relative suffix tokens ``sum_q E[sum_i J_i C_i] / sum_q sum_i C_i``
                (finished candidates cost 0; small-group GRPO: whole sequences)
``generated``   every generated token (prefixes included) over generating every candidate whole
``ratio_to_best`` exact MSE over the best baseline's (see :mod:`pairht.audit.summary`)
``budget_scale`` the solved budget (fraction of the predicted full cost) matching the target
``ess``         Kish ESS of observed edge weights; ``ess_ratio``: ESS / observed edges
``max_weight``  mean per-draw maximum relative edge weight ``M W_e``; ``max_weight_max``:
                largest seen
``bias_pvalue`` chi-square test of MC mean vs exact mean; ``*_z``: z of MC vs exact
``alloc_ms``, ``build_ms``, ``design_ms`` per prompt; ``sample_us`` per draw and prompt
"""

from __future__ import annotations

import csv
import json
import math
import os
from typing import Any

from pairht.audit.runner import AuditResult

#: Metric columns of the CSV, in order.
METRICS = (
    "bias_exact", "bias_mc", "bias_pvalue",
    "mse_exact", "mse_mc", "mse_mc_se", "mse_z",
    "cos_mean_exact", "cos_mean_mc", "cos_mc", "cos_mc_se",
    "vertices_exact", "vertices_mc", "vertices_mc_se", "vertices_z",
    "edges_exact", "edges_mc", "edges_mc_se", "edges_z",
    "tokens_exact", "tokens_mc", "tokens_mc_se", "tokens_z", "generated_exact",
    "ratio_to_best", "budget_scale",
    "ess_mc", "ess_ratio_mc", "max_weight_mc", "max_weight_max",
    "alloc_ms", "build_ms", "sample_us", "design_ms", "draws_per_s", "mc_seconds",
)
HEADER = ("key", "label", "group", "unbiased_claim", "status", "exact_method", "consistent",
          *METRICS, "flags", "notes")


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def table_rows(result: AuditResult) -> list[dict[str, Any]]:
    """One flat dict per audit row (keys :data:`HEADER`; missing metrics are NaN)."""
    out = []
    for r in result.rows:
        d: dict[str, Any] = {
            "key": r.key, "label": r.label, "group": r.group, "unbiased_claim": r.unbiased,
            "status": r.status, "exact_method": r.exact_method, "consistent": r.consistent,
        }
        for m in METRICS:
            d[m] = float(r.metrics.get(m, float("nan")))
        d["flags"] = "; ".join(r.flags)
        d["notes"] = "; ".join(r.notes)
        out.append(d)
    return out


def to_csv(result: AuditResult, path: str | os.PathLike[str]) -> None:
    """Write the audit table as CSV (NaN written as empty cells)."""
    with open(os.fspath(path), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(HEADER))
        w.writeheader()
        for d in table_rows(result):
            w.writerow({k: ("" if _clean(v) is None else v) for k, v in d.items()})


def to_json(result: AuditResult, path: str | os.PathLike[str] | None = None) -> str:
    """The audit as JSON (config, population summary, rows; NaN as null); optionally written."""
    doc = {
        "config": result.config,
        "population": result.population,
        "rows": [{k: _clean(v) for k, v in d.items()} for d in table_rows(result)],
    }
    text = json.dumps(doc, indent=2, default=float)
    if path is not None:
        with open(os.fspath(path), "w") as fh:
            fh.write(text + "\n")
    return text


def fmt(x: float, kind: str = "g") -> str:
    """Table formatting: ``n/a`` for NaN, scientific for small biases."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if kind == "bias":
        return "0" if x == 0 else (f"{x:.2e}" if abs(x) < 1e-2 else f"{x:.4f}")
    if kind == "mse":
        return f"{x:.4g}"
    if kind == "int":
        return f"{x:.1f}"
    return f"{x:.3f}"


#: (title, metric, format) of the compact table shared by Markdown and the CLI.
COMPACT = (
    ("Bias", "bias_exact", "bias"),
    ("MSE (exact)", "mse_exact", "mse"),
    ("MSE (MC)", "mse_mc", "mse"),
    ("vs best", "ratio_to_best", "g"),
    ("Cosine", "cos_mc", "g"),
    ("Vertices", "vertices_exact", "int"),
    ("Edges", "edges_exact", "int"),
    ("Suffix tokens", "tokens_exact", "g"),
    ("ESS", "ess_mc", "int"),
    ("Max w", "max_weight_mc", "int"),
    ("Design ms", "design_ms", "g"),
)


def compact_cells(row: Any) -> list[str]:
    """The compact table's cells for one :class:`~pairht.audit.runner.RowResult`."""
    if not row.ok:
        return [row.status] + [""] * (len(COMPACT) - 1)
    cells = []
    for _, metric, kind in COMPACT:
        x = row.metrics.get(metric, float("nan"))
        mc_bias = metric == "bias_exact" and not math.isfinite(x)
        if mc_bias:  # no exact value (ratio estimator beyond the enumeration limit)
            x = row.metrics.get("bias_mc", float("nan"))
        cell = fmt(x, kind) + (" (MC)" if mc_bias and math.isfinite(x) else "")
        if metric == "mse_mc" and math.isfinite(x):
            cell += f" ± {fmt(row.metrics.get('mse_mc_se', float('nan')), 'mse')}"
        cells.append(cell)
    return cells


def to_markdown(result: AuditResult) -> str:
    """The compact audit table in Markdown.

    Bias, exact MSE, vertices, edges and suffix tokens are exact (bias falls back to the
    Monte Carlo value, marked "(MC)", where no exact value exists); MSE (MC) is the Monte
    Carlo mean ± its standard error; Cosine is the Monte Carlo ``E[cos]``; ESS and Max w are
    Monte Carlo means; Design ms is allocation + design construction + one draw, per prompt.
    """
    head = ["Design", *[t for t, _, _ in COMPACT], "Check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result.rows:
        check = "" if not r.ok else ("ok" if r.consistent else "FLAG")
        lines.append("| " + " | ".join([r.label, *compact_cells(r), check]) + " |")
    return "\n".join(lines)
