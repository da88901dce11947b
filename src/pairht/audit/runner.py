"""Run the audit: plan every row, compute its exact metrics, replay it by Monte Carlo.

Every row follows realised accounting and is matched at equal expected realised suffix tokens
(:mod:`pairht.audit.allocations`).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pairht.audit.base import AuditConfig, RowUnavailable, prefix_tokens, whole_tokens
from pairht.audit.exact import exact_summary, row_moments
from pairht.audit.montecarlo import mc_summary, row_draws, summarise
from pairht.audit.population import Population
from pairht.audit.rows import AuditRow, ChoiceRow, select_rows
from pairht.audit.width import cross_fitted_choice
from pairht.estimators import pair_gradient

#: Default Monte Carlo draws per prompt (the paper's 50,000).
DEFAULT_DRAWS = 50_000


@dataclass
class RowResult:
    """One row of the audit table.

    ``status`` is ``"ok"``, ``"unavailable: ..."`` (a module it needs is missing) or
    ``"failed: ..."`` (its design could not be built on this population). ``metrics`` holds
    the exact (``*_exact``), Monte Carlo (``*_mc``, ``*_mc_se``, ``*_z``, ``bias_pvalue``) and
    timing (``alloc_ms``, ``design_ms``, ``sample_us``, ``draws_per_s``) values; ``flags``
    names every failed exact-vs-MC consistency test. ``per_prompt`` keeps the exact
    per-prompt MSE (for figures).
    """

    key: str
    label: str
    group: str
    unbiased: bool
    status: str = "ok"
    exact_method: str = "n/a"
    metrics: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    per_prompt: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def consistent(self) -> bool:
        """No exact-vs-Monte-Carlo test failed."""
        return not self.flags


@dataclass
class AuditResult:
    """The audit table plus what produced it."""

    rows: list[RowResult]
    config: dict[str, Any]
    population: dict[str, Any]

    def row(self, key: str) -> RowResult:
        """The row with ``key``."""
        for r in self.rows:
            if r.key == key:
                return r
        raise ValueError(f"no row {key!r} in this audit; rows: {[r.key for r in self.rows]}")


def _row_seed(seed: int, key: str) -> np.random.SeedSequence:
    """One random stream per (seed, row key): adding a row changes no other row's draws."""
    return np.random.SeedSequence([int(seed), zlib.crc32(key.encode())])


def run_audit(
    population: Population,
    rows: Sequence[str] | None = None,
    config: AuditConfig | None = None,
    *,
    n_draws: int = DEFAULT_DRAWS,
    exact: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
    on_row: Callable[[str, int, int], None] | None = None,
) -> AuditResult:
    """Audit every row on ``population`` at matched expected suffix cost.

    Parameters
    ----------
    population : Population
    rows : sequence of str, optional
        Row keys (see :data:`pairht.audit.rows.ROWS`); all registered rows by default.
    config : AuditConfig, optional
        Budget ratio, floor, seed, test level, ...
    n_draws : int
        Monte Carlo draws per prompt and row (0 skips the Monte Carlo replay).
    exact : bool
        Compute the exact metrics.
    progress : callable(row_key, done, total), optional
        Called after every prompt of the Monte Carlo replay (for progress bars).
    on_row : callable(row_key, index, n_rows), optional
        Called before each row's exact moments are computed (index from 0; ``n_rows`` the rows
        run, options of a choice row included): the exact phase's progress.

    Returns
    -------
    AuditResult

    Examples
    --------
    >>> from pairht.audit import run_audit, synthetic_population
    >>> res = run_audit(synthetic_population(4, 6, rng=0), rows=["full", "pair"], n_draws=200)
    >>> round(res.row("full").metrics["mse_exact"], 12)
    0.0
    """
    if not isinstance(population, Population):
        raise ValueError(f"population must be a Population; got {type(population).__name__}")
    if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 0:
        raise ValueError(f"n_draws must be an int >= 0; got {n_draws!r}")
    if n_draws == 1:
        raise ValueError("n_draws must be 0 (no Monte Carlo) or >= 2 (standard errors)")
    cfg = config if config is not None else AuditConfig()
    selected = select_rows(list(rows) if rows is not None else None)
    pop = population
    L = pop.reduced_scores()
    g = pair_gradient(pop.rewards, L)
    cache: dict[str, Any] = {}
    # A choice row is evaluated from its options' results: run every option once, also those
    # not asked for (they are then left out of the table).
    keys = [r.key for r in selected]
    needed = [r for r in selected if not isinstance(r, ChoiceRow)]
    for r in selected:
        if isinstance(r, ChoiceRow):
            needed += [o for o in select_rows(list(r.options))
                       if o.key not in keys and o not in needed]
    done = {}
    for i, r in enumerate(needed):
        if on_row is not None:
            on_row(r.key, i, len(needed))
        done[r.key] = _run_row(r, pop, L, g, cfg, cache, n_draws, exact, progress)
    results = [_run_choice(r, done, pop, cfg) if isinstance(r, ChoiceRow) else done[r.key]
               for r in selected]
    return AuditResult(
        rows=results,
        config={**cfg.__dict__, "n_draws": int(n_draws)},
        population={"n_prompts": pop.n_prompts, "G": pop.group_size,
                    "scores": "gram" if pop.gram is not None else "scores",
                    "meta": dict(pop.meta)},
    )


def _run_row(row: AuditRow, pop: Population, L: np.ndarray, g: np.ndarray, cfg: AuditConfig,
             cache: dict[str, Any], n_draws: int, exact: bool,
             progress: Callable[[str, int, int], None] | None) -> RowResult:
    res = RowResult(key=row.key, label=row.label, group=row.group, unbiased=row.unbiased)
    P = pop.n_prompts
    try:
        plan = row.plan(pop, cfg, cache)
        res.notes.extend(plan.notes)
        mom = row_moments(row, plan, pop, L, cfg) if exact else None
    except RowUnavailable as exc:
        res.status = f"unavailable: {exc}"
        return res
    except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
        res.status = f"failed: {exc}"
        return res
    ex: dict[str, float] = {}
    if mom is not None:
        ex = exact_summary(mom, g, pop, plan)
        res.exact_method = mom.method
        if mom.bias is not None:
            b2 = np.einsum("pd,pd->p", mom.bias, mom.bias)
            res.per_prompt["bias_exact"] = np.sqrt(b2)
            if mom.trace_cov is not None:
                res.per_prompt["mse_exact"] = b2 + mom.trace_cov
        # Every generated token per prompt (prefixes included), for choice rows.
        share = plan.prefix_tokens / max(prefix_tokens(pop), 1e-300)
        res.per_prompt["generated"] = share * pop.prefix_len.sum(axis=1) + mom.tokens
    res.metrics.update(ex)
    res.metrics["budget_scale"] = float(plan.budget_scale)
    if plan.stages is not None:  # a two-stage row: the prefix width it ran
        res.metrics["prefix_width"] = float(plan.stages.width)
    res.metrics["alloc_ms"] = 1e3 * plan.alloc_seconds / P
    res.metrics["build_ms"] = 1e3 * plan.build_seconds / P
    if n_draws:
        rng = np.random.default_rng(_row_seed(cfg.seed, row.key))
        summaries = []
        t0 = time.perf_counter()
        try:
            for q in range(P):
                d = row_draws(row, plan, pop, L, q, n_draws, rng)
                exact_mean = (g[q] + mom.bias[q]) if mom is not None and mom.bias is not None \
                    else None
                summaries.append(summarise(d, g[q], exact_mean))
                if progress is not None:
                    progress(row.key, q + 1, P)
        except RowUnavailable as exc:
            res.status = f"unavailable: {exc}"
            return res
        seconds = time.perf_counter() - t0
        mc, flags = mc_summary(summaries, g, pop, mom, ex, cfg.alpha, plan)
        res.metrics.update(mc)
        res.flags.extend(flags)
        sample = sum(s.sample_seconds for s in summaries)
        res.metrics["sample_us"] = 1e6 * sample / (P * n_draws)
        res.metrics["draws_per_s"] = P * n_draws / seconds
        res.metrics["mc_seconds"] = seconds
        res.metrics["design_ms"] = (res.metrics["alloc_ms"] + res.metrics["build_ms"]
                                    + 1e3 * sample / (P * n_draws))
    else:
        res.metrics["design_ms"] = res.metrics["alloc_ms"] + res.metrics["build_ms"]
    return res


def _run_choice(row: ChoiceRow, done: dict[str, RowResult], pop: Population,
                cfg: AuditConfig) -> RowResult:
    """A choice row from its options' exact per-prompt results (no Monte Carlo of its own:
    its options are replayed)."""
    res = RowResult(key=row.key, label=row.label, group=row.group, unbiased=row.unbiased)
    opts = [done[k] for k in row.options]
    bad = [o.key for o in opts if not o.ok or "mse_exact" not in o.per_prompt]
    if bad:
        res.status = f"failed: options {bad} have no exact per-prompt MSE"
        return res
    choice, mse = cross_fitted_choice({o.key: o.per_prompt["mse_exact"] for o in opts},
                                      row.options, seed=cfg.seed,
                                      confidence=row.confidence, max_ratio=row.max_ratio)
    idx = np.arange(pop.n_prompts)

    def pick(name: str) -> np.ndarray:
        return np.stack([o.per_prompt[name] for o in opts])[choice, idx]

    bias, generated = pick("bias_exact"), pick("generated")
    res.exact_method = "choice"
    res.per_prompt.update(mse_exact=mse, bias_exact=bias, generated=generated,
                          choice=choice.astype(np.float64))
    share = [float(np.mean(choice == j)) for j in range(len(opts))]
    # What a step pays for its design: the chosen option's, weighted by how often it is chosen.
    res.metrics.update(mse_exact=float(mse.mean()), bias_exact=float(bias.mean()),
                       generated_exact=float(generated.sum() / whole_tokens(pop)),
                       design_ms=float(sum(w * o.metrics.get("design_ms", np.nan)
                                           for w, o in zip(share, opts) if w > 0)))
    for w, o in zip(share, opts):
        res.metrics[f"chose_{o.key}"] = w
    res.notes.append("per fold of prompts, from the other folds: " + ", ".join(
        f"{o.key} on {int(np.sum(choice == j))} of {pop.n_prompts} prompts"
        for j, o in enumerate(opts)))
    return res
