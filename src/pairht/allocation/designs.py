"""From continuation probabilities to a sampling design with exact joint inclusions."""

from __future__ import annotations

from typing import Any

from numpy.typing import ArrayLike

from pairht._validation import check_integer_sum, check_probabilities
from pairht.designs.base import Design
from pairht.designs.registry import DESIGNS, make_design

#: Design kinds :func:`design_for` accepts: the names of the registry
#: :data:`pairht.designs.DESIGNS` (read from it, never listed here).
DESIGN_KINDS: tuple[str, ...] = tuple(DESIGNS)


def design_for(pi: ArrayLike, kind: str = "bernoulli", **kwargs: Any) -> Design:
    r"""The sampling design with first-order inclusion probabilities ``pi``:
    :func:`pairht.designs.make_design` after the allocation's own check (a fixed-size design
    takes the integer ``sum(pi)`` of an allocation solved at that size).

    ``"bernoulli"`` gives the paper's main design (``rho_ij = pi_i pi_j``). The fixed-size
    kinds (``"conditional_poisson"``, ``"dependent_rounding"``,
    ``"randomized_dependent_rounding"``) fix the number of completed candidates to
    ``n = sum(pi)``, which must therefore be an integer (within 1e-9): solve with
    ``allocate(..., size=n)`` (or ``size="auto"``) rather than rescaling ``pi`` afterwards, which
    would break the budget and the optimality of ``pi``. Their ``joint()`` is exact and must
    be the ``rho`` the estimator uses (appendix "Fixed-size and exact-cost designs").

    Parameters
    ----------
    pi : (G,) array_like
        Inclusion probabilities in [0, 1] (one group; build one design per row of a batch).
    kind : str
        A key of :data:`pairht.designs.DESIGNS`.
    **kwargs
        Passed to the design (e.g. ``order`` or ``n_orders``/``rng``).

    Returns
    -------
    Design

    Examples
    --------
    >>> d = design_for([0.5, 0.25, 1.0])
    >>> float(d.joint()[0, 1])
    0.125
    >>> design_for([0.5, 0.25, 1.0], kind="conditional_poisson")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: pi must sum to an integer ...
    """
    DESIGNS.check("kind", kind)
    arr = check_probabilities("pi", pi)
    if arr.ndim != 1:
        raise ValueError(f"pi must be a 1-d array (one group), shape (G,); got shape {arr.shape}. "
                         f"Build one design per row of a batch.")
    if DESIGNS.capabilities(kind).fixed_size:
        check_integer_sum(
            "pi", arr,
            hint=(f"The {kind!r} design has a fixed sample size n = sum(pi); solve the "
                  f"allocation with allocate(..., size=n) or size='auto' so that sum(pi) is "
                  f"an integer, or use kind='bernoulli'."))
    return make_design(kind, arr, **kwargs)
