"""The framework-neutral PAIR step: after prefixes, plan which candidates to continue.

``plan_continuations(StepInputs(...), rng=...) -> ContinuationPlan`` (``pi``, ``selected``,
exact ``joint``, per-step metrics); after rewards, :func:`pairht.pair_advantages` takes
``plan.selected`` and ``plan.joint``. Allocation rules are registered in :data:`ALLOCATORS`.
numpy/scipy/numba only: no torch. See ``docs/step.md``.
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
from pairht.step.inputs import StepInputs, shrink_predictions
from pairht.step.plan import ContinuationPlan, group_design, plan_continuations, plan_metrics
from pairht.step.subset import draw_subsets, subset_budget_ratio, two_phase_design

__all__ = [
    "ALLOCATORS",
    "PREFIX_RULES",
    "Allocator",
    "ContinuationPlan",
    "StepInputs",
    "WithFinished",
    "allocator_names",
    "draw_subsets",
    "get_allocator",
    "group_design",
    "plan_continuations",
    "plan_metrics",
    "program_allocators",
    "register_allocator",
    "shrink_predictions",
    "subset_budget_ratio",
    "two_phase_design",
    "unfinished_design",
    "unfinished_mixture",
]
