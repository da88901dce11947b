"""Graph-coupled PAIR probability design: edge proxies, the batched solver, baselines, designs.

``allocate`` solves the paper's program (Eqs. convex-objective and budget) for a batch of
prompt groups; ``reference_slsqp`` is the appendix's SLSQP reference kept for comparison.
"""

from pairht.allocation.baselines import (
    fill_to_budget,
    pointwise_allocation,
    uniform_allocation,
    water_fill,
)
from pairht.allocation.designs import DESIGN_KINDS, design_for
from pairht.allocation.diagnostics import AllocationDiagnostics, diagnostics
from pairht.allocation.kkt import estimate_multipliers, kkt_residual, proxy_gradient, proxy_value
from pairht.allocation.proxies import PROXY_KINDS, covariance_term, disagreement, edge_proxy
from pairht.allocation.reference import ProblemOptions, reference_slsqp
from pairht.allocation.sizes import largest_affordable_size
from pairht.allocation.solver import (
    AllocationResult,
    allocate,
    auto_size,
    solve_program,
    validate_costs,
    validate_problem,
)

__all__ = [
    "DESIGN_KINDS",
    "PROXY_KINDS",
    "AllocationDiagnostics",
    "AllocationResult",
    "ProblemOptions",
    "allocate",
    "auto_size",
    "covariance_term",
    "design_for",
    "diagnostics",
    "disagreement",
    "edge_proxy",
    "estimate_multipliers",
    "fill_to_budget",
    "kkt_residual",
    "largest_affordable_size",
    "pointwise_allocation",
    "proxy_gradient",
    "proxy_value",
    "reference_slsqp",
    "solve_program",
    "uniform_allocation",
    "validate_costs",
    "validate_problem",
    "water_fill",
]
