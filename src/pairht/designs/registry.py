"""Name -> design class registry, so configurations can name a design by a string."""

from __future__ import annotations

from typing import Any

from numpy.typing import ArrayLike

from pairht.designs.base import Design
from pairht.designs.bernoulli import Bernoulli
from pairht.designs.conditional_poisson import ConditionalPoisson
from pairht.designs.dependent_rounding import DependentRounding, RandomizedDependentRounding

#: Every design by its registry name (``Design.name``).
DESIGNS: dict[str, type[Design]] = {
    cls.name: cls
    for cls in (Bernoulli, ConditionalPoisson, DependentRounding, RandomizedDependentRounding)
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
