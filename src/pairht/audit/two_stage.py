r"""Prefixes for a uniform subset only: a design between small-group GRPO and full width.

A *two-stage* design draws a uniform ``w``-subset ``S`` of each prompt's ``G`` candidates,
generates the prefixes of ``S`` only, and runs an inner row (a prefix rule, e.g. the
difference estimator ``pair_dr``) among them; its estimate is the inner row's estimate of
``g_S``, the pair average over ``S``. Since the inner estimate is unbiased for ``g_S`` given
``S`` and ``E_S[g_S] = g`` (a uniform subset's pair average is a U-statistic of the group's),
the whole is unbiased for ``g``, and

.. math:: \mathrm{MSE} = \frac{1}{\binom{G}{w}} \sum_{S}
          \left(\lVert g_S + b_S - g \rVert^2 + T_S\right),

with ``b_S`` and ``T_S`` the inner row's exact bias and covariance trace on the
sub-population ``S``: exact, by enumerating the ``C(G, w)`` subsets.

**Cost.** At width ``w`` the expected prefix tokens are ``(w/G) sum_i prefix_i``; the inner
row's suffix budget ratio ``b_w`` (of the subsets' full cost, pooled) is solved so that the
expected total generated tokens equal full-width PAIR's at ``budget_ratio``, which small-group
GRPO's ``G'`` also matches: narrowing buys suffixes with the prefixes it does not generate.
``w = G`` is the inner row itself; ``w = G'`` with no prefix is small-group GRPO.

**Why.** Where two thirds of the answers end inside the prefix (SmolLM2 short answers at
``tau = 32``) a full-width prefix design pays for ``G`` prefixes before choosing anything, and
no design that generates every prefix reaches 0.80x small-group GRPO's MSE there (the
Godambe-Joshi bound, :mod:`pairht.audit.bounds`). The width rule :func:`narrow_width` takes
half the distance from ``G`` toward ``G'``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairht.audit.base import AuditConfig, finished_mask, prefix_tokens, suffix_costs
from pairht.audit.population import Population
from pairht.step.subset import check_prefix_width as check_width
from pairht.step.subset import subset_budget_ratio


def subset_population(population: Population, width: int) -> tuple[Population, np.ndarray]:
    """Every ``width``-subset of every prompt's candidates as a prompt of its own.

    Returns the population of ``P * C(G, width)`` prompts (prompt-major, subsets in
    :func:`itertools.combinations` order) and the subsets, shape ``(C(G, width), width)``.

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> sub, idx = subset_population(synthetic_population(2, 4, rng=0), 3)
    >>> sub.n_prompts, sub.group_size, idx.tolist()
    (8, 3, [[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])
    """
    w = check_width(width, population.group_size)
    idx = np.array(list(itertools.combinations(range(population.group_size), w)),
                   dtype=np.int64)
    P = population.n_prompts

    def take(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a[q][idx] for q in range(P)])

    gram = population.gram_matrix()
    sub = Population(
        p_hat=take(population.p_hat), c_hat=take(population.c_hat),
        rewards=take(population.rewards), costs=take(population.costs),
        prefix_len=take(population.prefix_len),
        gram=np.concatenate([gram[q][idx[:, :, None], idx[:, None, :]] for q in range(P)]),
        m_hat=None if population.m_hat is None else take(population.m_hat),
        finished=take(finished_mask(population)), meta=dict(population.meta))
    return sub, idx


def whole_group_ratio(population: Population, budget_ratio: float) -> float:
    r"""``G'/G`` of small-group GRPO at full-width PAIR's total generated tokens:
    ``(sum prefix + budget_ratio sum_{unfinished} C) / sum (prefix + C)`` (pooled)."""
    C = suffix_costs(population)
    total = prefix_tokens(population) + budget_ratio * float(C.sum())
    return float(total / (population.prefix_len + C).sum())


def width_budget(population: Population, budget_ratio: float, width: int) -> float:
    r"""The suffix budget ratio ``b_w`` at which width ``width`` spends full-width PAIR's
    expected total tokens at ``budget_ratio``: with share ``s = w/G``,
    ``s (sum prefix + b_w sum C) = sum prefix + budget_ratio sum C`` (pooled; may exceed 1,
    when the width is at or below ``G'`` and cannot spend the tokens).

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> pop = synthetic_population(3, 8, rng=0)
    >>> round(width_budget(pop, 0.5, 8), 12)
    0.5
    """
    w = check_width(width, population.group_size)
    return subset_budget_ratio(prefix_tokens(population), float(suffix_costs(population).sum()),
                               budget_ratio, w / population.group_size)


#: The most subsets per prompt the audit enumerates for a two-stage row (``C(G, w)``).
MAX_SUBSETS = 5000


def narrow_width(G: int, g_prime: float, *, max_subsets: int | None = None) -> int:
    """The width rule: half way from ``G`` toward small-group GRPO's ``G'`` (rounded half up),
    at least the first integer above ``G'`` and at most ``G``; with ``max_subsets``, moved
    toward ``G`` until ``C(G, w) <= max_subsets`` (the audit enumerates the subsets: at
    ``G = 16`` the widths 11 to 16).

    Examples
    --------
    >>> narrow_width(16, 12.68), narrow_width(8, 5.1), narrow_width(16, 15.9)
    (14, 7, 16)
    >>> narrow_width(16, 4.93), narrow_width(16, 4.93, max_subsets=5000)
    (10, 11)
    """
    if not (isinstance(G, (int, np.integer)) and G >= 2):
        raise ValueError(f"G must be an int >= 2; got G = {G!r}")
    if not (math.isfinite(g_prime) and 0.0 < g_prime <= G):
        raise ValueError(f"g_prime must be a number in (0, G = {G}]; got g_prime = {g_prime!r}")
    if max_subsets is not None and not (isinstance(max_subsets, (int, np.integer))
                                        and max_subsets >= 1):
        raise ValueError(f"max_subsets must be an int >= 1 or None; got {max_subsets!r}")
    half = math.floor((G + g_prime) / 2.0 + 0.5)
    w = int(min(G, max(half, math.floor(g_prime) + 1)))
    while max_subsets is not None and math.comb(G, w) > max_subsets:
        w += 1  # C(G, G) = 1: ends at G at the latest
    return w


@dataclass
class TwoStage:
    """What a two-stage row runs: the width, its subsets and the inner row's plan on them.

    ``sub`` is :func:`subset_population` of the population at ``width`` (prompt ``q``'s
    subset ``s`` is sub-prompt ``q * len(subsets) + s``), ``inner`` the inner row, ``plan``
    its plan on ``sub`` under ``config`` (the suffix budget ``b_w``), ``L`` the sub-population's
    pseudo-scores: the rows of the population's reduced scores (``L_S L_S^T = K_SS``), so that
    the inner row's bias and the subsets' targets share the population's coordinates.
    """

    width: int
    subsets: np.ndarray
    sub: Population
    inner: Any
    plan: Any
    config: AuditConfig
    L: np.ndarray

    @property
    def n_subsets(self) -> int:
        return int(self.subsets.shape[0])


def plan_two_stage(population: Population, cfg: AuditConfig, width: int, inner: Any,
                   *, max_subsets: int = MAX_SUBSETS) -> TwoStage:
    """Plan ``inner`` (an audit row) on every ``width``-subset at the matched budget ``b_w``.

    Raises
    ------
    ValueError
        If ``C(G, width) > max_subsets``, or ``b_w`` lies outside ``[cfg.pi_min, 1]`` (the
        width cannot spend the tokens: at or below ``G'``, or too close to it).
    """
    G = population.group_size
    w = check_width(width, G)
    n_sub = math.comb(G, w)
    if n_sub > max_subsets:
        raise ValueError(f"width {w} of G = {G} has {n_sub} subsets per prompt > "
                         f"max_subsets = {max_subsets}")
    b_w = width_budget(population, cfg.budget_ratio, w)
    if not cfg.pi_min <= b_w <= 1.0 + 1e-12:
        raise ValueError(f"width {w} spends the target tokens only at a suffix budget ratio of "
                         f"{b_w:.4f}, outside [pi_min = {cfg.pi_min}, 1]")
    sub, idx = subset_population(population, w)
    sub_cfg = AuditConfig(budget_ratio=min(b_w, 1.0), pi_min=cfg.pi_min, proxy=cfg.proxy,
                          n_orders=cfg.n_orders, enum_limit=cfg.enum_limit, alpha=cfg.alpha,
                          seed=cfg.seed)
    plan = inner.plan(sub, sub_cfg, {})
    L = population.reduced_scores()
    L_sub = np.concatenate([L[q][idx] for q in range(population.n_prompts)])
    return TwoStage(width=w, subsets=idx, sub=sub, inner=inner, plan=plan, config=sub_cfg,
                    L=L_sub)
