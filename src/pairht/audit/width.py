r"""PAIR that decides its prefix width from history: prefixes for all, or whole completions.

A prefix design generates a prefix for each of the ``G`` candidates and then the selected
suffixes; at the same total generated tokens, small-group GRPO generates ``G'`` whole
completions and no prefixes. Which one has the lower gradient MSE depends on the population:
where the prefix is a large share of each completion (short answers, a late checkpoint) or the
heads carry little within-group signal, the prefixes cost more than selection recovers and
GRPO wins (docs/audit.md, issue 14). A *width choice* runs whichever of its options had the
lower exact MSE on the groups it has already seen, and leaves the safe option (small-group
GRPO) only when history says so with confidence (:data:`CONFIDENCE`), so it is never worse
than the better option by more than what history mispredicts, and equal to it when history is
clear.

In the audit, "history" is **cross-fitting by prompt**: the prompts are split into ``K``
folds (seeded); the option chosen for the prompts of fold ``k`` is the one with the lower
mean exact MSE over the prompts of the *other* folds, and the row's exact MSE on a prompt is
its chosen option's. The choice never sees the prompt it is scored on, as a training step
never sees the groups it has not generated yet. Both options spend the same expected total
generated tokens (small-group GRPO is matched to the prefix design's total, pooled over
prompts), so the choice does too, up to how the per-prompt totals differ.

Exact
-----
Each option's per-prompt exact MSE (bias and covariance from the design's inclusion
probabilities) is the audit's own; the choice adds no approximation: the choice row's
per-prompt MSE is a selection of exact values. Its Monte Carlo consistency is that of its
options, which the audit replays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pairht.step.allocators import PREFIX_RULES

#: Folds of the cross-fitted choice (fewer when there are fewer prompts).
N_FOLDS = 4

#: One-sided bootstrap confidence with which an option must beat the first (the preferred,
#: small-group GRPO in ``pair_width``) on the seen prompts to be chosen, before the
#: Bonferroni correction over the challengers (:func:`corrected_confidence`: 0.99 with five).
#: The lowest of {none, 0.75, 0.9, 0.95} that keeps ``pair_width`` at or below the best
#: baseline, interval included, on every population measured with the options it weighs now
#: (at 0.75 and 0.9 it chose the narrower width on a fold of the step-by-step population at
#: tau 8, budget 0.5, where it lost: 1.021 [0.966, 1.088]) and keeps every hindsight gain
#: (docs/audit.md, "PAIR deciding its width";
#: ``python benchmarks/width_rule.py --options all``).
CONFIDENCE = 0.95


def corrected_confidence(confidence: float, n_challengers: int) -> float:
    """The per-comparison level that keeps ``confidence`` over ``n_challengers`` options
    weighed against the first: Bonferroni, ``1 - (1 - confidence) / n_challengers``.

    Why: the fold picks the best of several options by the same seen prompts, so the more
    options, the likelier one looks better by luck (with four prefix rules and the flat 0.75,
    ``pair_width`` chose the difference estimator on folds of a 12-prompt population where it
    lost, 1.09x GRPO). With the correction it keeps GRPO there and every measured gain.

    Examples
    --------
    >>> corrected_confidence(0.75, 4)
    0.9375
    """
    return 1.0 - (1.0 - confidence) / max(int(n_challengers), 1)

#: Bootstrap resamples of the seen prompts per fold.
N_BOOT = 400

#: The prefix options at a narrower width (audit rows, :mod:`pairht.audit.two_stage`): the
#: difference estimator with prefixes for a uniform subset half way from ``G`` toward
#: small-group GRPO's ``G'``. The TRL trainer runs one as ``width="subset"`` with the row's
#: inner rule as allocator (:func:`pairht.audit.narrow_rule`).
NARROW_OPTIONS: tuple[str, ...] = ("pair_dr_narrow",)


#: The prefix options a width choice weighs against small-group GRPO (audit row keys):
#: the step's rules at full width (:data:`pairht.step.PREFIX_RULES`, also allocator names:
#: PAIR's default, each prompt at its own budget, PAIR with one budget for the batch,
#: predicted outcomes as strata and the difference estimator at Neyman's allocation), then
#: :data:`NARROW_OPTIONS` (``pair_width``'s options after GRPO;
#: :func:`pairht.audit.width_advice`).
PREFIX_OPTIONS: tuple[str, ...] = (*PREFIX_RULES, *NARROW_OPTIONS)

#: What PAIR runs by default (the audit row ``default``; the TRL trainer's ``width="auto"``),
#: in order of preference: small-group GRPO (``G'`` whole completions, no prefixes: the safe
#: option, kept unless beaten), the difference estimator among prefixes for a uniform subset
#: (``pair_dr_narrow``), the difference estimator with prefixes for all ``G`` (``pair_dr``).
#: Why these: on every population measured, one of them is the best prefix option or within
#: its interval (docs/audit.md, "PAIR's default"), and each added option costs the choice
#: confidence (:func:`corrected_confidence`).
DEFAULT_OPTIONS: tuple[str, ...] = ("grpo_small", "pair_dr_narrow", "pair_dr")

#: One-sided bootstrap confidence with which history must put a prefix option's MSE ratio to
#: small-group GRPO at or below :data:`DEFAULT_MAX_RATIO` before the default leaves GRPO
#: (before the Bonferroni correction over its two challengers). Chosen on the tuning
#: populations of docs/audit.md ("PAIR's default": SmolLM2, synthetic, and two paper-regime
#: draws) as the lowest level that keeps the default at or below the best baseline, interval
#: included, in every tuning cell under both cross-fittings
#: (``python benchmarks/default_rule.py``); the held-out populations test it.
DEFAULT_CONFIDENCE = 0.75

#: The largest ratio of a prefix option's mean exact MSE to small-group GRPO's on the seen
#: prompts with which the default leaves GRPO, asked with :data:`DEFAULT_CONFIDENCE`: a gain
#: of at least 15%. Why a margin
#: beside the confidence: per-prompt MSEs are heavy tailed, and on the real SmolLM2 populations
#: where the narrower width is level with GRPO (0.92-1.02x) a confident choice still flips on
#: the few prompts that dominate the mean, and a flip costs what those prompts cost
#: (docs/audit.md, "PAIR's default"); where the prefixes pay they pay by far more than 15%.
DEFAULT_MAX_RATIO = 0.85


def prompt_folds(n_prompts: int, *, n_folds: int = N_FOLDS, seed: int = 0) -> np.ndarray:
    """Fold index of every prompt: a seeded permutation cut into ``min(n_folds, P)`` parts.

    Examples
    --------
    >>> prompt_folds(6, n_folds=3, seed=0).tolist()
    [0, 1, 0, 2, 1, 2]
    """
    if isinstance(n_prompts, bool) or not isinstance(n_prompts, (int, np.integer)) \
            or n_prompts < 1:
        raise ValueError(f"n_prompts must be an int >= 1; got {n_prompts!r}")
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 1:
        raise ValueError(f"n_folds must be an int >= 1; got {n_folds!r}")
    k = min(int(n_folds), int(n_prompts))
    order = np.random.default_rng(np.random.SeedSequence([int(seed), 31])).permutation(
        int(n_prompts))
    folds = np.empty(int(n_prompts), dtype=np.int64)
    for f, part in enumerate(np.array_split(order, k)):
        folds[part] = f
    return folds


def confidently_lower(x: np.ndarray, ref: np.ndarray, confidence: float, n_boot: int,
                      rng: np.random.Generator, *, bound: float = 1.0) -> bool:
    """Whether ``mean x / mean ref`` is below 1 and at most ``bound`` with one-sided bootstrap
    confidence.

    ``x``, ``ref``: per-prompt values of the same prompts. True when the ``confidence``
    quantile of the ratio over ``n_boot`` resamples of the prompts (drawn from ``rng``) is
    below 1 (a tie is no gain) and at most ``bound`` (a resample whose ``ref`` mean is 0
    counts as ratio infinity).

    Examples
    --------
    >>> import numpy as np
    >>> gen = np.random.default_rng(0)
    >>> confidently_lower(np.full(20, 0.5), np.ones(20), 0.75, 100, gen)
    True
    >>> confidently_lower(np.array([0.1, 0.1, 0.1, 9.0]), np.ones(4), 0.75, 100, gen)
    False
    >>> confidently_lower(np.full(20, 0.9), np.ones(20), 0.75, 100, gen, bound=0.85)
    False
    """
    take = rng.integers(x.size, size=(int(n_boot), x.size))
    base = ref[take].mean(axis=1)
    ratio = np.divide(x[take].mean(axis=1), base, out=np.full(base.shape, np.inf),
                      where=base > 0)
    q = float(np.quantile(ratio, confidence))
    return q < 1.0 and q <= bound


def cross_fitted_choice(mse: Mapping[str, np.ndarray], options: Sequence[str], *,
                        n_folds: int = N_FOLDS, seed: int = 0,
                        confidence: float | None = CONFIDENCE, n_boot: int = N_BOOT,
                        max_ratio: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    r"""Choose an option per fold from the other folds' exact MSEs.

    For the prompts of fold ``k`` the candidate is ``o* = argmin_o mean_{q not in fold k}
    mse[o][q]`` (ties and a fold with no other prompts go to the first of ``options``). With
    ``confidence`` set, ``o*`` other than the first is chosen only if it beats the first
    *confidently* on the seen prompts: the ``confidence`` quantile of the ratio
    ``mean mse[o*] / mean mse[first]`` over ``n_boot`` bootstrap resamples of the seen prompts
    (seeded by ``seed``) is below 1, the level corrected for the ``len(options) - 1``
    challengers (:func:`corrected_confidence`); otherwise the first. Why: per-prompt MSEs are heavy
    tailed, so the plain argmin over a few dozen prompts sometimes picks an option that is
    worse on the rest, and the first option is the safe one (small-group GRPO, which generates
    no prefixes).

    Parameters
    ----------
    mse : mapping of str to ndarray, shape (P,)
        Per-prompt exact MSE of every option.
    options : sequence of str
        The options, in order of preference (the first is kept unless beaten).
    n_folds, seed : folds of :func:`prompt_folds` (``seed`` also seeds the bootstrap).
    confidence : float in (0, 1) or None
        None: the plain argmin. Default :data:`CONFIDENCE`.
    n_boot : int
        Bootstrap resamples per fold.
    max_ratio : float
        :func:`choose_option`'s margin (1: none).

    Returns
    -------
    choice : ndarray of int, shape (P,)
        Index into ``options`` of the option run on each prompt.
    chosen_mse : ndarray, shape (P,)
        ``mse[options[choice[q]]][q]``.

    Examples
    --------
    >>> import numpy as np
    >>> mse = {"a": np.array([1.0, 1.0, 1.0, 1.0]), "b": np.array([2.0, 0.5, 0.5, 0.5])}
    >>> choice, chosen = cross_fitted_choice(mse, ["a", "b"], n_folds=4, confidence=None)
    >>> [["a", "b"][c] for c in choice], chosen.tolist()
    (['b', 'a', 'a', 'a'], [2.0, 1.0, 1.0, 1.0])
    """
    if confidence is not None and not (isinstance(confidence, (int, float))
                                       and not isinstance(confidence, bool)
                                       and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be a number in (0, 1) or None; got "
                         f"confidence = {confidence!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1; got n_boot = {n_boot!r}")
    opts = list(options)
    if len(opts) < 2 or len(set(opts)) != len(opts):
        raise ValueError(f"options must name at least two distinct options; got {opts!r}")
    missing = [o for o in opts if o not in mse]
    if missing:
        raise ValueError(f"mse has no per-prompt MSE for options {missing}; it has "
                         f"{sorted(mse)}")
    table = np.stack([np.asarray(mse[o], dtype=np.float64) for o in opts])
    if table.ndim != 2 or not np.all(np.isfinite(table)):
        raise ValueError(f"mse must hold one finite (P,) array per option; shapes "
                         f"{[np.shape(mse[o]) for o in opts]}")
    P = table.shape[1]
    folds = prompt_folds(P, n_folds=n_folds, seed=seed)
    choice = np.zeros(P, dtype=np.int64)
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), 37]))
    for f in np.unique(folds):
        seen = np.flatnonzero(folds != f)
        if not seen.size:
            continue
        choice[folds == f] = choose_option(table[:, seen], confidence, n_boot, gen,
                                           max_ratio=max_ratio)
    return choice, table[choice, np.arange(P)]


def choose_option(seen: np.ndarray, confidence: float | None, n_boot: int,
                  rng: np.random.Generator, *, max_ratio: float = 1.0) -> int:
    r"""The option history picks: the one rule shared by the audit's choice rows and the
    trainer's ``width="auto"``.

    ``seen[o, q]`` is option ``o``'s exact MSE on seen prompt ``q``; option 0 is the safe one.
    The candidate is ``o* = argmin_o mean_q seen[o, q]`` (ties: the earlier option). It is
    kept (``o* != 0``) only if ``mean seen[o*] <= max_ratio * mean seen[0]`` (a margin) and,
    with ``confidence`` set, the ratio ``mean seen[o*] / mean seen[0]`` is at most
    ``max_ratio`` (and below 1) with that confidence (:func:`confidently_lower` with
    ``bound=max_ratio``), at the level corrected for the ``n_options - 1`` challengers
    (:func:`corrected_confidence`); otherwise 0. The confidence is asked of the margin, not
    of any gain: a ratio of 0.72 whose bootstrap puts 0.86 within reach is not evidence of
    a 15% gain (docs/audit.md, "PAIR's default", on why that matters with heavy-tailed
    per-prompt MSEs). With ``max_ratio = 1`` (``pair_width``) the two read the same.

    Parameters
    ----------
    seen : ndarray, shape (n_options, n_seen)
        Per-prompt exact MSEs of the seen prompts, options in order of preference.
    confidence : float in (0, 1) or None
        None: the plain argmin.
    n_boot : int
        Bootstrap resamples of the seen prompts.
    rng : numpy.random.Generator
        Draws the bootstrap resamples.
    max_ratio : float in (0, 1]
        The margin: 1 asks only that ``o*`` be lower; 0.85 that it be 15% lower
        (:data:`DEFAULT_MAX_RATIO`), with ``confidence`` if set.

    Returns
    -------
    int
        Index of the chosen option.

    Examples
    --------
    >>> import numpy as np
    >>> seen = np.array([[1.0, 1.0, 1.0, 1.0], [0.5, 0.4, 0.6, 0.5]])
    >>> choose_option(seen, 0.9, 200, np.random.default_rng(0))
    1
    >>> choose_option(np.array([[1.0, 1.0], [0.1, 5.0]]), None, 200, np.random.default_rng(0))
    0
    """
    table = np.asarray(seen, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] < 2 or table.shape[1] < 1 \
            or not np.all(np.isfinite(table)):
        raise ValueError(f"seen must be a finite (n_options >= 2, n_seen >= 1) array; got "
                         f"shape {table.shape}")
    if not (isinstance(max_ratio, (int, float)) and not isinstance(max_ratio, bool)
            and 0.0 < max_ratio <= 1.0):
        raise ValueError(f"max_ratio must be a number in (0, 1]; got max_ratio = "
                         f"{max_ratio!r}")
    means = table.mean(axis=1)
    # argmin returns the first minimum: ties go to the earlier option.
    best = int(np.argmin(means))
    if best and means[best] > max_ratio * means[0]:
        return 0
    if best and confidence is not None:
        # the best of n_options - 1 challengers is tested: the level is corrected for them
        level = corrected_confidence(confidence, table.shape[0] - 1)
        if not confidently_lower(table[best], table[0], level, n_boot, rng, bound=max_ratio):
            best = 0
    return best
