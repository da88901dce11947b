r"""A fixed-size design at any expected size: a mixture of the two neighbouring sizes.

Fixed-size designs (conditional Poisson, dependent rounding) need ``sum(pi) = n`` to be an
integer. A budget rarely buys an integer number of suffixes, and over the *unfinished*
candidates of a group (finished ones are kept for free) the uniform size ``budget x G_u`` is
almost never an integer. :class:`MixedSize` keeps the fixed-size benefit (the sample size
varies only between ``n`` and ``n + 1``) at any ``S = sum(pi)``, with exact inclusion
probabilities of every order.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from pairht.designs.base import Design
from pairht.designs.conditional_poisson import ConditionalPoisson
from pairht.designs.dependent_rounding import DependentRounding, RandomizedDependentRounding

#: Fixed-size designs a :class:`MixedSize` can mix (name -> class).
BASE_KINDS: dict[str, type[Design]] = {
    cls.name: cls for cls in (ConditionalPoisson, DependentRounding, RandomizedDependentRounding)
}
#: A sum within this of an integer is that integer (the fixed-size designs' own tolerance).
_INTEGER_TOL = 1e-9


def split_direction(pi: np.ndarray, frac: float) -> np.ndarray:
    r"""The direction ``delta`` of :class:`MixedSize`: ``delta_i = min(cap_i, t)``, ``sum = 1``.

    ``cap_i = min(pi_i / frac, (1 - pi_i) / (1 - frac))`` keeps both components in [0, 1]
    (``pi - frac delta >= 0`` and ``pi + (1 - frac) delta <= 1``); the level ``t`` spreads the
    unit of size as evenly as the caps allow (water-filling with equal weights), so equal
    ``pi`` give equal ``delta`` (the uniform case is exactly SRSWOR of sizes ``n`` and
    ``n + 1``). The caps always sum to at least 1 when ``n < S < n + 1 <= N`` (proof in
    :class:`MixedSize`).

    Parameters
    ----------
    pi : (N,) inclusion probabilities with non-integer sum ``S``
    frac : float in (0, 1), ``S - floor(S)``

    Returns
    -------
    (N,) ndarray, nonnegative, summing to 1.
    """
    cap = np.minimum(pi / frac, (1.0 - pi) / (1.0 - frac))
    cap = np.maximum(cap, 0.0)
    order = np.sort(cap)
    N = order.size
    # sum_i min(cap_i, t) is piecewise linear in t; find the piece holding 1.
    before = np.concatenate([[0.0], np.cumsum(order)[:-1]])  # sum of caps below order[k]
    level = before + order * (N - np.arange(N))  # value at t = order[k]
    k = int(np.searchsorted(level, 1.0))
    if k >= N:  # unreachable when the caps sum to >= 1; guard against rounding
        return cap / cap.sum()
    t = (1.0 - before[k]) / (N - k)
    return np.minimum(cap, t)


class MixedSize(Design):
    r"""Mixture of a size-``n`` and a size-``(n+1)`` fixed-size design with marginals ``pi``.

    With ``S = sum(pi)``, ``n = floor(S)`` and ``f = S - n`` (``0 < f < 1``), the design draws

    * with probability ``lambda = 1 - f`` a sample of the fixed-size design (``base``) with
      marginals ``pi_lo = pi - f delta`` (size ``n``),
    * with probability ``f`` one with marginals ``pi_hi = pi + (1 - f) delta`` (size ``n+1``),

    for a direction ``delta >= 0`` with ``sum(delta) = 1`` (:func:`split_direction`). Then
    ``lambda pi_lo + f pi_hi = pi`` and every inclusion probability is the same mixture of the
    components' exact ones,

    .. math:: \pi_S = \lambda\,\pi^{lo}_S + f\,\pi^{hi}_S \quad\text{for every set } S,

    so ``joint()`` and ``inclusion()`` are exact to the components' accuracy (conditional
    Poisson: ~1e-15). ``E[|J|] = S`` and ``|J|`` is ``n`` or ``n + 1``. If ``S`` is an integer
    (within 1e-9) the design is the base design itself (``lambda = 1``).

    **Existence of delta.** ``pi_lo, pi_hi`` lie in [0, 1] iff ``delta_i <= cap_i =
    min(pi_i / f, (1 - pi_i) / lambda)``; the caps sum to at least 1: let ``K`` be the units
    with ``pi_i > f`` (their cap is ``(1 - pi_i)/lambda``) and ``k = |K|``. If ``k <= n``,
    ``sum_{not K} pi_i / f >= (S - k) / f >= 1``; if ``k >= n + 1``, ``sum_K (1 - pi_i)/lambda
    >= (k - S)/lambda >= (n + 1 - S)/lambda = 1``.

    A unit with ``pi = 1`` (a finished candidate) or ``pi = 0`` has ``cap = 0``: it keeps its
    probability in both components. Fixed-size designs are not required to be positive on
    every pair; conditional Poisson is whenever ``0 < pi_lo, pi_hi``.

    Parameters
    ----------
    pi : (N,) array_like
        Target inclusion probabilities in [0, 1] (any sum).
    base : str
        The fixed-size design of both components, a key of :data:`BASE_KINDS`
        (``"conditional_poisson"``: maximum entropy; with equal ``pi`` it is SRSWOR).
    **base_kwargs
        Passed to both components (e.g. ``n_orders``, ``rng`` of randomized dependent
        rounding).

    Attributes
    ----------
    sizes : (int, int)
        ``(n, n + 1)`` (``(n, n)`` for an integer sum).
    weights : (float, float)
        ``(lambda, f)``, the probabilities of the two components.
    components : (Design, Design or None)

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import MixedSize
    >>> d = MixedSize([0.5, 0.5, 0.5, 0.5, 0.5])
    >>> d.sizes, d.weights
    ((2, 3), (0.5, 0.5))
    >>> round(float(d.joint()[0, 1]), 12)  # (1/2) C(3,0)/C(5,2) + (1/2) C(3,1)/C(5,3)
    0.2
    >>> sorted(set(d.sample(rng=0, size=20).sum(axis=1).tolist()))
    [2, 3]
    """

    name: ClassVar[str] = "mixed_size"
    fixed_size: ClassVar[bool] = False

    def __init__(self, pi: ArrayLike, base: str = "conditional_poisson",
                 **base_kwargs: Any) -> None:
        super().__init__(pi)
        if not isinstance(base, str) or base not in BASE_KINDS:
            raise ValueError(f"base must be one of {sorted(BASE_KINDS)} (a fixed-size design); "
                             f"got {base!r}")
        cls = BASE_KINDS[base]
        target = self._target
        total = float(target.sum())
        n = int(np.floor(total))
        frac = total - n
        self.base = base
        if frac <= _INTEGER_TOL or frac >= 1.0 - _INTEGER_TOL:
            self._set(cls(target, **base_kwargs), None, 0.0)
        else:
            delta = split_direction(target, frac)
            p_lo = np.clip(target - frac * delta, 0.0, 1.0)
            p_hi = np.clip(target + (1.0 - frac) * delta, 0.0, 1.0)
            self._set(cls(p_lo, **base_kwargs), cls(p_hi, **base_kwargs), frac)

    @classmethod
    def from_components(cls, pi_lo: ArrayLike, pi_hi: ArrayLike, weight_hi: float,
                        base: str = "conditional_poisson", **base_kwargs: Any) -> MixedSize:
        r"""The mixture of given components: size ``n`` (``pi_lo``, probability ``1 - f``) and
        size ``n + 1`` (``pi_hi``, probability ``f = weight_hi``), with ``pi = (1 - f) pi_lo +
        f pi_hi``. For marginals chosen per size (e.g. PAIR's program solved with
        ``size=n`` and ``size=n+1``); the inclusions are exact as in :class:`MixedSize`.

        Examples
        --------
        >>> d = MixedSize.from_components([0.5, 0.5, 0.5, 0.5], [0.8, 0.8, 0.7, 0.7], 0.25)
        >>> d.sizes, d.pi.round(3).tolist()
        ((2, 3), [0.575, 0.575, 0.55, 0.55])
        """
        if base not in BASE_KINDS:
            raise ValueError(f"base must be one of {sorted(BASE_KINDS)} (a fixed-size "
                             f"design); got {base!r}")
        f = float(weight_hi)
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"weight_hi must lie in [0, 1]; got {weight_hi!r}")
        kind = BASE_KINDS[base]
        lo = kind(pi_lo, **base_kwargs)
        hi = kind(pi_hi, **base_kwargs) if f > 0.0 else None
        if hi is not None and round(hi.pi.sum()) != round(lo.pi.sum()) + 1:
            raise ValueError(f"pi_hi must sum to one more than pi_lo; got sums "
                             f"{float(lo.pi.sum())!r} and {float(hi.pi.sum())!r}")
        obj = cls.__new__(cls)
        Design.__init__(obj, (1.0 - f) * lo.pi + (f * hi.pi if hi is not None else 0.0))
        obj.base = base
        obj._set(lo, hi, f)
        return obj

    def _set(self, lo: Design, hi: Design | None, frac: float) -> None:
        """Record the components and the achieved mixture marginals."""
        n = round(float(lo.pi.sum()))
        if hi is None:
            frac = 0.0
        self.components: tuple[Design, Design | None] = (lo, hi)
        self.sizes = (n, n if hi is None else n + 1)
        self.weights = (1.0 - frac, frac)
        achieved = np.array(lo.pi, dtype=np.float64) if hi is None else \
            (1.0 - frac) * lo.pi + frac * hi.pi
        achieved.setflags(write=False)
        self._target = achieved
        self.max_inclusion_order = min(c.max_inclusion_order for c in self.components
                                       if c is not None)

    def _parts(self) -> list[tuple[float, Design]]:
        return [(w, c) for w, c in zip(self.weights, self.components) if c is not None]

    def _joint(self) -> np.ndarray:
        return sum(w * c.joint() for w, c in self._parts())  # type: ignore[return-value]

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        return sum(w * np.atleast_1d(c.inclusion(rows)) for w, c in self._parts())  # type: ignore[return-value]

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        lo, hi = self.components
        if hi is None:
            return lo.sample(rng, size=size)
        take_hi = rng.random(size) < self.weights[1]
        out = np.empty((size, self.n_units), dtype=bool)
        k = int(take_hi.sum())
        out[~take_hi] = lo.sample(rng, size=size - k)
        out[take_hi] = hi.sample(rng, size=k)
        return out

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        masks, probs = [], []
        for w, c in self._parts():
            m, p = c.support(max_units=self.n_units)
            masks.append(m)
            probs.append(w * p)
        # The components have different sizes, so no mask appears twice.
        return np.concatenate(masks), np.concatenate(probs)

    def component_of(self, masks: ArrayLike) -> np.ndarray:
        """Index (0 or 1) of the component a sample came from, read off its size."""
        k = np.asarray(masks, dtype=bool).sum(axis=-1)
        return (k == self.sizes[1]).astype(np.int64) if self.sizes[0] != self.sizes[1] \
            else np.zeros_like(k)

