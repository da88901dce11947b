"""Dependent rounding (ordered pivotal sampling) and its mixture over random orders."""

from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import RNGLike, as_generator, check_int
from pairht.designs import _pivotal_kernels as _k
from pairht.designs.base import Design, all_masks

#: Batches at least this large use precomputed stretch products (O(N^2) memory, built once).
_STRETCH_MIN_ROWS = 4096
_STRETCH_MAX_UNITS = 512

#: Most orders a :class:`RandomizedDependentRounding` mixture may hold. Every inclusion query
#: costs one pass per order (and each order is built at construction); past a few dozen
#: orders positivity no longer improves, so a larger ``K`` is a mistake, not a request.
MAX_ORDERS = 4096


class PositivityWarning(UserWarning):
    """Some pair of units with ``pi > 0`` can never be sampled together."""


class DependentRounding(Design):
    r"""Dependent rounding along a fixed order: ordered pivotal sampling.

    The units are visited in ``order``; a single fractional "carry" unit meets each new unit
    in a pivotal step (Deville & Tillé 1998; Srinivasan 2001) with ``s = a + b`` (carry value
    ``a``, new value ``b``):

    * ``s < 1``: the carry takes ``s`` and the new unit 0 with probability ``a / s``, else the
      roles swap;
    * ``s >= 1``: the carry is rounded to 1 and the new unit carries ``s - 1`` with
      probability ``(1 - b) / (2 - s)``, else the new unit is rounded to 1 and the carry
      keeps ``s - 1``;

    and a carry left at the end is rounded to 1 with probability equal to its value. Each step
    preserves every unit's expected value, so ``P(J_i = 1) = pi_i``; the size is
    ``sum(pi)`` when that is an integer (within 1e-9), otherwise its floor or ceiling.

    Inclusion probabilities of any order are exact: the carry value after each step is
    deterministic (the fractional part of the running sum), so ``P(J_S = 1)`` follows from a
    forward recursion whose state is only whether the current carry belongs to ``S``
    (Chauvet 2012 characterises the same design), ``O(N)`` per set and ``O(N^2)`` for
    ``.joint()``.

    Positivity fails: units that fall in the same unit interval of the running sum are never
    selected together, e.g. ``pi = (0.5, 0.5, 0.5, 0.5)`` in natural order never selects
    units 0 and 1 together (``joint()[0, 1] == 0``). Use :meth:`positive_pairs` to see which
    pairs, or :class:`RandomizedDependentRounding` for a design with every pair positive.

    Parameters
    ----------
    pi : (N,) array_like
        Inclusion probabilities in [0, 1].
    order : (N,) array_like of int, optional
        Permutation of ``range(N)``: the order in which units are visited. Default: natural.

    Attributes
    ----------
    order : (N,) ndarray of int
    n : int or None
        The sample size when it is fixed, else None (sizes ``floor`` and ``ceil`` of
        ``sum(pi)``).

    Notes
    -----
    A running-sum crossing within 1e-12 of an integer is treated as exact, and a final carry
    within 1e-9 of 0 or 1 is rounded; ``.pi`` reports the marginals the process then has
    exactly (they differ from the input by at most these amounts).

    References
    ----------
    Deville, J.-C. & Tillé, Y. (1998). Unequal probability sampling without replacement
    through a splitting method. Biometrika 85(1), 89-101.
    Srinivasan, A. (2001). Distributions on level-sets with applications to approximation
    algorithms. Proc. 42nd IEEE FOCS, 588-597.
    Chauvet, G. (2012). On a characterization of ordered pivotal sampling. Bernoulli 18(4),
    1320-1340.

    Examples
    --------
    >>> from pairht.designs import DependentRounding
    >>> d = DependentRounding([0.5, 0.5, 0.5, 0.5])
    >>> float(d.joint()[0, 1]), float(d.joint()[0, 2])
    (0.0, 0.25)
    >>> d.all_pairs_positive()
    False
    >>> d.sample(rng=0, size=4).sum(axis=1).tolist()
    [2, 2, 2, 2]
    """

    name = "dependent_rounding"
    fixed_size = True
    max_inclusion_order = 64

    def __init__(self, pi: ArrayLike, order: ArrayLike | None = None) -> None:
        super().__init__(pi)
        N = self.n_units
        self.order = _check_order(order, N)
        self._inv = np.empty(N, dtype=np.int64)
        self._inv[self.order] = np.arange(N)
        # the kernels read the input pi only for units skipped as exactly 0 or 1
        raw = self._raw = self._target
        self._stretches: tuple[np.ndarray, np.ndarray] | None = None
        sched = _k.schedule(raw, self.order)
        self._kind, self._pk, self._pn, self._val, self._a_end, self._g1, self._g0 = sched
        # the leading arguments of every exact-inclusion kernel, in their order
        self._process = (raw, self.order, self._kind, self._pk, self._pn, self._val, self._g1,
                         self._g0)
        # The class says "fixed size when sum(pi) is an integer"; the instance says whether it is.
        self.fixed_size = self._a_end in (0.0, 1.0)  # type: ignore[misc]
        self.n = round(float(raw.sum())) if self.fixed_size else None
        achieved = self._inclusion_rows(np.arange(N, dtype=np.int64)[:, None])
        achieved.setflags(write=False)
        self._target = achieved

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        if rows.shape[0] >= _STRETCH_MIN_ROWS and self.n_units <= _STRETCH_MAX_UNITS:
            if self._stretches is None:  # built once, on the first large batch
                T = _k.step_matrices(self._raw, self.order, self._kind, self._pk, self._pn)
                self._stretches = (_k.stretch_products(T[1]), T[0])
            B, T1 = self._stretches
            return _k.batch_inclusion_stretches(B, T1, self._g1, rows, self._inv)
        return _k.batch_inclusion(*self._process, rows, self._inv)

    def _joint(self) -> np.ndarray:
        return _k.joint_matrix(*self._process)

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        u = rng.random((size, self.n_units + 1))
        return _k.sample_process(
            self._raw, self.order, self._kind, self._pk, self._pn, self._a_end, u
        )

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        masks = self._candidate_masks()
        return masks, self._mask_probabilities(masks)

    def _candidate_masks(self) -> np.ndarray:
        """Masks of size floor or ceil of the input sum (a superset of the support)."""
        masks = all_masks(self.n_units)
        total = float(np.sum(self._raw))
        sizes = masks.sum(axis=1)
        return masks[(sizes >= np.floor(total - 1e-9)) & (sizes <= np.ceil(total + 1e-9))]

    def _mask_probabilities(self, masks: np.ndarray) -> np.ndarray:
        return _k.mask_probabilities(*self._process, masks)


def _check_order(order: ArrayLike | None, n_units: int) -> np.ndarray:
    if order is None:
        return np.arange(n_units, dtype=np.int64)
    arr = np.asarray(order)
    if arr.ndim != 1 or arr.shape[0] != n_units:
        raise ValueError(
            f"order must be a permutation of range({n_units}) with shape ({n_units},); "
            f"got shape {arr.shape}"
        )
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"order must hold integer unit indices; got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if not np.array_equal(np.sort(arr), np.arange(n_units)):
        raise ValueError(
            f"order must be a permutation of range({n_units}) (each unit exactly once); "
            f"got {arr.tolist()}"
        )
    return arr


class RandomizedDependentRounding(Design):
    r"""Dependent rounding along one of ``K`` recorded random orders, drawn uniformly.

    The design is the mixture ``P(s) = (1/K) sum_o P_o(s)`` of :class:`DependentRounding`
    over the orders ``o_1, ..., o_K`` (drawn once, at construction, and kept in ``.orders``),
    so every inclusion probability is the exact average

    .. math:: \pi_S = \frac{1}{K} \sum_{o} \pi_S^{(o)}.

    A pair ``i, j`` has ``pi_ij = 0`` under one order only when no unit-interval boundary of
    the running sum separates them; over random orders this almost never holds for all ``K``
    at once, so a moderate ``K`` makes every pair positive. Positivity is impossible when
    ``sum(pi) <= 1`` (at most one unit per sample) and is checked at construction: a
    :class:`PositivityWarning` names a pair of units with ``pi > 0`` that remains at zero,
    in which case increase ``n_orders``.

    Parameters
    ----------
    pi : (N,) array_like
        Inclusion probabilities in [0, 1].
    n_orders : int
        Number ``1 <= K <= MAX_ORDERS = 4096`` of random orders in the mixture (costs are
        linear in ``K``).
    rng : int, numpy.random.Generator or None
        Source of the random orders.
    orders : (K, N) array_like of int, optional
        Use these orders instead of drawing them (``n_orders`` and ``rng`` are then ignored);
        at most ``MAX_ORDERS`` rows, each a permutation of ``range(N)``.

    References
    ----------
    Those of :class:`DependentRounding` (Deville & Tillé 1998; Srinivasan 2001; Chauvet 2012).

    Examples
    --------
    >>> from pairht.designs import RandomizedDependentRounding
    >>> d = RandomizedDependentRounding([0.5, 0.5, 0.5, 0.5], n_orders=8, rng=0)
    >>> d.all_pairs_positive()
    True
    >>> d.orders.shape
    (8, 4)
    """

    name = "randomized_dependent_rounding"
    fixed_size = True
    max_inclusion_order = 64

    def __init__(
        self,
        pi: ArrayLike,
        n_orders: int = 16,
        rng: RNGLike = None,
        orders: ArrayLike | None = None,
    ) -> None:
        super().__init__(pi)
        N = self.n_units
        if orders is None:
            k = check_int(
                "n_orders", n_orders, low=1, high=MAX_ORDERS,
                rule="the number of random orders in the mixture; MAX_ORDERS bounds its cost",
            )
            gen = as_generator(rng)
            orders = np.stack([gen.permutation(N) for _ in range(k)])
        arr = np.asarray(orders)
        if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[0] > MAX_ORDERS:
            raise ValueError(
                f"orders must have shape (K, {N}) with 1 <= K <= MAX_ORDERS = {MAX_ORDERS}; "
                f"got {arr.shape}"
            )
        self.parts = [DependentRounding(self._target, order=o) for o in arr]
        self.orders = np.stack([d.order for d in self.parts])
        self.orders.setflags(write=False)
        self.fixed_size = all(d.fixed_size for d in self.parts)  # type: ignore[misc]
        self.n = self.parts[0].n if self.fixed_size else None
        target = np.mean([d.pi for d in self.parts], axis=0)
        target.setflags(write=False)
        self._target = target
        self._check_positivity()

    @property
    def n_orders(self) -> int:
        """Number of orders ``K`` in the mixture."""
        return len(self.parts)

    def _check_positivity(self) -> None:
        live = self._target > 0.0
        bad = ~self.positive_pairs() & np.outer(live, live)
        np.fill_diagonal(bad, False)
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            warnings.warn(
                f"RandomizedDependentRounding with K = {self.n_orders} orders leaves "
                f"{int(bad.sum()) // 2} pair(s) with pi_ij = 0, e.g. units ({i}, {j}); "
                f"pair Horvitz-Thompson estimates are then biased. Increase n_orders"
                f"{' (impossible here: sum(pi) <= 1)' if self._target.sum() <= 1 + 1e-9 else ''}.",
                PositivityWarning,
                stacklevel=3,
            )

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        return np.mean([d._inclusion_rows(rows) for d in self.parts], axis=0)

    def _joint(self) -> np.ndarray:
        # summed in place: np.mean over the list would stack K tables of N x N first
        out = self.parts[0]._joint()
        for d in self.parts[1:]:
            out += d._joint()
        return out / self.n_orders

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        which = rng.integers(self.n_orders, size=size)
        out = np.zeros((size, self.n_units), dtype=bool)
        for k, d in enumerate(self.parts):
            sel = np.flatnonzero(which == k)
            if sel.size:
                out[sel] = d._sample(rng, sel.size)
        return out

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        masks = self.parts[0]._candidate_masks()  # the same for every order
        probs = np.mean([d._mask_probabilities(masks) for d in self.parts], axis=0)
        return masks, probs
