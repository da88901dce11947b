"""The common interface of every sampling design in :mod:`pairht.designs`.

A design is a probability distribution over subsets ``s`` of ``N`` units, written as boolean
masks ``J`` with ``J_i = 1`` when unit ``i`` is in the sample. Every design exposes exact
inclusion probabilities

    pi_i      = P(J_i = 1)                       (``.pi``)
    pi_ij     = P(J_i = J_j = 1)                 (``.joint()``, diagonal = pi)
    pi_{S}    = P(J_k = 1 for all k in S)        (``.inclusion(S)``, |S| = 1..4 at least)

which is what Horvitz-Thompson estimators of pair statistics need: first and second order for
the estimate, up to fourth order for its exact design covariance.
"""

from __future__ import annotations

import abc
import itertools
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import (
    RNGLike,
    as_bool_array,
    as_generator,
    check_int,
    check_probabilities,
    check_table_size,
)

#: Largest number of units whose support ``.support()`` enumerates (2**20 masks).
MAX_SUPPORT_UNITS = 20


class Design(abc.ABC):
    """A sampling design over ``N`` units with exact inclusion probabilities.

    Subclasses implement :meth:`_joint`, :meth:`_inclusion_rows`, :meth:`_sample` and
    :meth:`_support`; this base class validates arguments and handles the shapes.

    Parameters
    ----------
    pi : (N,) array_like
        Target first-order inclusion probabilities in [0, 1].
    """

    #: Short registry name, e.g. ``"bernoulli"``.
    name: ClassVar[str] = "design"
    #: Whether every sample has the same size ``n = sum(pi)``.
    fixed_size: ClassVar[bool] = False

    def __init__(self, pi: ArrayLike) -> None:
        arr = check_probabilities("pi", pi)
        if arr.ndim != 1:
            raise ValueError(
                f"pi must be a 1-d array of first-order inclusion probabilities, shape (N,); "
                f"got shape {arr.shape}. Build one design per row for a batch."
            )
        if arr.shape[0] < 1:
            raise ValueError("pi must have at least one unit; got shape (0,)")
        self._target = arr.copy()
        self._target.setflags(write=False)

    # ------------------------------------------------------------------ public interface
    @property
    def n_units(self) -> int:
        """Number of units ``N``."""
        return int(self._target.shape[0])

    @property
    def pi(self) -> np.ndarray:
        """First-order inclusion probabilities the design achieves, shape ``(N,)``."""
        return self._target

    @property
    def expected_size(self) -> float:
        """Expected sample size ``sum_i pi_i``."""
        return float(self._target.sum())

    def joint(self) -> np.ndarray:
        """Exact joint inclusion probabilities ``pi_ij = P(J_i = J_j = 1)``, shape ``(N, N)``.

        The diagonal holds ``pi``. The matrix is symmetric.

        Raises
        ------
        ValueError
            When the ``N x N`` table would exceed :data:`pairht._validation.MAX_TABLE_BYTES`
            (``N > 11585``), before it is allocated.
        """
        n = self.n_units
        check_table_size(
            f"{type(self).__name__}.joint() with N = {n} units (an N x N table)", n * n,
            "use fewer units per design",
        )
        out = np.array(self._joint(), dtype=np.float64)
        np.fill_diagonal(out, self._target)
        return out

    def inclusion(self, idx: ArrayLike) -> float | np.ndarray:
        """Exact probability that every unit in ``idx`` is included.

        Parameters
        ----------
        idx : (k,) or (m, k) array_like of int
            One set of ``k`` distinct unit indices, or ``m`` such sets (one per row).
            Orders ``k = 1..4`` are supported by every design; some support any ``k``.

        Returns
        -------
        float or (m,) ndarray
            ``P(J_{i_1} = ... = J_{i_k} = 1)`` for each set.
        """
        try:
            arr = np.asarray(idx)
        except (ValueError, TypeError):  # ragged nested lists
            raise ValueError(
                "idx must be a (k,) or (m, k) array of int unit indices (equal-length sets); "
                "got a ragged sequence"
            ) from None
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"idx must hold integer unit indices; got dtype {arr.dtype}")
        single = arr.ndim == 1
        rows = np.atleast_2d(arr).astype(np.int64, copy=False)
        if rows.ndim != 2 or rows.shape[1] < 1:
            raise ValueError(f"idx must have shape (k,) or (m, k) with k >= 1; got {arr.shape}")
        n = self.n_units
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise ValueError(f"idx entries must lie in [0, {n - 1}] (N = {n} units); got {arr}")
        srt = np.sort(rows, axis=1)
        if rows.shape[1] > 1 and np.any(srt[:, 1:] == srt[:, :-1]):
            raise ValueError(f"idx must hold distinct units in each set; got {arr}")
        if rows.shape[1] > self.max_inclusion_order:
            raise ValueError(
                f"{type(self).__name__}.inclusion supports sets of at most "
                f"{self.max_inclusion_order} units; got {rows.shape[1]}"
            )
        out = np.asarray(self._inclusion_rows(srt), dtype=np.float64)
        return float(out[0]) if single else out

    def sample(self, rng: RNGLike = None, size: int | None = None) -> np.ndarray:
        """Draw samples as boolean masks.

        Parameters
        ----------
        rng : int, numpy.random.Generator or None
            Source of randomness; an int seeds a fresh ``default_rng``.
        size : int or None
            Number of independent draws. ``None`` returns one mask of shape ``(N,)``.

        Returns
        -------
        (N,) or (size, N) ndarray of bool

        Raises
        ------
        ValueError
            A ``size`` that is not a non-negative int, or one whose ``(size, N + 1)`` table of
            uniforms would exceed :data:`pairht._validation.MAX_TABLE_BYTES` (refused before
            drawing).
        """
        gen = as_generator(rng)
        if size is None:
            return self._sample(gen, 1)[0]
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"size must be a non-negative int or None; got {size!r}")
        # the samplers draw a (size, N + 1) table of float64 uniforms
        check_table_size(
            f"{type(self).__name__}.sample(size={int(size)}) with N = {self.n_units} units "
            f"(a size x (N + 1) table of uniforms)",
            int(size) * (self.n_units + 1), "draw in smaller batches (several calls)",
        )
        return self._sample(gen, int(size))

    def support(self, max_units: int = MAX_SUPPORT_UNITS) -> tuple[np.ndarray, np.ndarray]:
        """Exact enumeration of the design: every sample with positive probability.

        Parameters
        ----------
        max_units : int
            Refuse designs with more units than this (the support can hold ``2**N`` masks).

        Returns
        -------
        masks : (K, N) ndarray of bool
        probs : (K,) ndarray of float, summing to 1
        """
        max_units = check_int("max_units", max_units, low=1)
        if self.n_units > max_units:
            raise ValueError(
                f"support() enumerates up to 2**N samples and is limited to N <= {max_units} "
                f"units; this design has N = {self.n_units}. Pass max_units to raise the limit."
            )
        masks, probs = self._support()
        keep = probs > 0
        return masks[keep], probs[keep]

    def positive_pairs(self) -> np.ndarray:
        """Boolean ``(N, N)`` matrix: ``True`` where the pair has ``pi_ij > 0``.

        Horvitz-Thompson pair estimators are unbiased only when every pair they estimate has
        positive joint inclusion probability. The diagonal reports ``pi_i > 0``.
        """
        return self.joint() > 0.0

    def all_pairs_positive(self) -> bool:
        """Whether every pair ``i != j`` has ``pi_ij > 0`` (positivity of the pair design)."""
        pos = self.positive_pairs()
        off = ~np.eye(self.n_units, dtype=bool)
        return bool(np.all(pos[off]))

    #: Largest ``k`` accepted by :meth:`inclusion`.
    max_inclusion_order: int = 4  # per instance where a design mixes others (MixedSize)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(N={self.n_units}, expected_size={self.expected_size:.6g})"

    # ------------------------------------------------------------------ subclass hooks
    def _exchangeable_inclusion(self, k: int) -> float | None:
        """``pi_S`` for every set of ``k`` units when it depends only on ``k``, else None.

        Lets the exact covariance skip its ``C(N, 4)`` inclusion table for such designs
        (simple random sampling, equal-probability Bernoulli). The default claims nothing.
        """
        return None

    @abc.abstractmethod
    def _joint(self) -> np.ndarray:
        """Joint inclusion matrix (diagonal is overwritten with pi)."""

    @abc.abstractmethod
    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        """Inclusion probability of each row of sorted distinct indices, shape ``(m,)``."""

    @abc.abstractmethod
    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``(size, N)`` boolean masks."""

    @abc.abstractmethod
    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        """All masks (possibly with zero-probability ones) and their probabilities."""


def all_masks(n: int) -> np.ndarray:
    """Every subset of ``n`` units as a ``(2**n, n)`` boolean array (bit ``i`` = unit ``i``)."""
    codes = np.arange(2**n, dtype=np.int64)[:, None]
    return ((codes >> np.arange(n, dtype=np.int64)) & 1).astype(bool)


def fixed_size_masks(n: int, k: int) -> np.ndarray:
    """Every subset of exactly ``k`` of ``n`` units, as a ``(C(n, k), n)`` boolean array."""
    combos = list(itertools.combinations(range(n), k))
    out = np.zeros((len(combos), n), dtype=bool)
    for row, c in enumerate(combos):
        out[row, list(c)] = True
    return out


def srswor_inclusion(n: ArrayLike, N: ArrayLike, k: int) -> np.ndarray:
    r"""Probability that ``k`` given units are all drawn by simple random sampling of ``n``
    of ``N`` units without replacement (SRSWOR): ``(n)_k / (N)_k = prod_{t<k} (n-t)/(N-t)``,
    0 where ``n < k`` or ``N < k``; elementwise over ``n`` and ``N``.

    The one home of SRSWOR's inclusion probabilities: conditional Poisson at equal ``pi``,
    the strata of :class:`~pairht.designs.Stratified`, the comparators' group-size design and
    the two-phase design of a narrower prefix width call it.

    Examples
    --------
    >>> srswor_inclusion(2, 4, 1).tolist(), srswor_inclusion([2, 3], 4, 2).tolist()
    (0.5, [0.16666666666666666, 0.5])
    """
    n_ = np.asarray(n, dtype=np.float64)
    N_ = np.asarray(N, dtype=np.float64)
    out = np.ones(np.broadcast(n_, N_).shape)
    for t in range(int(k)):
        out = out * np.divide(np.maximum(n_ - t, 0.0), N_ - t, out=np.zeros(out.shape),
                              where=N_ - t > 0)
    return out


def srswor_sample(n: ArrayLike, eligible: ArrayLike, rng: RNGLike = None) -> np.ndarray:
    r"""Simple random samples without replacement: ``n_r`` of row ``r``'s eligible units.

    Each of the ``C(U_r, n_r)`` subsets of the ``U_r`` eligible units of row ``r`` is drawn
    with probability ``1 / C(U_r, n_r)``, rows independently; ineligible units are never
    drawn. One uniform key per unit (``rng.random((m, N))``, ineligible keys ignored) and the
    ``n_r`` eligible units with the smallest keys: the keys' order is a uniform random
    permutation, so its first ``n_r`` are a uniform ``n_r``-subset. The one SRSWOR draw of the
    package (the strata of :class:`~pairht.designs.Stratified`, the comparators' group-size
    design, the subsets of a narrower prefix width); its inclusion probabilities are
    :func:`srswor_inclusion`.

    Parameters
    ----------
    n : (m,) array_like of int
        Sample size of each row, ``0 <= n_r <= U_r``.
    eligible : (m, N) array_like of bool
        The units each row may draw.
    rng : int, numpy.random.Generator or None

    Returns
    -------
    (m, N) ndarray of bool
        The drawn masks, ``n_r`` True entries in row ``r``, all of them eligible.

    Examples
    --------
    >>> mask = srswor_sample([2, 0, 3], [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], rng=0)
    >>> mask.sum(axis=1).tolist(), bool(mask[0, 3])
    ([2, 0, 3], False)
    """
    ok = as_bool_array("eligible", eligible, "the units each row may draw")
    if ok.ndim != 2:
        raise ValueError(f"eligible must have shape (m, N); got shape {ok.shape}")
    size = np.asarray(n)
    if size.shape != ok.shape[:1] or (size.size and size.dtype.kind not in "iu"):
        raise ValueError(f"n must be an int array of shape (m,) = ({ok.shape[0]},), one sample "
                         f"size per row; got {size!r}")
    U = ok.sum(axis=1)
    if np.any(size < 0) or np.any(size > U):
        r = int(np.argmax((size < 0) | (size > U)))
        raise ValueError(f"n must satisfy 0 <= n_r <= U_r (eligible units of row r); row {r} "
                         f"has n = {int(size[r])}, U = {int(U[r])}")
    keys = as_generator(rng).random(ok.shape)
    # ineligible units rank after every eligible one (keys lie in [0, 1))
    rank = np.argsort(np.argsort(np.where(ok, keys, 2.0), axis=1, kind="stable"), axis=1)
    return rank < size[:, None]


def inclusion_from_support(masks: np.ndarray, probs: np.ndarray, idx: ArrayLike) -> float:
    """Reference value of ``P(all units in idx included)`` summed over an enumerated support."""
    sel = np.all(masks[:, np.asarray(idx, dtype=np.int64)], axis=1)
    return float(np.sum(probs[sel]))
