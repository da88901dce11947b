"""The paper's comparators (VIP, HORA, DPPO, DUET) and ``pair_joint``, as step allocators.

numpy/scipy only. Each comparator is a pure function of its inputs (in its module) plus one
small allocator object (:mod:`pairht.comparators.allocators`) that ``pairht.step`` can call by
name: ``pairht.step`` registers :data:`COMPARATORS` in its ``ALLOCATORS`` on first lookup;
this package never imports ``pairht.step``, so imports run one way. VIGOR (cited in the
paper's table) could not be found and is not implemented.
"""

from pairht.comparators.allocators import (
    COMPARATORS,
    ComparatorPlan,
    DPPOAllocator,
    DUETAllocator,
    HORAAllocator,
    PairJointAllocator,
    VIPAllocator,
    comparator_plan,
)
from pairht.comparators.dppo import (
    dppo_design,
    dppo_gradient,
    dppo_keep_probabilities,
    dppo_sample,
)
from pairht.comparators.duet import abort_design, abort_sample, informativeness, proportional_counts
from pairht.comparators.gp import gp_success_probability
from pairht.comparators.hora import hit_utility, hora_extra_rollouts
from pairht.comparators.joint import JointAllocation, pair_joint_allocate
from pairht.comparators.vip import variance_shape, vip_group_sizes

__all__ = [
    "COMPARATORS",
    "ComparatorPlan",
    "DPPOAllocator",
    "DUETAllocator",
    "HORAAllocator",
    "JointAllocation",
    "PairJointAllocator",
    "VIPAllocator",
    "abort_design",
    "abort_sample",
    "comparator_plan",
    "dppo_design",
    "dppo_gradient",
    "dppo_keep_probabilities",
    "dppo_sample",
    "gp_success_probability",
    "hit_utility",
    "hora_extra_rollouts",
    "informativeness",
    "pair_joint_allocate",
    "proportional_counts",
    "variance_shape",
    "vip_group_sizes",
]
