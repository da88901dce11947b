r"""What every part of the audit shares: the settings, a row's plan, and realised accounting.

Imports run one way: :mod:`~pairht.audit.base` <- :mod:`~pairht.audit.rows` (what a row
*declares* and how it plans its design) and :mod:`~pairht.audit.exact` /
:mod:`~pairht.audit.montecarlo` (how a declared estimator is evaluated) <-
:mod:`~pairht.audit.runner`. Rows never import the evaluators and the evaluators never
import the rows.

Realised accounting
-------------------
A candidate whose prefix already ended (``finished``) is complete: it is kept with
probability 1 and costs nothing more. Its suffix cost is 0 whatever the population stores in
``costs`` (the format requires ``costs > 0``). The *full cost* of a prompt is the realised
suffix tokens of its unfinished candidates, ``sum_{i unfinished} C_i``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from pairht._validation import check_budget_ratio
from pairht.audit.population import Population
from pairht.estimators import VARIANTS, token_counts

#: How a row's estimate is formed from its design: ``"ht"`` (weights from the design's own
#: joint inclusions, any :data:`pairht.estimators.VARIANTS` weighting), ``"conditional_ht"``
#: (a :class:`~pairht.designs.MixedSize` design: exact HT weights of the component the sample
#: came from, identified by its size; for SRSWOR components this is the plain pair average,
#: i.e. GRPO's RLOO estimate), ``"edge"`` (direct edge sampling) and ``"choice"`` (per prompt,
#: the estimate of another row chosen from history: :mod:`pairht.audit.width`) and
#: ``"difference"`` (HT advantages corrected by the predictions as baselines:
#: :mod:`pairht.estimators.difference`) and ``"two_stage"`` (an inner row's estimate over a
#: uniform subset of the candidates, the only ones given prefixes: :mod:`pairht.audit.two_stage`).
ESTIMATORS = ("ht", "conditional_ht", "edge", "choice", "difference", "two_stage")


class RowUnavailable(RuntimeError):
    """A row cannot run on this population (e.g. it needs ``m_hat``); the audit says why."""


@dataclass(frozen=True)
class AuditConfig:
    """Settings shared by every row of one audit.

    Parameters
    ----------
    budget_ratio : float
        Target *realised* expected suffix tokens as a fraction of the full cost (the realised
        suffix tokens of every unfinished candidate, pooled over prompts), in (0, 1]. Every
        row's budget is solved (bisection) so that its expected realised cost hits it.
    pi_min : float
        Probability floor of the adaptive allocations (and ``pi_min^2`` floor of direct edge
        sampling), in (0, 1].
    proxy : str
        Edge proxy of the ``pair`` allocation rows that do not name their own.
    n_orders : int
        Recorded orders of the randomized dependent-rounding design.
    enum_limit : int
        Largest ``2**G`` for which exact metrics of ratio estimators (no closed form) are
        computed by enumerating the design support; beyond it they are reported as n/a.
    alpha : float
        Level of the exact-vs-Monte-Carlo consistency tests.
    seed : int
        Seed of every random choice of the audit (design construction, draws, bootstrap).
    """

    budget_ratio: float = 0.5
    pi_min: float = 0.08
    proxy: str = "disagreement"
    n_orders: int = 8
    enum_limit: int = 2**12
    alpha: float = 1e-4
    seed: int = 0

    def __post_init__(self) -> None:
        if not (0.0 < self.budget_ratio <= 1.0):
            raise ValueError(f"budget_ratio must lie in (0, 1]; got {self.budget_ratio!r}")
        if not (0.0 < self.pi_min <= 1.0):
            raise ValueError(f"pi_min must lie in (0, 1]; got {self.pi_min!r}")
        check_budget_ratio(self.budget_ratio, self.pi_min)
        if self.n_orders < 1:
            raise ValueError(f"n_orders must be >= 1; got {self.n_orders!r}")
        if not (0.0 < self.alpha < 1.0):
            raise ValueError(f"alpha must lie in (0, 1); got {self.alpha!r}")


@dataclass
class Plan:
    """What a row runs on each prompt, and what choosing it cost.

    ``pi`` (P, G) are vertex inclusion probabilities (finished candidates: 1); vertex rows
    also hold ``designs`` (one :class:`~pairht.designs.Design` per prompt) and ``joint``
    (P, G, G); edge rows hold ``q`` (P, G, G), the edge inclusion probabilities. ``cost``
    (P, G) is what a completed candidate costs this row (realised suffix tokens, 0 when
    finished; small-group GRPO pays the whole sequence). ``budget_scale`` is the solved
    budget (fraction of the predicted full cost) that hits the realised target.
    """

    pi: np.ndarray
    alloc_seconds: float
    cost: np.ndarray
    build_seconds: float = 0.0
    designs: list[Any] | None = None
    joint: np.ndarray | None = None
    q: np.ndarray | None = None
    budget_scale: float = math.nan
    notes: list[str] = field(default_factory=list)
    #: Denominator of the relative ``tokens`` metric (the full cost; GRPO: whole sequences).
    token_scale: float = math.nan
    #: Prefix tokens the row generates before selecting (every prefix; GRPO: none).
    prefix_tokens: float = 0.0
    #: Two-stage rows only: the width, its subsets and the inner row's plan on them
    #: (:class:`pairht.audit.two_stage.TwoStage`).
    stages: Any = None


def finished_mask(pop: Population) -> np.ndarray:
    """``(P, G)`` bool: candidates whose prefix already ended (all False if not recorded)."""
    fin = getattr(pop, "finished", None)
    if fin is None:
        return np.zeros(pop.rewards.shape, dtype=bool)
    return np.asarray(fin, dtype=bool)


def suffix_costs(pop: Population) -> np.ndarray:
    """Realised suffix tokens ``C`` with 0 for finished candidates, ``(P, G)``."""
    return np.where(finished_mask(pop), 0.0, pop.costs)


def full_cost(pop: Population) -> float:
    """Pooled full cost ``sum_q sum_{i unfinished} C_qi`` (the denominator of ``tokens``)."""
    return float(suffix_costs(pop).sum())


def prefix_tokens(pop: Population) -> float:
    """Prefix tokens of every candidate, ``sum prefix_len`` (generated before any selection)."""
    return float(pop.prefix_len.sum())


class TwoPhaseAccounting(TypedDict):
    """``Plan`` keywords of a two-phase row (see :func:`two_phase_accounting`)."""

    token_scale: float
    prefix_tokens: float


def two_phase_accounting(pop: Population) -> TwoPhaseAccounting:
    """``Plan`` keywords of a row that generates every prefix, then selects suffixes:
    ``token_scale`` (the full cost) and ``prefix_tokens``."""
    return {"token_scale": full_cost(pop), "prefix_tokens": prefix_tokens(pop)}


def whole_tokens(pop: Population) -> float:
    """Tokens of generating every candidate whole: ``sum (prefix_len + C)`` (finished: C = 0).

    :func:`pairht.estimators.token_counts` of the draw that completes every candidate.
    """
    every = np.ones(pop.rewards.shape, dtype=bool)
    return token_counts(pop.prefix_len, suffix_costs(pop), every, every.astype(float)).generated


def is_linear(weighting: str) -> bool:
    """Whether ``W_ij = I_ij w_ij`` with ``w`` fixed by the design (closed-form moments).

    Read from the estimators' registry: a variant is linear iff it has a closed-form bias
    multiplier (ratio estimators return ``None``).
    """
    if weighting not in VARIANTS:
        raise RowUnavailable(f"weighting {weighting!r} is not in pairht.estimators.VARIANTS")
    rho = np.full((2, 2), 0.5)
    out = VARIANTS[weighting].bias_multiplier(rho, rho, w_max=1.0, pi=np.full(2, 0.5))
    return out is not None
