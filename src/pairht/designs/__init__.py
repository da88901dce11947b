"""Sampling designs with exact inclusion probabilities of every order the estimators need.

All designs share the interface of :class:`~pairht.designs.base.Design`:
``.pi``, ``.joint()``, ``.inclusion(idx)``, ``.sample(rng, size)``, ``.support()``,
``.positive_pairs()``. :func:`make_design` builds one by its registry name.
"""

from pairht.designs.anchored import AnchoredPair
from pairht.designs.base import MAX_SUPPORT_UNITS, Design
from pairht.designs.bernoulli import Bernoulli
from pairht.designs.conditional_poisson import ConditionalPoisson
from pairht.designs.dependent_rounding import (
    DependentRounding,
    PositivityWarning,
    RandomizedDependentRounding,
)
from pairht.designs.mixed_size import MixedSize
from pairht.designs.registry import DESIGNS, make_design
from pairht.designs.stratified import Stratified

__all__ = [
    "DESIGNS",
    "MAX_SUPPORT_UNITS",
    "AnchoredPair",
    "Bernoulli",
    "ConditionalPoisson",
    "DependentRounding",
    "Design",
    "MixedSize",
    "PositivityWarning",
    "RandomizedDependentRounding",
    "Stratified",
    "make_design",
]
