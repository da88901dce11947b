"""Name -> design class registry, so configurations can name a design by a string."""

from __future__ import annotations

from typing import Any

from numpy.typing import ArrayLike

from pairht.designs.base import Design
from pairht.designs.bernoulli import Bernoulli
from pairht.designs.conditional_poisson import ConditionalPoisson
from pairht.designs.dependent_rounding import DependentRounding, RandomizedDependentRounding
from pairht.designs.mixed_size import MixedSize
from pairht.designs.stratified import Stratified

#: Every design by its registry name (``Design.name``).
DESIGNS: dict[str, type[Design]] = {
    cls.name: cls
    for cls in (Bernoulli, ConditionalPoisson, DependentRounding, RandomizedDependentRounding,
                MixedSize, Stratified)
}


def make_design(kind: str, pi: ArrayLike, **kwargs: Any) -> Design:
    """Build the design registered as ``kind`` with inclusion probabilities ``pi``.

    Parameters
    ----------
    kind : str
        A key of :data:`DESIGNS`: ``"bernoulli"``, ``"conditional_poisson"``,
        ``"dependent_rounding"`` or ``"randomized_dependent_rounding"``.
    pi : (N,) array_like
        First-order inclusion probabilities.
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
    """
    cls = DESIGNS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"kind must be one of {sorted(DESIGNS)}; got {kind!r}")
    return cls(pi, **kwargs)


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
