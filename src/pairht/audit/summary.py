r"""The audit's summary: PAIR against the best trivial baseline, with a bootstrap interval.

The baselines are the rows of group ``"baseline"`` (:data:`pairht.audit.rows.BASELINE_ROWS`:
uniform among unfinished, SRSWOR among unfinished, pointwise, small-group GRPO), all at the
same expected realised suffix tokens (GRPO: the same total generated tokens). The *best*
baseline is the one with the lowest exact MSE (mean over prompts) on the whole population;
it is chosen once and kept fixed in the bootstrap.

The interval is a percentile bootstrap over prompts (:func:`scipy.stats.bootstrap`, paired):
``B`` resamples of the ``P`` prompts with replacement (seeded), the ratio of mean exact
MSEs ``mean_q MSE_row / mean_q MSE_best`` on each, and the ``(1 - level)/2`` and
``(1 + level)/2`` quantiles. It measures how much the ratio depends on which prompts were
drawn (the exact MSEs have no Monte Carlo noise).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from pairht.audit.rows import ROWS

#: Bootstrap resamples of the summary interval.
N_BOOT = 2000


@dataclass(frozen=True)
class Comparison:
    """One row's exact MSE against the best baseline.

    Attributes
    ----------
    row, baseline : str
        Keys of the compared row and of the best baseline.
    ratio : float
        ``mean_q MSE_row / mean_q MSE_baseline`` (exact MSEs).
    low, high : float
        Percentile bootstrap interval of ``ratio`` over prompts at ``level``.
    ratios : dict
        ``ratio`` of *every* row with an exact MSE to the best baseline.
    """

    row: str
    baseline: str
    ratio: float
    low: float
    high: float
    level: float
    n_boot: int
    ratios: dict[str, float]

    def line(self) -> str:
        """The summary line the CLI prints."""
        base = ROWS[self.baseline].label if self.baseline in ROWS else self.baseline
        pct = round(100 * self.level)
        return (f"{self.row}: exact MSE {self.ratio:.3f}x the best baseline {self.baseline} "
                f"({base}); {pct}% bootstrap interval over prompts [{self.low:.3f}, "
                f"{self.high:.3f}] (percentile, B={self.n_boot})")


def ratio_interval(x: np.ndarray, ref: np.ndarray, *, n_boot: int = N_BOOT,
                   level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """``mean x / mean ref`` of per-prompt values and its percentile bootstrap interval over
    prompts (``n_boot`` resamples seeded by ``seed``; NaN ratio when ``mean ref`` is 0).

    Examples
    --------
    >>> import numpy as np
    >>> r, lo, hi = ratio_interval(np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0]))
    >>> r, bool(lo <= r <= hi)
    (1.0, True)
    """
    ratio = float(x.mean() / ref.mean()) if ref.mean() > 0 else math.nan
    if not np.isfinite(ratio):
        return ratio, math.nan, math.nan
    if x.shape[0] == 1:  # every resample is the one prompt (scipy asks for two or more)
        return ratio, ratio, ratio
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2000]))

    def mean_ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(a.mean(axis=axis) / b.mean(axis=axis))

    # paired: one index draw per resample for both arrays (rng.integers(0, P, (n_boot, P))).
    # a NaN or infinite resample ratio is handled below
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        boot = stats.bootstrap((x, ref), mean_ratio, paired=True, vectorized=True,
                               n_resamples=n_boot, method="percentile", rng=rng,
                               confidence_level=level).bootstrap_distribution
    if not np.isfinite(boot).any():
        return ratio, math.nan, math.nan
    # A resample whose reference mean is 0 has no ratio; scipy's own quantile would turn the
    # whole interval NaN (with a warning), so the quantiles are taken over the finite ones.
    with np.errstate(invalid="ignore"):  # inf - inf between two infinite ratios: NaN
        lo, hi = np.nanquantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return ratio, float(lo), float(hi)


def _per_prompt(result: Any, key: str) -> np.ndarray | None:
    try:
        r = result.row(key)
    except ValueError:
        return None
    mse = r.per_prompt.get("mse_exact") if r.ok else None
    return None if mse is None or not np.all(np.isfinite(mse)) else np.asarray(mse)


def compare_to_baselines(result: Any, row: str = "pair", *, baselines: tuple[str, ...] | None
                         = None, n_boot: int = N_BOOT, level: float = 0.95,
                         seed: int = 0) -> Comparison:
    """``row``'s exact MSE ratio to the best baseline, with a percentile bootstrap interval.

    Parameters
    ----------
    result : AuditResult
        An audit that ran ``row`` and at least one baseline with exact metrics.
    row : str
        The row to compare (default PAIR's default, ``"pair"``).
    baselines : tuple of str, optional
        Candidate baselines (default: every row of group ``"baseline"`` in ``result``).
    n_boot, level, seed : bootstrap resamples, interval level, seed.

    Raises
    ------
    ValueError
        If ``row`` or every baseline lacks a per-prompt exact MSE.

    Examples
    --------
    >>> from pairht.audit import run_audit, synthetic_population
    >>> res = run_audit(synthetic_population(8, 6, rng=0), ["uniform_ht", "srswor", "pair"],
    ...                 n_draws=0)
    >>> c = compare_to_baselines(res)
    >>> c.baseline in ("uniform_ht", "srswor"), c.low <= c.ratio <= c.high
    (True, True)
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1; got {n_boot!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1); got {level!r}")
    mine = _per_prompt(result, row)
    if mine is None:
        raise ValueError(f"row {row!r} has no per-prompt exact MSE in this audit (ran with "
                         f"exact metrics? status ok?)")
    keys = baselines if baselines is not None else tuple(
        r.key for r in result.rows if r.group == "baseline")
    cands = {k: m for k in keys if (m := _per_prompt(result, k)) is not None}
    if not cands:
        raise ValueError(f"no baseline row with an exact MSE in this audit; baselines: "
                         f"{list(keys)}")
    best = min(cands, key=lambda k: float(cands[k].mean()))
    ref = cands[best]
    ratio, lo, hi = ratio_interval(mine, ref, n_boot=n_boot, level=level, seed=seed)
    ratios = {}
    for r in result.rows:
        m = _per_prompt(result, r.key)
        if m is not None and ref.mean() > 0:
            ratios[r.key] = float(m.mean() / ref.mean())
    return Comparison(row=row, baseline=best, ratio=ratio, low=float(lo), high=float(hi),
                      level=level, n_boot=n_boot, ratios=ratios)
