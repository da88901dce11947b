"""Name -> design class registry, so configurations can name a design by a string.

A design registers its class under its ``name`` with its declared
:class:`DesignCapabilities`; :func:`register_design` is the decorator (docs/extend/design.md).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from numpy.typing import ArrayLike

from pairht.designs.base import Design
from pairht.designs.bernoulli import Bernoulli
from pairht.designs.conditional_poisson import ConditionalPoisson
from pairht.designs.dependent_rounding import DependentRounding, RandomizedDependentRounding
from pairht.designs.mixed_size import MixedSize
from pairht.designs.stratified import Stratified
from pairht.registry import Registry


@dataclasses.dataclass(frozen=True)
class DesignCapabilities:
    """What a design class declares when it registers.

    Attributes
    ----------
    fixed_size : bool
        Every draw has ``n = sum(pi)`` units, so ``sum(pi)`` must be an integer.
    takes_rng : bool
        The constructor takes ``rng`` (it draws something when built, e.g. random orders).
    """

    fixed_size: bool = False
    takes_rng: bool = False


#: Every design by its registry name (``Design.name``).
DESIGNS: Registry[type[Design]] = Registry("design", DesignCapabilities)


def register_design(cls: type[Design]) -> type[Design]:
    """Register a :class:`~pairht.designs.base.Design` subclass under its ``name``, its
    capabilities read from the class (``fixed_size``) and its constructor (``rng``)."""
    if not (isinstance(cls, type) and issubclass(cls, Design)):
        raise TypeError(f"register_design takes a Design subclass; got {cls!r}")
    takes_rng = "rng" in inspect.signature(cls.__init__).parameters
    DESIGNS.register(cls.name, cls, fixed_size=bool(cls.fixed_size), takes_rng=takes_rng)
    return cls


for _cls in (Bernoulli, ConditionalPoisson, DependentRounding, RandomizedDependentRounding,
             MixedSize, Stratified):
    register_design(_cls)


def make_design(kind: str, pi: ArrayLike, **kwargs: Any) -> Design:
    """Build the design registered as ``kind`` with inclusion probabilities ``pi``: the one
    way from ``pi`` to a design.

    Parameters
    ----------
    kind : str
        A key of :data:`DESIGNS`: ``"bernoulli"``, ``"conditional_poisson"``,
        ``"dependent_rounding"``, ``"randomized_dependent_rounding"``, ``"mixed_size"``,
        ``"stratified"``.
    pi : (N,) array_like
        First-order inclusion probabilities in [0, 1] (one group).
    **kwargs
        Passed to the design's constructor (e.g. ``order``, ``n_orders``, ``rng``).

    Returns
    -------
    Design

    Examples
    --------
    >>> from pairht.designs import make_design
    >>> make_design("conditional_poisson", [0.5, 0.5]).n
    1
    >>> float(make_design("bernoulli", [0.5, 0.25, 1.0]).joint()[0, 1])
    0.125
    """
    return DESIGNS.get(DESIGNS.check("kind", kind))(pi, **kwargs)


#: Names a training step resolves to another registered design, and why (documented here so
#: the registry stays the one source of design names; :func:`step_design_kind` applies it):
#:
#: * ``"dependent_rounding"`` -> ``"randomized_dependent_rounding"``: one fixed pivotal order
#:   leaves some pairs with ``rho_ij = 0``, which the pair-HT estimator cannot weight; the
#:   mixture over random orders has the same marginals and every pair positive.
#: * ``"srswor"`` -> ``"conditional_poisson"``: with equal ``pi`` (and an integer sum)
#:   conditional Poisson *is* simple random sampling without replacement.
#: * ``"full"`` -> ``"bernoulli"``: with every ``pi = 1`` any design is the full design.
STEP_ALIASES: dict[str, str] = {
    "dependent_rounding": "randomized_dependent_rounding",
    "srswor": "conditional_poisson",
    "full": "bernoulli",
}


def step_design_kind(kind: str) -> str:
    """The registered design a training step draws for ``kind`` (see :data:`STEP_ALIASES`).

    Examples
    --------
    >>> step_design_kind("dependent_rounding"), step_design_kind("bernoulli")
    ('randomized_dependent_rounding', 'bernoulli')
    """
    if not isinstance(kind, str) or (kind not in DESIGNS and kind not in STEP_ALIASES):
        raise ValueError(f"design must be one of {sorted(set(DESIGNS) | set(STEP_ALIASES))}; "
                         f"got {kind!r}")
    return STEP_ALIASES.get(kind, kind)
