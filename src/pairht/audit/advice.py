r"""Do the prefixes pay on a population? PAIR's default against small-group GRPO, exactly.

The audit of :mod:`pairht.audit.width`'s two options on one population (a live policy's, from
the TRL adapter's ``AuditCallback``, or a stored one), as a verdict a training loop can log
(:func:`width_advice`), and the exact MSE of the widths between them (:func:`two_stage_mse`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pairht.audit.base import AuditConfig
from pairht.audit.exact import two_stage_row_moments
from pairht.audit.population import Population
from pairht.audit.rows import ROWS, TwoStageRow
from pairht.audit.runner import AuditResult, run_audit
from pairht.audit.summary import ratio_interval
from pairht.audit.two_stage import plan_two_stage
from pairht.audit.width import (
    CONFIDENCE,
    N_BOOT,
    NARROW_OPTIONS,
    PREFIX_OPTIONS,
    choose_option,
)


@dataclass(frozen=True)
class WidthAdvice:
    """Whether the prefixes pay on a population, at one budget (:func:`width_advice`).

    Attributes
    ----------
    choice : str
        A prefix rule (``"pair"``: every prefix, then a subset continued, each prompt at its
        own budget; ``"pair_batch"``: the same with one budget for the batch;
        ``"pair_strata"``, ``"pair_dr"``: :data:`pairht.step.PREFIX_RULES`; ``"pair_dr_narrow"``:
        prefixes for a uniform subset only, :mod:`pairht.audit.two_stage`) or
        ``"grpo_small"`` (``G'`` whole completions): the prefix rule with the lower mean exact
        MSE (``option``), only when it is below GRPO's with the confidence ``pair_width`` asks
        of history (the :data:`pairht.audit.width.CONFIDENCE` quantile, corrected for the
        number of rules weighed, :func:`~pairht.audit.width.corrected_confidence`, of the
        bootstrap ratio over prompts below 1); ``"none"`` when every prompt's rewards tie (all
        MSEs 0, ``ratio`` NaN).
    ratio : float
        ``mean_q MSE_option / mean_q MSE_grpo_small`` (< 1: the prefixes pay).
    low, high : float
        95% percentile bootstrap interval of ``ratio`` over prompts.
    group_size : float
        ``G'``: the whole completions per prompt that cost what PAIR generates.
    generated : float
        What both generate, over the tokens of generating every candidate whole.
    option : str
        The prefix rule ``ratio`` is about: of the rules asked about, the one with the lower
        mean exact MSE (the first on a tie).
    prefix_width : int or None
        The prefixes per prompt ``option`` generates when it is a narrower width
        (:data:`~pairht.audit.width.NARROW_OPTIONS`: the ``w`` of a uniform ``w``-subset,
        ``width="subset"`` in the TRL trainer), else ``None`` (every candidate).
    """

    choice: str
    ratio: float
    low: float
    high: float
    group_size: float
    generated: float
    option: str = "pair"
    prefix_width: int | None = None

    def line(self) -> str:
        """One sentence for logs."""
        if self.choice == "none":
            return ("no verdict: every prompt's rewards tie in this population (both exact MSEs "
                    "are 0), so it cannot tell PAIR from small-group GRPO")
        verdict = (f"the prefixes pay ({self.choice})" if self.choice != "grpo_small" else
                   f"small-group GRPO with G' = {self.group_size:.2f} whole completions is better")
        return (f"PAIR's ({self.option}) exact MSE is {self.ratio:.3f}x small-group GRPO's at "
                f"the same "
                f"generated tokens ({self.generated:.3f} of generating every candidate whole; "
                f"95% interval over prompts [{self.low:.3f}, {self.high:.3f}]): {verdict}")


def width_advice(population: Population | Sequence[Population], budget_ratio: float = 0.5, *,
                 pi_min: float = 0.08, seed: int = 0,
                 options: Sequence[str] = PREFIX_OPTIONS,
                 confidence: float | None = CONFIDENCE,
                 max_ratio: float = 1.0) -> WidthAdvice:
    r"""Do the prefixes pay on ``population``? PAIR against small-group GRPO, exactly.

    Runs the audit's prefix options ``options`` (default
    :data:`pairht.audit.width.PREFIX_OPTIONS`: the step's rules ``pair``, ``pair_batch``,
    ``pair_strata``, ``pair_dr``, then ``pair_dr_narrow``) and ``grpo_small`` (``G'`` whole
    completions at PAIR's total generated tokens) at ``budget_ratio`` with exact metrics only,
    on each population given (the prompts of several populations are pooled: a training run's
    audits so far); takes the prefix rule with the lower mean exact MSE and reports its ratio
    to GRPO with a bootstrap interval over prompts. The verdict is
    :func:`pairht.audit.width.choose_option` over ``("grpo_small", *options)`` at
    ``confidence`` and ``max_ratio`` (a prefix rule only when its ratio to GRPO is
    confidently at most the margin): ``pair_width``'s rule with the defaults, PAIR's default
    (``width="auto"``) with :data:`~pairht.audit.width.DEFAULT_OPTIONS`,
    :data:`~pairht.audit.width.DEFAULT_CONFIDENCE` and
    :data:`~pairht.audit.width.DEFAULT_MAX_RATIO`. A population from the live policy (the
    TRL adapter's ``AuditCallback``) is the history a width choice reads.

    ``group_size`` and ``prefix_width`` are the last population's (the newest audit's).

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> adv = width_advice(synthetic_population(6, 8, prefix_tokens=8, rng=0), 0.5)
    >>> adv.choice in ("grpo_small", *PREFIX_OPTIONS), adv.low <= adv.ratio <= adv.high
    (True, True)
    """
    opts = _prefix_options(options)
    pops = [population] if isinstance(population, Population) else list(population)
    if not pops or not all(isinstance(p, Population) for p in pops):
        raise ValueError(f"population must be a Population or a non-empty sequence of them; "
                         f"got {type(population).__name__}")
    results = [option_audit(p, budget_ratio, pi_min=pi_min, seed=seed, options=opts)
               for p in pops]
    return advice_from(results, pops[-1].group_size, opts, seed=seed, confidence=confidence,
                       max_ratio=max_ratio)


def _prefix_options(options: Sequence[str]) -> list[str]:
    opts = list(options)
    if not opts or len(set(opts)) != len(opts) or "grpo_small" in opts:
        raise ValueError(f"options must name distinct prefix rules (audit rows other than "
                         f"'grpo_small'); got options = {options!r}")
    return opts


def option_audit(population: Population, budget_ratio: float, *, pi_min: float = 0.08,
                 seed: int = 0, options: Sequence[str] = PREFIX_OPTIONS) -> AuditResult:
    """The exact audit of ``grpo_small`` and ``options`` on one population (no Monte Carlo):
    what :func:`width_advice` reads, computed once per population (a run's pooled audits keep
    theirs, :class:`pairht.audit.AutoWidth`)."""
    cfg = AuditConfig(budget_ratio=budget_ratio, pi_min=pi_min, seed=seed)
    return run_audit(population, rows=["grpo_small", *_prefix_options(options)], config=cfg,
                     n_draws=0)


def advice_from(results: Sequence[AuditResult], group_size: int, options: Sequence[str], *,
                seed: int = 0, confidence: float | None = CONFIDENCE,
                max_ratio: float = 1.0) -> WidthAdvice:
    """:func:`width_advice`'s verdict from audits already run (:func:`option_audit`), their
    prompts pooled; ``group_size`` and ``prefix_width`` are the last audit's."""
    opts = _prefix_options(options)
    keys = ("grpo_small", *opts)
    mse = {k: np.concatenate([r.row(k).per_prompt["mse_exact"] for r in results])
           for k in keys}
    best = opts[int(np.argmin([mse[k].mean() for k in opts]))]  # ties: the first
    ratio, low, high = ratio_interval(mse[best], mse["grpo_small"], seed=seed)
    # A population without reward contrast has MSE 0 for every option (ratio NaN): no
    # verdict. A prefix rule only when it is confidently better (choose_option).
    picked = keys[choose_option(np.stack([mse[k] for k in keys]), confidence, N_BOOT,
                                np.random.default_rng(np.random.SeedSequence([int(seed), 37])),
                                max_ratio=max_ratio)]
    grpo, last = results[-1].row("grpo_small"), results[-1].row(best)
    return WidthAdvice(choice="none" if not np.isfinite(ratio) else picked, ratio=ratio,
                       low=low, high=high,
                       group_size=float(grpo.metrics["budget_scale"]) * group_size,
                       generated=float(grpo.metrics["generated_exact"]), option=best,
                       prefix_width=(int(last.metrics["prefix_width"])
                                     if "prefix_width" in last.metrics else None))


def two_stage_mse(population: Population, budget_ratio: float, width: int, *,
                  row: str = "pair", pi_min: float = 0.08, seed: int = 0,
                  max_subsets: int = 5000) -> tuple[np.ndarray, float]:
    r"""Exact per-prompt MSE of PAIR at prefix width ``width``, by enumerating the subsets.

    The design: a uniform ``width``-subset ``S`` of the ``G`` candidates gets prefixes, and
    ``row`` (PAIR's default) runs among them at the budget ``b_w`` that spends what ``row``
    spends at full width and ``budget_ratio`` (pooled over prompts); the estimate is ``row``'s
    estimate of ``g_S``, the pair average over ``S``. Since it is unbiased for ``g_S`` given
    ``S`` and ``E[g_S] = g``,

    .. math:: \mathrm{MSE} = \frac{1}{\binom{G}{w}} \sum_{S}
              \left(\lVert g_S - g \rVert^2 + \mathrm{MSE}_{row}(S)\right),

    both terms exact (the first from the population's pseudo-scores, the second the audit's
    exact MSE of the sub-population ``S``): :func:`pairht.audit.exact.two_stage_row_moments`,
    as the two-stage audit rows (:mod:`pairht.audit.two_stage`). ``width = G`` is ``row``
    itself.

    Returns
    -------
    mse : ndarray, shape (P,)
    budget : float
        ``b_w``, the realised suffix budget ratio among the ``width`` candidates.

    Raises
    ------
    ValueError
        If ``C(G, width) > max_subsets``, or ``b_w`` is outside ``[pi_min, 1]`` (the width
        cannot spend the tokens: below ``G'`` or too close to it).
    """
    cfg = AuditConfig(budget_ratio=budget_ratio, pi_min=pi_min, seed=seed)
    ts = plan_two_stage(population, cfg, width, ROWS[row], max_subsets=max_subsets)
    mom = two_stage_row_moments(ts, population, population.reduced_scores())
    assert mom.bias is not None and mom.trace_cov is not None  # rows with exact moments
    return np.einsum("pd,pd->p", mom.bias, mom.bias) + mom.trace_cov, ts.config.budget_ratio


def narrow_rule(option: str) -> str:
    """The step rule a narrower-width option runs among its subset (its audit row's
    ``inner``), e.g. ``"pair_dr"`` for ``"pair_dr_narrow"``: the allocator of the TRL
    trainer's ``width="subset"`` for that option.

    Examples
    --------
    >>> narrow_rule("pair_dr_narrow")
    'pair_dr'
    """
    if option not in NARROW_OPTIONS:
        raise ValueError(f"option must be one of NARROW_OPTIONS {NARROW_OPTIONS}; got "
                         f"option = {option!r}")
    row = ROWS[option]
    assert isinstance(row, TwoStageRow)  # every narrower-width option is one
    return row.inner
