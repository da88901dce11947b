"""``DesignDraw``: one generation batch of :class:`~pairht.trl.PairGRPOTrainer`, as data.

It holds the step's plan (:class:`pairht.step.StepPlan`, global over processes, logged
before any reward), what the trainer gathered after it (prefix features, realised suffix
lengths, rewards) and the step's estimate (:class:`pairht.step.StepEstimate`); the attributes
read them under the names the logs and tests use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pairht.estimators import TokenCounts, token_counts
from pairht.step import ESTIMATORS, StepEstimate, StepPlan

__all__ = ["PLAN_LOGGED", "DesignDraw"]

#: Pre-reward quantities of the plan logged when the plan has them.
PLAN_LOGGED = ("budget", "expected_suffix_cost", "expected_edges", "min_joint",
               "prefix_group_size", "whole_group_size")


@dataclass
class DesignDraw:
    """One generation batch's design (``B`` groups of ``G``), rewards and advantages.

    ``mask``, ``pi``, ``joint`` are the estimator's design: the plan's, or after a post-reward
    design (DPPO's pruning) the pruned one, with the generation design in ``generated_mask``,
    ``generated_pi``.
    """

    plan: StepPlan
    rows: slice  # this process's rows of the flattened (B * G) batch
    features: torch.Tensor | None = None  # (B * G, hidden) gathered prefix features
    suffix_len: np.ndarray | None = None  # (B, G) realised suffix tokens (0 if unselected)
    rewards: np.ndarray | None = None  # (B, G) rewards (NaN if unselected)
    estimate: StepEstimate | None = None

    # ---------------------------------------------------------------- the plan
    @property
    def p_hat(self) -> np.ndarray:
        return self.plan.p_hat

    @property
    def c_hat(self) -> np.ndarray:
        return self.plan.c_hat

    @property
    def budget(self) -> np.ndarray:
        return self.plan.budget

    @property
    def prefix_len(self) -> np.ndarray:
        return self.plan.prefix_tokens

    @property
    def prefix_done(self) -> np.ndarray:
        return self.plan.finished

    @property
    def pi_alloc(self) -> np.ndarray:
        return self.plan.pi_alloc

    @property
    def subset(self) -> np.ndarray | None:
        return self.plan.subset

    @property
    def inner_joint(self) -> np.ndarray | None:
        return self.plan.inner_joint

    @property
    def plan_metrics(self) -> dict[str, float]:
        return self.plan.metrics

    @property
    def kkt_residual(self) -> np.ndarray:
        return self.plan.solver_info("kkt_residual", 0.0)

    @property
    def fallback_used(self) -> np.ndarray:
        return self.plan.solver_info("fallback_used", False)

    @property
    def unspent_budget(self) -> np.ndarray:
        return self.plan.solver_info("unspent_budget", 0.0)

    @property
    def converged(self) -> np.ndarray:
        cont = self.plan.continuation
        return np.ones(self.plan.shape[0], dtype=bool) if cont is None else \
            np.asarray(cont.converged, dtype=bool)

    # ---------------------------------------------------------------- the estimate
    def _pruned(self) -> bool:
        est = self.estimate
        return est is not None and ESTIMATORS.capabilities(est.estimator).post_reward_design

    @property
    def mask(self) -> np.ndarray:
        return self.estimate.mask if self.estimate is not None else self.plan.selected

    @property
    def pi(self) -> np.ndarray:
        return self.estimate.pi if self.estimate is not None else self.plan.pi

    @property
    def joint(self) -> np.ndarray:
        return self.estimate.joint if self.estimate is not None else self.plan.joint

    @property
    def advantages(self) -> np.ndarray | None:
        return None if self.estimate is None else self.estimate.advantages

    @property
    def generated_mask(self) -> np.ndarray | None:
        return self.plan.selected if self._pruned() else None

    @property
    def generated_pi(self) -> np.ndarray | None:
        return self.plan.pi if self._pruned() else None

    @property
    def prefix_share(self) -> float:
        """``w / G``: the share of each group given prefixes (1 unless width "subset")."""
        s = self.plan.subset
        return 1.0 if s is None else s.shape[1] / self.plan.shape[1]

    def generation_design(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mask, pi)`` of the generation design (the plan's)."""
        return self.plan.selected, self.plan.pi

    def generated_tokens(self) -> TokenCounts:
        """Token counts of what was *generated* (:func:`pairht.estimators.token_counts`)."""
        assert self.suffix_len is not None  # filled in by the generation step
        return token_counts(self.prefix_len, self.suffix_len, *self.generation_design())

    def history_entry(self, step: int) -> dict[str, Any]:
        """``{"step", "pi", "mask"[, "subset"]}`` for the trainer's ``draw_history``."""
        entry: dict[str, Any] = {"step": step, "pi": self.plan.pi.copy(),
                                 "mask": self.plan.selected.copy()}
        if self.plan.subset is not None:
            entry["subset"] = self.plan.subset.copy()
        return entry

    def pruned_entry(self) -> dict[str, Any]:
        """``{"kept": K}`` for ``draw_history`` after a post-reward design, else ``{}``."""
        return {"kept": self.mask.copy()} if self._pruned() else {}

    def metrics(self, head_trainer: Any = None, auto_option: int | None = None,
                ) -> dict[str, float]:
        """The step's logged quantities (``pair/<key>`` in the trainer's logs): the estimate's
        (:class:`pairht.step.StepEstimate`), the plan's pre-reward ones (budget, expected
        cost and edges, smallest joint, solver residual, fallbacks, ...), the heads' held-out
        skill (``head_<measure>``), and ``auto_option`` (width ``"auto"``: the index of the
        option this batch ran)."""
        assert self.estimate is not None  # set by the trainer's seam 3
        plan = self.plan
        out = {key: float(value) for key, value in self.estimate.logged.items()}
        if auto_option is not None:
            out["auto_option"] = float(auto_option)
        out["predicted_suffix_fraction"] = float(
            plan.metrics.get("predicted_suffix_fraction", float("nan")))
        out["solver_residual"] = float(np.max(self.kkt_residual))
        out["solver_fallbacks"] = float(np.sum(self.fallback_used))
        out["solver_unconverged"] = float(np.sum(~self.converged))
        out["prefix_done"] = float(plan.finished.mean())
        out["unspent_budget"] = float(np.sum(self.unspent_budget))
        for key in PLAN_LOGGED:
            if key in plan.metrics:
                out[key] = float(plan.metrics[key])
        measured = getattr(head_trainer, "skill", None)
        if measured is not None:  # held-out (prequential) skill: do the heads help?
            out.update({f"head_{k}": float(v) for k, v in measured().items()})
        return out
