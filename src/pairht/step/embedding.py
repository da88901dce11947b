r"""A design over the unfinished candidates, embedded in the group with finished ones kept.

Finished candidates are complete: they are in every sample. With ``F`` the finished and ``U``
the unfinished candidates and a base design over ``U``, the group's design is

.. math:: J_F = 1, \qquad J_U \sim \text{base},

so every inclusion probability is the base design's over the unfinished members of the set,
``pi_S = pi^{base}_{S \cap U}`` (``= 1`` when ``S \subset F``): a certain event is independent
of everything, hence ``rho_ij = pi_j`` for finished ``i`` and ``rho_ij = 1`` for two finished.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import RNGLike, as_generator
from pairht.designs import Bernoulli, Design, MixedSize, Stratified
from pairht.designs.mixed_size import _INTEGER_TOL as INTEGER_TOL
from pairht.designs.mixed_size import BASE_KINDS
from pairht.designs.registry import DESIGNS, step_design_kind


class WithFinished(Design):
    r"""``base`` over the unfinished candidates; finished candidates are always included.

    Parameters
    ----------
    base : Design or None
        Design over the ``|U|`` unfinished candidates, in their order in the group
        (``None`` when every candidate is finished).
    finished : (N,) array_like of bool

    Examples
    --------
    >>> d = WithFinished(Bernoulli([0.5, 0.25]), [False, True, False])
    >>> d.pi.tolist()
    [0.5, 1.0, 0.25]
    >>> d.joint().tolist()  # rho_01 = pi_0 (unit 1 is certain), rho_02 = 0.5 * 0.25
    [[0.5, 0.5, 0.125], [0.5, 1.0, 0.25], [0.125, 0.25, 0.25]]
    """

    name: ClassVar[str] = "with_finished"
    fixed_size: ClassVar[bool] = False

    def __init__(self, base: Design | None, finished: ArrayLike) -> None:
        fin = np.asarray(finished, dtype=bool).reshape(-1)
        self._unf = np.flatnonzero(~fin)
        n_u = int(self._unf.size)
        if (base is None) != (n_u == 0):
            raise ValueError(f"base must be a Design over the {n_u} unfinished candidates "
                             f"(None only when every candidate is finished); got "
                             f"{type(base).__name__}")
        if base is not None and base.n_units != n_u:
            raise ValueError(f"base must have one unit per unfinished candidate ({n_u}); got "
                             f"{base.n_units} units")
        pi = np.ones(fin.size)
        if base is not None:
            pi[self._unf] = base.pi
        super().__init__(pi)
        self.base = base
        self.finished = fin
        # Base index of each group unit (-1: finished).
        self._pos = np.full(fin.size, -1, dtype=np.int64)
        self._pos[self._unf] = np.arange(n_u)
        # Sets shrink to their unfinished members: the base design's order bounds ours.
        self.max_inclusion_order = (  # type: ignore[misc]
            64 if base is None else base.max_inclusion_order)

    def _joint(self) -> np.ndarray:
        N = self.n_units
        out = np.ones((N, N))
        if self.base is None:
            return out
        u, pu = self._unf, self.base.pi
        out[:, u] = pu[None, :]  # rho_ij = pi_j for finished i ...
        out[u, :] = out[:, u].T  # ... and rho_ji = pi_j: symmetric
        out[np.ix_(u, u)] = self.base.joint()
        return out

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        out = np.ones(rows.shape[0])
        if self.base is None:
            return out
        pos = self._pos[rows]
        for r in range(rows.shape[0]):  # rows lose their finished members: ragged sets
            sub = pos[r][pos[r] >= 0]
            if sub.size:
                out[r] = float(self.base.inclusion(sub))
        return out

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        out = np.ones((size, self.n_units), dtype=bool)
        if self.base is not None:
            out[:, self._unf] = self.base.sample(rng, size=size)
        return out

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        if self.base is None:
            return np.ones((1, self.n_units), dtype=bool), np.ones(1)
        masks, probs = self.base.support(max_units=self.base.n_units)
        out = np.ones((masks.shape[0], self.n_units), dtype=bool)
        out[:, self._unf] = masks
        return out, probs


#: Expected size over the unfinished candidates below which a fixed-size kind is drawn as
#: Bernoulli (see :func:`unfinished_design`).
MIN_FIXED_SIZE = 2.0


def below_fixed_size(pi_u: ArrayLike) -> bool:
    """Whether a fixed-size design over the unfinished candidates with marginals ``pi_u`` is
    drawn Bernoulli instead: expected size ``sum(pi_u) < MIN_FIXED_SIZE`` by more than the
    fixed-size designs' integer tolerance (1e-9: a sum within it of 2 *is* size 2 for them,
    e.g. six candidates at ``pi = 1/3``, whose float sum is ``2 - 2.2e-16``). See
    :func:`unfinished_design`; the audit's fixed-size rows apply the same rule.

    Examples
    --------
    >>> below_fixed_size([1 / 3] * 6), below_fixed_size([0.3] * 6)
    (False, True)
    """
    return float(np.sum(pi_u)) < MIN_FIXED_SIZE - INTEGER_TOL


def unfinished_design(kind: str, pi_u: ArrayLike, rng: RNGLike = None,
                      **kwargs: Any) -> Design:
    r"""The design named ``kind`` over the unfinished candidates, at any ``sum(pi_u)``.

    ``kind`` is resolved by :func:`pairht.designs.registry.step_design_kind` (so
    ``"dependent_rounding"`` is its randomised-order mixture). A fixed-size kind takes its
    size over the unfinished candidates: it is built as :class:`~pairht.designs.MixedSize`
    with that base, which is the base design itself when ``sum(pi_u)`` is an integer and the
    exact mixture of the two neighbouring sizes otherwise; ``"mixed_size"`` is that mixture
    with the conditional Poisson base (:func:`fixed_base`) and follows the same rules. Below
    an expected size of two
    (``sum(pi_u) < 2``) a fixed-size kind is drawn as Bernoulli with the same ``pi_u``: sizes
    0 and 1 never observe a pair of unfinished candidates (``rho_ij = 0``, so the pair-HT
    estimator would be biased), and sizes 1 and 2 observe one only in the rare size-2 draws;
    it is PAIR's own rule (:func:`pairht.step.pair_program.solve_pair`). A single unfinished
    candidate has one design, Bernoulli. :class:`~pairht.designs.Stratified` (SRSWOR within
    each level set of ``pi_u``) follows the same rule when ``pi_u`` has one level, and is drawn
    Bernoulli when one of its strata would never observe two of its units. Designs whose
    constructor takes ``rng`` (random orders) get it.

    Examples
    --------
    >>> d = unfinished_design("conditional_poisson", [0.5, 0.5, 0.5, 0.5, 0.5])  # size 2 or 3
    >>> d.sizes, d.weights
    ((2, 3), (0.5, 0.5))
    >>> unfinished_design("conditional_poisson", [0.5, 0.5, 0.5]).name  # expected size 1.5
    'bernoulli'
    >>> unfinished_design("mixed_size", [0.4, 0.4]).name  # sizes 0 and 1 never see the pair
    'bernoulli'
    """
    name = step_design_kind(kind)
    pi = np.asarray(pi_u, dtype=np.float64)
    cls = DESIGNS[name]
    # "mixed_size" is conditional Poisson's mixture (fixed_base): the same rule below two
    if pi.size == 1 or (fixed_base(name) is not None and below_fixed_size(pi)):
        return Bernoulli(pi)
    if cls is Stratified:
        strat = Stratified(pi)
        # one stratum is SRSWOR: the fixed-size rule; several must observe every pair
        if (strat.levels.size == 1 and below_fixed_size(pi)) or not strat.all_pairs_positive():
            return Bernoulli(pi)
        return strat
    extra = dict(kwargs)
    if DESIGNS.capabilities(name).fixed_size:
        if DESIGNS.capabilities(name).takes_rng:
            extra.setdefault("rng", as_generator(rng))
        return MixedSize(pi, base=name, **extra)
    if DESIGNS.capabilities(name).takes_rng:
        extra.setdefault("rng", as_generator(rng))
    return cls(pi, **extra)


def fixed_base(kind: str) -> str | None:
    """The fixed-size design ``kind`` draws (a key of :data:`pairht.designs.mixed_size.BASE_KINDS`),
    or ``None`` for a design of random size. ``"mixed_size"`` is conditional Poisson's mixture.

    Examples
    --------
    >>> fixed_base("mixed_size"), fixed_base("dependent_rounding"), fixed_base("bernoulli")
    ('conditional_poisson', 'randomized_dependent_rounding', None)
    """
    name = step_design_kind(kind)
    if name == MixedSize.name:
        return "conditional_poisson"
    return name if name in BASE_KINDS else None


def unfinished_mixture(kind: str, pi_lo: ArrayLike, pi_hi: ArrayLike, weight_hi: float,
                       rng: RNGLike = None, **kwargs: Any) -> Design:
    r"""The fixed-size ``kind`` at sizes ``n`` (``pi_lo``) and ``n + 1`` (``pi_hi``), mixed.

    The draw is size ``n + 1`` with probability ``f = weight_hi``; every inclusion
    probability is ``(1 - f) pi^lo_S + f pi^hi_S`` exactly
    (:meth:`pairht.designs.MixedSize.from_components`), so ``pi = (1 - f) pi_lo + f pi_hi``.
    PAIR's two solved sizes (:mod:`pairht.step.pair_program`) are drawn this way. A single
    unfinished candidate is Bernoulli(``pi``).

    Examples
    --------
    >>> d = unfinished_mixture("conditional_poisson", [0.5] * 4, [0.75] * 4, 0.5)
    >>> d.sizes, d.pi.tolist()
    ((2, 3), [0.625, 0.625, 0.625, 0.625])
    """
    base = fixed_base(kind)
    if base is None:
        raise ValueError(f"kind must be a fixed-size design {sorted(BASE_KINDS)} (or "
                         f"'mixed_size'); got {kind!r}")
    lo = np.asarray(pi_lo, dtype=np.float64)
    hi = np.asarray(pi_hi, dtype=np.float64)
    f = float(weight_hi)
    if lo.size == 1:
        return Bernoulli((1.0 - f) * lo + f * hi)
    extra = dict(kwargs)
    if DESIGNS.capabilities(base).takes_rng:
        extra.setdefault("rng", as_generator(rng))
    return MixedSize.from_components(lo, hi, f, base=base, **extra)


