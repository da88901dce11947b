r"""A uniformly drawn anchor pair forced into the sample of any base design.

PAIR paper, appendix "At least two completed vertices": to rule out draws with fewer than
two completed candidates (which observe no edge), a uniformly drawn pair ``{a, b}`` of the
``M = N(N-1)/2`` pairs is completed with conditional probability one, and every resulting
joint probability is logged. Here the other units follow the base design unchanged and the
anchor is OR-ed in: ``J = J_base OR 1{a, b}``. Every inclusion probability then follows
exactly from the base design's,

.. math::

    \pi_S = \frac1M \Big[ \binom{N-k}{2} P_b(S)
            + (N - k) \sum_{u \in S} P_b(S \setminus \{u\})
            + \sum_{\{u, v\} \subset S} P_b(S \setminus \{u, v\}) \Big],
    \qquad k = |S|,\ P_b(\emptyset) = 1,

by conditioning on how many of the anchor's two units fall in ``S`` (``binom(N-k, 2)``
anchors miss ``S``, ``N - k`` anchors meet it in each ``u``, one anchor equals each pair
``{u, v}`` of ``S``). Every pair has ``pi_ij >= 1/M > 0``, so the pair Horvitz-Thompson
estimator is exactly unbiased with these probabilities, and every draw observes an edge.
"""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np

from pairht.designs.base import Design


class AnchoredPair(Design):
    r"""Base design plus a uniformly drawn anchor pair completed with probability one.

    ``J = J_base OR 1{a, b}`` with ``{a, b}`` uniform over the ``M`` pairs, drawn
    independently of the base sample. The first-order probabilities therefore exceed the
    base design's: ``pi_i = [binom(N-1, 2) pi_i^b + N - 1] / M``, and the sample size is
    random (between the base size and that plus two) even when the base is fixed-size.

    Parameters
    ----------
    base : Design
        Any design with ``N >= 2`` units; its inclusions up to order 4 give this design's.

    Examples
    --------
    >>> from pairht.designs import Bernoulli
    >>> from pairht.designs.anchored import AnchoredPair
    >>> d = AnchoredPair(Bernoulli([0.5, 0.5, 0.5]))
    >>> d.pi.tolist()  # (1 * 0.5 + 2) / 3
    [0.8333333333333334, 0.8333333333333334, 0.8333333333333334]
    >>> bool(d.sample(rng=0).sum() >= 2)
    True
    """

    name: ClassVar[str] = "anchored_pair"
    fixed_size: ClassVar[bool] = False

    def __init__(self, base: Design) -> None:
        if not isinstance(base, Design):
            raise ValueError(
                f"base must be a pairht.designs.Design (e.g. Bernoulli(pi)); "
                f"got {type(base).__name__}"
            )
        n = base.n_units
        if n < 2:
            raise ValueError(
                f"base must have at least 2 units to anchor a pair; got N = {n}"
            )
        self.base = base
        self._m = n * (n - 1) // 2
        b = base.pi
        super().__init__(np.clip((_choose2(n - 1) * b + (n - 1)) / self._m, 0.0, 1.0))

    def __repr__(self) -> str:
        return f"AnchoredPair({self.base!r})"

    def _joint(self) -> np.ndarray:
        n = self.n_units
        pb = self.base.pi
        both_out = _choose2(n - 2) * self.base.joint()
        return (both_out + (n - 2) * (pb[:, None] + pb[None, :]) + 1.0) / self._m

    def _base_inclusion(self, rows: np.ndarray) -> np.ndarray:
        """Base inclusion of each row (sorted distinct), with ``P_b(empty set) = 1``."""
        if rows.shape[1] == 0:
            return np.ones(rows.shape[0])
        return np.asarray(self.base.inclusion(rows), dtype=np.float64).reshape(rows.shape[0])

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        m_rows, k = rows.shape
        n = self.n_units
        total = _choose2(n - k) * self._base_inclusion(rows)
        # sets with one unit removed, one base call for all k deletions
        drop1 = [np.delete(rows, u, axis=1) for u in range(k)]
        total += (n - k) * self._base_inclusion(np.concatenate(drop1)).reshape(k, m_rows).sum(0)
        pairs = list(itertools.combinations(range(k), 2))
        if pairs:
            drop2 = [np.delete(rows, list(p), axis=1) for p in pairs]
            total += self._base_inclusion(np.concatenate(drop2)).reshape(len(pairs), m_rows).sum(0)
        return total / self._m

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        masks = np.array(self.base.sample(rng=rng, size=size), dtype=bool, copy=True)
        iu, ju = np.triu_indices(self.n_units, k=1)
        anchor = rng.integers(self._m, size=size)
        rows = np.arange(size)
        masks[rows, iu[anchor]] = True
        masks[rows, ju[anchor]] = True
        return masks

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.n_units
        base_masks, base_probs = self.base.support(max_units=n)
        weights = 1 << np.arange(n, dtype=np.int64)
        codes = base_masks.astype(np.int64) @ weights
        iu, ju = np.triu_indices(n, k=1)
        anchors = weights[iu] | weights[ju]
        # OR every base sample with every anchor, accumulating probability per sample code;
        # chunked so that at most ~4M (sample, anchor) combinations are held at once.
        chunk = max(1, (1 << 22) // self._m)
        acc_codes = []
        acc_probs = []
        for start in range(0, codes.shape[0], chunk):
            combined = (codes[start : start + chunk, None] | anchors[None, :]).ravel()
            p = np.repeat(base_probs[start : start + chunk] / self._m, self._m)
            uniq, inverse = np.unique(combined, return_inverse=True)
            acc_codes.append(uniq)
            acc_probs.append(np.bincount(inverse, weights=p, minlength=uniq.shape[0]))
        all_codes = np.concatenate(acc_codes)
        uniq, inverse = np.unique(all_codes, return_inverse=True)
        probs = np.bincount(inverse, weights=np.concatenate(acc_probs), minlength=uniq.shape[0])
        masks = ((uniq[:, None] >> np.arange(n, dtype=np.int64)) & 1).astype(bool)
        return masks, probs


def _choose2(x: int) -> float:
    """``C(x, 2)``, zero for ``x < 2``."""
    return float(x * (x - 1) // 2) if x >= 2 else 0.0
