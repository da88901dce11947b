r"""Stratified simple random sampling: SRSWOR within each level set of ``pi``, independently.

The strata are the groups of units with equal ``pi`` (a rule that wants strata gives each its
own inclusion probability; two strata that happen to share one are one stratum with the same
marginals). Stratum ``h`` has ``N_h`` units at ``pi_h`` and expected size ``S_h = N_h pi_h``;
it draws ``n_h = floor(S_h)`` or ``floor(S_h) + 1`` units (the latter with probability
``S_h - floor(S_h)``, so any ``pi`` is exact), then a uniform subset of that size. Strata are
independent, so every inclusion probability is a product over strata:

.. math:: \pi_S = \prod_h \frac{E[(n_h)_{k_h}]}{(N_h)_{k_h}},
          \qquad k_h = |S \cap h|, \quad (x)_k = x (x-1) \cdots (x-k+1).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from pairht.designs.base import Design, all_masks, srswor_inclusion, srswor_sample


class Stratified(Design):
    r"""Stratified SRSWOR over the level sets of ``pi`` (independent strata, mixed sizes).

    Parameters
    ----------
    pi : (N,) array_like
        Inclusion probabilities in [0, 1]; units with equal values form a stratum.

    Notes
    -----
    Within stratum ``h`` (``N_h`` units, size ``n_h`` in ``{m_h, m_h + 1}``, ``m_h =
    floor(N_h pi_h)``, ``P(n_h = m_h + 1) = f_h = N_h pi_h - m_h``) a set holding ``k`` of
    its units is included with probability ``E[(n_h)_k] / (N_h)_k``; strata are independent,
    so the inclusion probability of any set is the product over strata (module docstring).
    A stratum whose expected size is at most one never observes two of its own units
    (``pi_ij = 0`` inside it): :meth:`~pairht.designs.base.Design.all_pairs_positive` says
    so, and a rule that needs every pair (the pair-HT estimator) must keep each stratum of
    two or more units above size one.

    References
    ----------
    Cochran, W. G. (1977). Sampling Techniques, 3rd ed., ch. 5 (stratified random sampling)
    and 5.5 (optimum allocation). Wiley.

    Examples
    --------
    >>> from pairht.designs import Stratified
    >>> d = Stratified([1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25])  # sizes 1, 1, 1 of 1, 2, 4
    >>> d.strata.tolist(), d.sizes.tolist()
    ([2, 1, 1, 0, 0, 0, 0], [1.0, 1.0, 1.0])
    >>> float(d.joint()[1, 2]), float(d.joint()[1, 3])   # same stratum: never both
    (0.0, 0.125)
    >>> int(d.sample(rng=0).sum())
    3
    """

    name = "stratified"
    fixed_size = False
    max_inclusion_order = 64

    def __init__(self, pi: ArrayLike) -> None:
        super().__init__(pi)
        levels, strata = np.unique(self._target, return_inverse=True)
        #: Stratum of every unit (index into ``levels``, ascending ``pi``).
        self.strata = strata.reshape(-1)
        self.levels = levels
        #: Units per stratum ``N_h`` and expected size per stratum ``S_h = N_h pi_h``.
        self.counts = np.bincount(self.strata, minlength=levels.size)
        self.sizes = self.counts * levels
        self._lo = np.floor(self.sizes + 1e-12).astype(np.int64)
        self._lo = np.minimum(self._lo, self.counts)
        self._frac = np.clip(self.sizes - self._lo, 0.0, 1.0)
        self._frac[np.abs(self._frac) <= 1e-12] = 0.0

    # ------------------------------------------------------------------ helpers
    def _stratum_inclusion(self, k: np.ndarray) -> np.ndarray:
        """``E[(n_h)_k] / (N_h)_k`` for every stratum ``h`` and count ``k[..., h]``."""
        k = np.asarray(k, dtype=np.int64)
        out = np.ones(k.shape)
        for kk in np.unique(k):
            if kk == 0:
                continue
            sel = k == kk
            # the stratum's size is lo or lo + 1 (weight frac): SRSWOR at each, mixed
            val = ((1.0 - self._frac) * srswor_inclusion(self._lo, self.counts, int(kk))
                   + self._frac * srswor_inclusion(self._lo + 1, self.counts, int(kk)))
            out[sel] = np.broadcast_to(val, k.shape)[sel]
        return out

    def _counts_of(self, rows: np.ndarray) -> np.ndarray:
        """``(m, H)`` number of each row's units in every stratum."""
        H = self.levels.size
        lab = self.strata[rows]
        return np.stack([(lab == h).sum(axis=1) for h in range(H)], axis=1)

    # ------------------------------------------------------------------ hooks
    def _exchangeable_inclusion(self, k: int) -> float | None:
        if self.levels.size != 1:
            return None
        return float(self._stratum_inclusion(np.array([k]))[0])

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        return np.prod(self._stratum_inclusion(self._counts_of(rows)), axis=1)

    def _joint(self) -> np.ndarray:
        one = self._stratum_inclusion(np.eye(self.levels.size, dtype=np.int64))
        pi_h = np.diagonal(one)
        two = np.diagonal(self._stratum_inclusion(2 * np.eye(self.levels.size,
                                                             dtype=np.int64)))
        lab = self.strata
        joint = np.outer(pi_h[lab], pi_h[lab])
        same = lab[:, None] == lab[None, :]
        return np.where(same, two[lab][:, None], joint)

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        out = np.zeros((size, self.n_units), dtype=bool)
        for h in range(self.levels.size):
            units = np.flatnonzero(self.strata == h)
            n = self._lo[h] + (rng.random(size) < self._frac[h])
            out[:, units] = srswor_sample(n, np.ones((size, units.size), dtype=bool), rng)
        return out

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        masks = all_masks(self.n_units)
        k = np.stack([masks[:, self.strata == h].sum(axis=1)
                      for h in range(self.levels.size)], axis=1)
        probs = np.ones(masks.shape[0])
        for h in range(self.levels.size):
            n_h = int(self.counts[h])
            p_size = np.where(k[:, h] == self._lo[h], 1.0 - self._frac[h], 0.0) \
                + np.where(k[:, h] == self._lo[h] + 1, self._frac[h], 0.0)
            probs *= p_size / np.array([math.comb(n_h, int(x)) for x in k[:, h]])
        return masks, probs
