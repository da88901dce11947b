"""Audit figures (PNG). matplotlib is imported inside each function (Agg backend).

* :func:`bias_mse` -- bias and MSE per design (Figure estimator-audit);
* :func:`mse_tokens` -- MSE against realised relative suffix tokens across budgets;
* :func:`mechanism` -- the contrast graph of one prompt: vertex opacity = PAIR's ``pi_i``,
  edge width = ``a_ij``; with the disagreement surface and the exact MSE of uniform,
  pointwise and PAIR at equal expected cost (Figure mechanism);
* :func:`sweep_figure` -- MSE and bias along a sweep axis.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from pairht.audit.base import AuditConfig
from pairht.audit.population import Population
from pairht.audit.runner import AuditResult


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _style(k: int) -> dict[str, Any]:
    """Distinct colour, marker and dash for the k-th line (up to 20 x 4 combinations)."""
    plt = _pyplot()
    return {"color": plt.get_cmap("tab20")(k % 20), "marker": "osD^v<>ph*"[k % 10],
            "linestyle": ("-", "--", "-.", ":")[(k // 10) % 4]}


def _value(metrics: dict[str, float], name: str) -> tuple[float, float, str]:
    """(value, standard error, source) preferring the exact value."""
    ex = metrics.get(f"{name}_exact", math.nan)
    if math.isfinite(ex):
        return ex, 0.0, "exact"
    return metrics.get(f"{name}_mc", math.nan), metrics.get(f"{name}_mc_se", 0.0), "mc"


def bias_mse(result: AuditResult, path: str | os.PathLike[str]) -> str:
    """Bars of bias norm and trace MSE per design (MC error bars where no exact value)."""
    plt = _pyplot()
    rows = [r for r in result.rows if r.ok]
    labels = [r.label for r in rows]
    bias = [(r.metrics.get("bias_exact") if math.isfinite(r.metrics.get("bias_exact", math.nan))
             else r.metrics.get("bias_mc", math.nan)) for r in rows]
    mse = [_value(r.metrics, "mse") for r in rows]
    y = np.arange(len(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 1.5), sharey=True)
    colors = ["tab:green" if r.unbiased else "tab:red" for r in rows]
    ax1.barh(y, bias, color=colors)
    ax1.set_xlabel("bias norm  ||E[ĝ] − g||  (mean over prompts)")
    ax1.set_yticks(y, labels)
    ax1.invert_yaxis()
    ax2.barh(y, [m[0] for m in mse], xerr=[2 * m[1] for m in mse], color=colors)
    ax2.set_xlabel("trace MSE  E||ĝ − g||²  (exact; MC ± 2 se where n/a)")
    fig.suptitle(f"Estimator audit at budget {result.config['budget_ratio']} "
                 f"(green: claimed unbiased)")
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=120)
    plt.close(fig)
    return os.fspath(path)


#: Legend entries per panel of :func:`mse_tokens` at most: past it a panel is split.
MAX_LEGEND = 10


def mse_tokens(curve: list[dict[str, Any]], path: str | os.PathLike[str]) -> str:
    """MSE against realised relative suffix tokens across budgets, one panel per row group
    (``pairht.audit.rows.ROWS[key].group``: baselines, the paper's rows, PAIR's variants, ...;
    a group of more than :data:`MAX_LEGEND` rows is split), the baselines drawn in grey in
    every other panel for reference, so that no legend holds more than a few lines."""
    from pairht.audit.rows import ROWS

    plt = _pyplot()
    keys = list(dict.fromkeys(rec["key"] for rec in curve))
    lines: dict[str, list[dict[str, Any]]] = {}
    for key in keys:
        recs = [r for r in curve if r["key"] == key and r["status"] == "ok"
                and math.isfinite(r["mse"]) and r["mse"] > 0]
        if recs:
            lines[key] = sorted(recs, key=lambda r: r["tokens"])
    groups: dict[str, list[str]] = {}
    for key in lines:
        groups.setdefault(ROWS[key].group if key in ROWS else "other", []).append(key)
    panels = [(g, ks[i:i + MAX_LEGEND]) for g, ks in groups.items()
              for i in range(0, len(ks), MAX_LEGEND)] or [("none", [])]
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, 4.6 * nrows), squeeze=False,
                             sharex=True, sharey=True)
    baselines = groups.get("baseline", [])
    for ax, (group, ks) in zip(axes.flat, panels):
        if group != "baseline":
            for key in baselines:
                recs = lines[key]
                ax.plot([r["tokens"] for r in recs], [r["mse"] for r in recs], color="0.75",
                        lw=1, zorder=1)
        for k, key in enumerate(ks):
            recs = lines[key]
            ax.plot([r["tokens"] for r in recs], [r["mse"] for r in recs],
                    label=recs[0]["label"], zorder=2, **_style(k))
        ax.set_yscale("log")
        ax.set_title(f"{group} rows" + ("" if group == "baseline" or not baselines
                                         else " (grey: baselines)"), fontsize=10)
        ax.set_xlabel("relative suffix tokens  E[Σ J_i C_i] / Σ C_i")
        ax.set_ylabel("trace MSE")
        if ks:
            ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    budgets = sorted({r["budget"] for r in curve})
    fig.suptitle(f"MSE vs suffix cost (budgets {', '.join(f'{b:g}' for b in budgets)})")
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=120)
    plt.close(fig)
    return os.fspath(path)


def mechanism_table(pop: Population, cfg: AuditConfig, prompt: int | None = None
                    ) -> dict[str, Any]:
    """The data of :func:`mechanism` on one prompt (default: the one with the most spread
    ``p_hat``), as plain lists: ``prompt``, ``p_hat``, PAIR's ``pi`` at the matched cost, the
    edge proxy ``a`` (``G x G``), and per row (uniform, pointwise, PAIR) its ``label`` and
    exact trace MSE on this prompt at the same expected suffix cost.
    """
    from pairht.allocation import edge_proxy
    from pairht.audit.allocations import matched_pi
    from pairht.audit.runner import run_audit

    q = int(np.argmax(pop.p_hat.std(axis=1))) if prompt is None else int(prompt)
    one = pop.subset([q])
    a = edge_proxy(one.p_hat, kind="disagreement")[0]
    pi = matched_pi("pair", one, cfg, {})[0][0]
    res = run_audit(one, ["uniform_ht", "pointwise_ht", "pair"], cfg, n_draws=0)
    rows = [{"key": r.key, "label": r.label,
             "mse_exact": float(r.metrics.get("mse_exact", math.nan)) if r.ok else math.nan}
            for r in res.rows]
    return {"prompt": q, "budget_ratio": float(cfg.budget_ratio),
            "p_hat": [float(v) for v in one.p_hat[0]], "pi": [float(v) for v in pi],
            "a": [[float(v) for v in row] for row in a], "rows": rows}


def mechanism(pop: Population, cfg: AuditConfig, path: str | os.PathLike[str],
              prompt: int | None = None, table: dict[str, Any] | None = None) -> str:
    """The mechanism picture on one prompt (default: the one with the most spread ``p_hat``).

    (a) predicted disagreement ``d(p_i, p_j)``; (b) the contrast graph, vertex opacity =
    PAIR's ``pi_i``, edge width = ``a_ij``, vertex colour = ``p_hat``; (c) exact MSE of
    uniform, pointwise and PAIR at the same expected suffix cost on this prompt.
    ``table``: :func:`mechanism_table`'s output, if already computed.
    """
    from pairht.allocation import disagreement

    t = table if table is not None else mechanism_table(pop, cfg, prompt)
    a, pi, p_hat, q = np.asarray(t["a"]), np.asarray(t["pi"]), np.asarray(t["p_hat"]), t["prompt"]
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    grid = np.linspace(0, 1, 101)
    surf = disagreement(np.stack(np.meshgrid(grid, grid), axis=-1).reshape(-1, 2))[:, 0, 1]
    im = axes[0].imshow(surf.reshape(101, 101), origin="lower", extent=(0, 1, 0, 1),
                        cmap="viridis")
    fig.colorbar(im, ax=axes[0])
    axes[0].set_xlabel("p_i")
    axes[0].set_ylabel("p_j")
    axes[0].set_title("(a) predicted disagreement d_ij")
    G = len(pi)
    ang = 2 * np.pi * np.arange(G) / G
    xy = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    top = max(float(a.max()), 1e-300)
    ax = axes[1]
    for i in range(G):
        for j in range(i + 1, G):
            if a[i, j] > 0:
                ax.plot(*xy[[i, j]].T, color="0.3", lw=4.0 * a[i, j] / top,
                        alpha=0.25 + 0.5 * a[i, j] / top, zorder=1)
    cmap = plt.get_cmap("coolwarm")
    for i in range(G):
        ax.scatter(*xy[i], s=500, color=cmap(p_hat[i]), alpha=float(pi[i]),
                   edgecolors="k", zorder=2)
        ax.annotate(f"{pi[i]:.2f}", xy[i] * 1.22, ha="center", va="center", fontsize=8)
    ax.set_aspect("equal")
    ax.set_xlim(-1.45, 1.45)
    ax.set_ylim(-1.45, 1.45)
    ax.axis("off")
    ax.set_title(f"(b) contrast graph, prompt {q}: opacity = π_i, width = a_ij")
    labels = [r["label"] for r in t["rows"]]
    mses = [r["mse_exact"] for r in t["rows"]]
    axes[2].bar(range(len(labels)), mses, color=["tab:gray", "tab:blue", "tab:green"])
    axes[2].set_xticks(range(len(labels)), labels, rotation=15)
    axes[2].set_ylabel("exact trace MSE on this prompt")
    axes[2].set_title(f"(c) equal expected cost (budget {t['budget_ratio']})")
    # PAIR's allocation minimises a predicted surrogate (from p_hat, before any reward), not
    # this prompt's exact MSE, which depends on the realised rewards and scores: on a single
    # prompt a uniform design can come out lower. Said on the figure when it happens.
    by_key = {r["key"]: r["mse_exact"] for r in t["rows"]}
    if by_key.get("pair", math.nan) > by_key.get("uniform_ht", math.nan):
        top_mse = np.nanmax(np.asarray(mses, dtype=float))
        axes[2].set_ylim(0, 1.4 * top_mse)
        axes[2].text(0.02, 0.98, "PAIR minimises a predicted surrogate, not this prompt's "
                     "exact MSE:\non one prompt uniform can be lower (population: "
                     "docs/results.md)", transform=axes[2].transAxes, va="top", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=120)
    plt.close(fig)
    return os.fspath(path)


def sweep_figure(table: list[dict[str, Any]], axis: str, path: str | os.PathLike[str]) -> str:
    """MSE (log), bias and realised relative suffix tokens along a sweep axis, per design.

    The tokens panel shows whether rows stayed at matched *realised* cost: allocations
    match the *predicted* cost, and noisy cost predictions make adaptive rows overspend.
    """
    plt = _pyplot()
    values = list(dict.fromkeys(rec["value"] for rec in table))
    numeric = all(isinstance(v, (int, float)) for v in values)
    pos = {v: (float(v) if numeric else k) for k, v in enumerate(values)}
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.5))
    for k, key in enumerate(dict.fromkeys(rec["key"] for rec in table)):
        recs = [r for r in table if r["key"] == key and r["status"] == "ok"]
        if not recs:
            continue
        x = [pos[r["value"]] for r in recs]
        ax1.plot(x, [r["mse"] for r in recs], label=recs[0]["label"], **_style(k))
        ax2.plot(x, [r["bias"] for r in recs], label=recs[0]["label"], **_style(k))
        ax3.plot(x, [r["tokens"] for r in recs], label=recs[0]["label"], **_style(k))
    for ax, name in ((ax1, "trace MSE"), (ax2, "bias norm"),
                     (ax3, "relative suffix tokens (realised)")):
        ax.set_xlabel(axis)
        ax.set_ylabel(name)
        if not numeric:
            ax.set_xticks(range(len(values)), [str(v) for v in values])
    ax1.set_yscale("log")
    ax1.legend(fontsize=7)
    fig.suptitle(f"Audit sweep over {axis}")
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=120)
    plt.close(fig)
    return os.fspath(path)
