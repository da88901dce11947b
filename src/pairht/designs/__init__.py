"""Sampling designs with exact inclusion probabilities of every order the estimators need.

All designs share the interface of :class:`~pairht.designs.base.Design`:
``.pi``, ``.joint()``, ``.inclusion(idx)``, ``.sample(rng, size)``, ``.support()``,
``.positive_pairs()``.
"""

from pairht.designs.base import MAX_SUPPORT_UNITS, Design
from pairht.designs.bernoulli import Bernoulli

__all__ = ["MAX_SUPPORT_UNITS", "Bernoulli", "Design"]
