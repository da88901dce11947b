r"""Audit rows of the paper's comparators (issue 16): VIP, HORA, DUET, DPPO and ``pair_joint``.

Importing this module registers the rows with :func:`pairht.audit.rows.register_row`. Every
row plans on the frozen population as one batch (the prompt-level comparators share one
budget across prompts) and is evaluated like the other rows: exact design moments of the
pair-HT estimator (``estimator = "ht"``, exact weights) and Monte Carlo replays.

Per-prompt history (VIP, HORA)
------------------------------
A frozen population holds the ``G`` candidates of each prompt, not its past. Two histories
are derived, and each comparator that needs one gets a row per history:

* ``"predictions"``: ``s_b = sum_i p_hat_bi``, ``t_b = G`` -- the expected successes under the
  prefix heads' predictions, the same information PAIR allocates from (a fair comparison of
  the *allocation rules*);
* ``"oracle"``: ``s_b = sum_i clip(r_bi, 0, 1)``, ``t_b = G`` -- the population's own realised
  rewards. No method has this before the suffixes exist; it bounds from above what any history
  of the prompt could buy (a real previous epoch is a noisier draw of the same rate).

DUET runs on its own pre-rollout surrogate (the group's mean ``p_hat``), as without history.

Equal realised cost
-------------------
VIP, HORA and DUET buy whole rollouts (``k_b`` of the ``U_b`` unfinished candidates, SRSWOR,
finished candidates free): their budget is an integer rollout count ``N`` for the batch. The
row takes the ``N`` whose expected realised suffix tokens ``sum_b (k_b / U_b) sum_{u} C_bu``
are nearest to ``budget_ratio`` of the full cost; an integer ``N`` cannot hit it exactly, so
the achieved ratio is in the row's ``tokens`` metric and a note (one rollout is about
``1 / (budget_ratio * sum_b U_b)`` of the budget). ``pair_joint`` matches the cost exactly
(bisection on its token budget). VIP, HORA and DUET run with ``min_rollouts = 2``: every
prompt continues at least ``min(2, U_b)`` candidates, so every pair has ``rho_ij > 0`` and the
pair-HT estimator is exactly unbiased. Their own rules allow ``k_b = 0`` (HORA always; VIP and
DUET once ``min_group`` is filled by finished candidates), and then the pairs of a prompt's
unfinished candidates are never observed and the estimate is biased.

DPPO
----
DPPO saves backward compute, not generation: every candidate is completed (its tokens are
the full cost, at any ``budget_ratio``) and pruned after rewards with keep probabilities
``q_b o_bi`` from the full-group advantages ``A_bi = r_bi - mean_j r_bj``
(:func:`pairht.comparators.dppo_keep_probabilities`, default rates). Its row shows what
the pruning costs in MSE at full generation cost; it is not a generation-matched comparison.
The marker-gated abort of DUET (phase 2) needs per-candidate answer markers, which a
population does not record: DUET's row is phase 1 only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from pairht.allocation.inputs import StepInputs
from pairht.audit.base import (
    AuditConfig,
    Plan,
    finished_mask,
    suffix_costs,
    two_phase_accounting,
)
from pairht.audit.population import Population
from pairht.audit.rows import AuditRow, default_design_row, register_row
from pairht.comparators import COMPARATORS, dppo_design, dppo_keep_probabilities, dppo_sample
from pairht.designs import make_design
from pairht.designs.base import Design, all_masks

#: How a row derives the per-prompt history the comparator reads.
HISTORIES = ("predictions", "oracle")


def population_history(pop: Population, kind: str) -> dict[str, np.ndarray]:
    """``{"successes": (P,), "trials": (P,)}`` derived from the population (module doc)."""
    G = pop.group_size
    if kind == "predictions":
        s = pop.p_hat.sum(axis=1)
    elif kind == "oracle":
        s = np.clip(pop.rewards, 0.0, 1.0).sum(axis=1)
    else:
        raise ValueError(f"history must be one of {HISTORIES}; got {kind!r}")
    return {"successes": s.astype(np.float64), "trials": np.full(pop.n_prompts, float(G))}


def _inputs(pop: Population, budget: np.ndarray, history: dict[str, np.ndarray] | None
            ) -> StepInputs:
    """The step inputs of the whole population as one batch."""
    return StepInputs(pop.p_hat, pop.c_hat, finished_mask(pop), budget=budget, history=history)


def _nearest_rollouts(pi_of: Any, C: np.ndarray, target: float, n_max: int
                      ) -> tuple[int, np.ndarray]:
    """The rollout budget ``N`` in ``[0, n_max]`` whose expected realised cost
    ``sum pi(N) C`` is nearest ``target`` (bisection: the cost is nondecreasing in ``N``).
    A budget below the comparator's per-prompt minimums (it raises ``ValueError``) counts as
    too small; if even ``n_max`` is refused the error propagates."""

    def cost(n: int) -> float:
        try:
            return float((pi_of(n) * C).sum())
        except ValueError:
            if n >= n_max:
                raise
            return -np.inf

    lo, hi = 0, n_max
    while lo < hi:  # smallest N with cost(N) >= target
        mid = (lo + hi) // 2
        if cost(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    best = min({max(lo - 1, 0), lo}, key=lambda n: abs(cost(n) - target))
    return best, pi_of(best)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class ComparatorRow(AuditRow):
    """A prompt-level comparator (``vip``, ``hora``, ``duet``): SRSWOR of ``k_b`` unfinished
    candidates per prompt at the nearest integer rollout budget; exact HT pair weights.

    ``comparator`` names the allocator in :data:`pairht.comparators.COMPARATORS`, ``history``
    one of :data:`HISTORIES` (or ``None``), ``options`` its extra options.
    """

    unbiased: bool = True
    cost_matched: bool = False  # an integer rollout budget: the nearest, not the exact, target
    comparator: str = ""
    history: str | None = None
    #: The comparator's extra options (``min_rollouts = 2``: every group keeps a pair).
    options: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: MappingProxyType({"min_rollouts": 2}))

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        C = suffix_costs(pop)
        target = cfg.budget_ratio * C.sum()
        hist = None if self.history is None else population_history(pop, self.history)
        inputs = _inputs(pop, cfg.budget_ratio * np.where(finished_mask(pop), 0.0,
                                                          pop.c_hat).sum(axis=1), hist)
        alloc = COMPARATORS[self.comparator]

        def pi_of(n: int) -> np.ndarray:
            return alloc.pi(inputs, rollout_budget=int(n), **self.options)[0]

        n_unf = int((~finished_mask(pop)).sum())
        N, pi = _nearest_rollouts(pi_of, C, target, n_unf)
        t0 = time.perf_counter()  # what a training step pays: one allocation
        pi_of(N)
        seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        # equal pi on the unfinished, 1 on the finished, integer size: CPS is exactly SRSWOR
        designs = [make_design("conditional_poisson", pi[q]) for q in range(pop.n_prompts)]
        joint = np.stack([d.joint() for d in designs])
        notes = [f"rollout budget N = {N} of {n_unf} unfinished candidates; expected realised "
                 f"cost {float((pi * C).sum() / C.sum()):.4f} of the full cost (target "
                 f"{cfg.budget_ratio})"]
        if self.history is not None:
            notes.append(f"history from the population's {self.history}")
        return Plan(pi=pi, alloc_seconds=seconds, cost=C, build_seconds=time.perf_counter() - t1,
                    designs=designs, joint=joint, budget_scale=N / max(n_unf, 1), notes=notes,
                    **two_phase_accounting(pop))


# VIP and HORA with history from the heads' predictions (PAIR's information) and from the
# population's own rewards (an upper bound, not attainable); DUET phase 1, rollouts
# proportional to the surrogate of the group's mean p_hat
for _name, _label in (("vip", "VIP"), ("hora", "HORA")):
    register_row(ComparatorRow(key=_name, label=f"{_label} (history: predictions)",
                               comparator=_name, history="predictions"))
    register_row(ComparatorRow(key=f"{_name}_oracle", label=f"{_label} (history: oracle rewards)",
                               comparator=_name, history="oracle"))
register_row(ComparatorRow(key="duet", label="DUET (phase 1, surrogate from p_hat)",
                           comparator="duet"))
# pair_joint: the pooled budget split across prompts by PAIR's value curves, moved from the
# per-prompt split only as far as a factor-kappa error in every prompt's predicted variance
# change keeps it no worse (pairht.comparators.joint.robust_split), then PAIR's default design
# within each group, as the step draws it; budget solved so the realised cost matches exactly
register_row(default_design_row(key="pair_joint", label="PAIR, joint budget across prompts",
                                group="extra", unbiased=True, allocation="pair_joint"))


class PrunedBernoulli(Design):
    r"""DPPO's pruning of one prompt: kept with probability ``q``, then each completion
    independently with ``o_i``: ``pi_i = q o_i``, ``rho_ij = q o_i o_j`` (``i != j``),
    ``P(S) = (1 - q) 1[S = {}] + q prod_{i in S} o_i prod_{i notin S} (1 - o_i)``.

    ``pi``, ``rho`` and the draw are the comparator's own (:func:`~pairht.comparators.dppo_design`,
    :func:`~pairht.comparators.dppo_sample`, as the trainer uses them); this class adds the
    support the audit's exact moments enumerate."""

    name = "dppo_pruning"

    def __init__(self, q: float, o: np.ndarray) -> None:
        self.q = float(q)
        self.o = np.asarray(o, dtype=np.float64)
        pi, joint = dppo_design(np.array([self.q]), self.o[None, :])
        self._rho = joint[0]
        super().__init__(pi[0])

    def _joint(self) -> np.ndarray:
        return self._rho

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        return self.q * np.prod(self.o[rows], axis=1)

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return dppo_sample(np.full(size, self.q), np.broadcast_to(self.o, (size, self.o.size)),
                           rng)

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        masks = all_masks(self.o.size)
        probs = self.q * np.prod(np.where(masks, self.o, 1.0 - self.o), axis=1)
        probs[~masks.any(axis=1)] += 1.0 - self.q
        return masks, probs


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class DPPORow(AuditRow):
    """DPPO: every candidate generated (full cost), pruned after rewards, exact HT weights."""

    cost_matched: bool = False  # generates everything: tokens are the full cost at any budget
    keeps_finished: bool = False  # pruning is after rewards, finished candidates included
    key: str = "dppo"
    label: str = "DPPO (all generated, pruned after rewards)"
    unbiased: bool = True

    def plan(self, pop: Population, cfg: AuditConfig, cache: dict[str, Any]) -> Plan:
        t0 = time.perf_counter()
        adv = pop.rewards - pop.rewards.mean(axis=1, keepdims=True)
        q, o = dppo_keep_probabilities(adv)
        seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        designs = [PrunedBernoulli(q[b], o[b]) for b in range(pop.n_prompts)]
        joint = np.stack([d.joint() for d in designs])
        pi = np.stack([d.pi for d in designs])
        C = suffix_costs(pop)
        # Every suffix is generated whatever is pruned: a completed candidate is charged
        # C / pi, so the expected tokens sum_i pi_i C_i / pi_i are the full cost.
        return Plan(pi=pi, alloc_seconds=seconds, cost=C / pi,
                    build_seconds=time.perf_counter() - t1, designs=designs, joint=joint,
                    budget_scale=1.0, notes=["every candidate generated: tokens = full cost"],
                    **two_phase_accounting(pop))


register_row(DPPORow())

#: The comparator rows, in table order.
COMPARATOR_ROWS = ("vip", "vip_oracle", "hora", "hora_oracle", "duet", "pair_joint", "dppo")
