r"""PAIR's default: the width and estimator each step runs, decided from the run's own audits.

A training loop (the TRL trainer's ``width="auto"``, the default) audits a few prompts every
so often: every candidate generated to the end, so each option's exact MSE is known on them
(:func:`pairht.audit.width_advice`). :class:`AutoWidth` keeps the newest ``history`` audits,
pools their prompts, and picks with :func:`pairht.audit.width.choose_option` among
:data:`~pairht.audit.width.DEFAULT_OPTIONS`:

* ``"grpo_small"`` -- no prefixes, ``G'`` whole completions per prompt (small-group GRPO at
  the same generated tokens): kept unless history says, with
  :data:`~pairht.audit.width.DEFAULT_CONFIDENCE`, that a prefix option is better by the
  margin :data:`~pairht.audit.width.DEFAULT_MAX_RATIO`;
* ``"pair_dr_narrow"`` -- prefixes for a uniform subset of ``w`` candidates, the difference
  estimator among them;
* ``"pair_dr"`` -- prefixes for all ``G``, the difference estimator.

The audit row ``default`` makes the same choice per fold of prompts from the other folds
(cross-fitting stands in for "the groups seen so far"), so the audit measures what the trainer
runs. The choice never traps itself: audits keep coming whatever was chosen, and each audit
generates prefixes for every candidate, so a small-group GRPO verdict still collects what it
needs (prefix predictions on complete groups) to leave when the prefixes start paying.

Numpy and scipy only; a framework adapter calls :meth:`AutoWidth.observe` with a
:class:`~pairht.audit.population.Population` and applies the returned :class:`WidthDecision`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pairht.audit.advice import WidthAdvice, advice_from, narrow_rule, option_audit
from pairht.audit.population import Population
from pairht.audit.runner import AuditResult
from pairht.audit.width import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MAX_RATIO,
    DEFAULT_OPTIONS,
    NARROW_OPTIONS,
)

__all__ = ["AutoWidth", "WidthDecision", "decision_for"]

#: Audits pooled by default: the newest four (32 prompts at the trainer's 8 per audit).
HISTORY = 4


@dataclass(frozen=True)
class WidthDecision:
    """What to generate from the next step on (the arguments of a trainer's width switch).

    Attributes
    ----------
    width : {"whole", "prefixes", "subset"}
        No prefixes (small-group GRPO), prefixes for every candidate, or for a uniform subset.
    allocator : str or None
        The prefix rule (``None`` with ``"whole"``: the rule is not used).
    whole_group_size : float or None
        ``G'`` for ``"whole"``, clipped to ``[2, G]``.
    prefix_group_size : int or None
        ``w`` for ``"subset"``.
    advice : WidthAdvice
        The audit's verdict on the pooled history.
    reason : str
        One sentence for logs: which option runs and why.
    """

    width: str
    allocator: str | None
    whole_group_size: float | None
    prefix_group_size: int | None
    advice: WidthAdvice
    reason: str


def decision_for(advice: WidthAdvice, group_size: int) -> WidthDecision:
    """The width that runs ``advice.choice`` with ``group_size`` candidates per prompt; the
    safe option, small-group GRPO, when the advice has no verdict (every reward tied: as the
    audit's choice rows, whose argmin ties go to the first option).

    Examples
    --------
    >>> from pairht.audit.advice import WidthAdvice
    >>> adv = WidthAdvice("grpo_small", 1.2, 1.0, 1.4, group_size=9.3, generated=0.6)
    >>> d = decision_for(adv, 16)
    >>> d.width, d.whole_group_size
    ('whole', 9.3)
    """
    g = int(group_size)
    if advice.choice in ("grpo_small", "none"):
        size = float(min(max(advice.group_size, 2.0), g))
        return WidthDecision("whole", None, size, None, advice, advice.line())
    if advice.choice in NARROW_OPTIONS:
        return WidthDecision("subset", narrow_rule(advice.choice), None, advice.prefix_width,
                             advice, advice.line())
    return WidthDecision("prefixes", advice.choice, None, None, advice, advice.line())


class AutoWidth:
    """PAIR's default width choice from a run's audits (see the module docstring).

    Parameters
    ----------
    budget_ratio : float
        The run's suffix budget ratio (every option spends the same generated tokens).
    group_size : int
        ``G``, candidates per prompt.
    pi_min : float
        Continuation probability floor.
    options : sequence of str
        In order of preference, the first kept unless beaten (default
        :data:`~pairht.audit.width.DEFAULT_OPTIONS`).
    confidence, max_ratio : float or None, float
        :func:`~pairht.audit.width.choose_option`'s (default
        :data:`~pairht.audit.width.DEFAULT_CONFIDENCE`,
        :data:`~pairht.audit.width.DEFAULT_MAX_RATIO`).
    history : int
        Audits pooled (the newest ones).

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> auto = AutoWidth(0.5, 8)
    >>> d = auto.observe(synthetic_population(6, 8, prefix_tokens=8, rng=0), seed=0)
    >>> d.width in ("whole", "prefixes", "subset")
    True
    """

    def __init__(self, budget_ratio: float, group_size: int, *, pi_min: float = 0.08,
                 options: Sequence[str] = DEFAULT_OPTIONS,
                 confidence: float | None = DEFAULT_CONFIDENCE,
                 max_ratio: float = DEFAULT_MAX_RATIO, history: int = HISTORY) -> None:
        opts = tuple(options)
        if len(opts) < 2 or opts[0] != "grpo_small":
            raise ValueError(f"options must start with 'grpo_small' (the safe option) and name "
                             f"at least one prefix option; got options = {options!r}")
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be an int >= 1 (audits pooled); got "
                             f"history = {history!r}")
        self.budget_ratio = float(budget_ratio)
        self.group_size = int(group_size)
        self.pi_min = float(pi_min)
        self.options = opts
        self.confidence = confidence
        self.max_ratio = float(max_ratio)
        self.audits: deque[Population] = deque(maxlen=history)
        # each audit's exact option MSEs, computed once when it arrives (a population's
        # do not change as newer ones join the pool)
        self._results: deque[AuditResult] = deque(maxlen=history)

    def observe(self, population: Population, *, seed: int = 0) -> WidthDecision:
        """Add an audit and decide from the newest ``history`` ones (small-group GRPO when
        the pooled prompts carry no reward contrast)."""
        if population.group_size != self.group_size:
            raise ValueError(f"population has G = {population.group_size} candidates per "
                             f"prompt; this run has group_size = {self.group_size}")
        self.audits.append(population)
        self._results.append(option_audit(population, self.budget_ratio, pi_min=self.pi_min,
                                          seed=seed, options=self.options[1:]))
        adv = advice_from(list(self._results), self.group_size, self.options[1:], seed=seed,
                          confidence=self.confidence, max_ratio=self.max_ratio)
        return decision_for(adv, self.group_size)
