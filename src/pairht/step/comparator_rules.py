"""The paper's comparators as allocators of the step: the loader of
:data:`pairht.step.ALLOCATORS`, imported on its first read.

The comparators (:mod:`pairht.comparators`) never import the step; this module, on the step's
side, registers each of them with its capabilities like any other allocator, and lends
``pair_joint`` the step's ``"pair"`` rule for its group level at a size.
"""

from __future__ import annotations

from typing import Any

from pairht.comparators.allocators import COMPARATORS
from pairht.step.allocators import ALLOCATORS, register_allocator

#: Declared capabilities of each comparator (the rest take the defaults: estimated by
#: pair-HT, no size, no score norm, no known rewards).
#: DPPO prunes after the rewards: its draw is estimated by the step's "dppo" estimator.
CAPABILITIES: dict[str, dict[str, Any]] = {
    "pair_joint": {"takes_size": True},
    "dppo": {"estimator": "dppo"},
}

for _name, _obj in COMPARATORS.items():
    register_allocator(_name, **CAPABILITIES.get(_name, {}))(_obj)
COMPARATORS["pair_joint"].bind_group_rule(ALLOCATORS["pair"])
