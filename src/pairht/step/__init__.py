"""The framework-neutral PAIR step: every trainer makes these two calls and nothing else.

``plan_step(p_hat, c_hat, finished, budget_ratio=..., width=..., rng=...) -> StepPlan``
(width ``"prefixes"`` / ``"subset"`` / ``"whole"``; allocator; design; exact ``pi``,
``selected``, ``joint``; the estimator's name), then after rewards
``estimate(plan, rewards) -> StepEstimate`` (advantages ``(B, G)``, the loss mask, logged
quantities). Allocation rules are registered in :data:`ALLOCATORS`, estimators in
:data:`ESTIMATORS`. :func:`plan_continuations` is the allocation-and-draw core of
:func:`plan_step`. numpy/scipy/numba only: no torch. See ``docs/step.md``.
"""

from pairht.step.allocators import (
    ALLOCATORS,
    PREFIX_RULES,
    Allocator,
    allocator_names,
    get_allocator,
    program_allocators,
    register_allocator,
)
from pairht.step.embedding import WithFinished, unfinished_design, unfinished_mixture
from pairht.step.estimators import (
    ESTIMATORS,
    EstimatorCapabilities,
    StepEstimate,
    default_estimator,
    estimate,
    register_estimator,
    standardise,
)
from pairht.step.inputs import StepInputs, score_norm_proxy, shrink_predictions
from pairht.step.plan import ContinuationPlan, group_design, plan_continuations, plan_metrics
from pairht.step.step_plan import (
    ROW_FIELDS,
    WIDTHS,
    StepPlan,
    head_labels,
    plan_step,
    prefix_candidates,
)
from pairht.step.subset import draw_subsets, subset_budget_ratio, two_phase_design

__all__ = [
    "ALLOCATORS",
    "ESTIMATORS",
    "PREFIX_RULES",
    "ROW_FIELDS",
    "WIDTHS",
    "Allocator",
    "ContinuationPlan",
    "EstimatorCapabilities",
    "StepEstimate",
    "StepInputs",
    "StepPlan",
    "WithFinished",
    "allocator_names",
    "default_estimator",
    "draw_subsets",
    "estimate",
    "get_allocator",
    "group_design",
    "head_labels",
    "plan_continuations",
    "plan_metrics",
    "plan_step",
    "prefix_candidates",
    "program_allocators",
    "register_allocator",
    "register_estimator",
    "score_norm_proxy",
    "shrink_predictions",
    "standardise",
    "subset_budget_ratio",
    "two_phase_design",
    "unfinished_design",
    "unfinished_mixture",
]
