"""Argument checks shared by the estimators (built on :mod:`pairht._validation`).

Every public estimator accepts a leading batch axis ``...``; the batch shapes of its arguments
must broadcast against each other. Entries of ``rewards`` and ``scores`` at unselected
candidates (``mask`` False) are never read, so they may hold anything, NaN included: in
training those responses were never completed.
"""

from __future__ import annotations

from typing import Any, overload

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import (
    as_real_array,
    check_finite,
    check_probabilities,
    check_symmetric,
    name_index,
)

#: Tolerance for the symmetry of ``joint``: designs compute rho_ij and rho_ji by the same
#: arithmetic, so a larger gap means the argument is not a joint-inclusion matrix.
SYMMETRY_ATOL = 1e-12

#: Rounding allowed on the Frechet bounds of ``joint``: the designs compute ``rho_ij`` and
#: ``pi_i`` by different sums, exact to about 1e-13 at G = 512; a larger breach is a wrong
#: matrix (a swapped argument, an estimate of the joint, ``np.outer(pi, pi)`` with pi^2 on
#: its diagonal), which would weight edges by impossible probabilities.
FRECHET_ATOL = 1e-9


@overload
def n_pairs(g: int) -> int: ...


@overload
def n_pairs(g: np.ndarray) -> np.ndarray: ...


def n_pairs(g: int | np.ndarray) -> int | np.ndarray:
    """Number of unordered pairs ``M = G (G - 1) / 2`` (elementwise for an integer array).

    The one implementation of the count: the normaliser ``M`` of the complete-pair target
    and the number of edges ``K (K - 1) / 2`` that ``K`` completed candidates induce.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.estimators import n_pairs
    >>> n_pairs(4), n_pairs(np.array([0, 1, 3])).tolist()
    (6, [0, 0, 3])
    """
    return g * (g - 1) // 2


def check_rewards(rewards: ArrayLike, *, finite: bool = True) -> np.ndarray:
    """``rewards`` as float64 of shape ``(..., G)`` with ``G >= 2``."""
    arr = as_real_array("rewards", rewards) if not finite else check_finite("rewards", rewards)
    if arr.ndim < 1:
        raise ValueError("rewards must have shape (..., G), one reward per candidate; got a scalar")
    if arr.shape[-1] < 2:
        raise ValueError(
            f"rewards must hold G >= 2 candidates along the last axis (the pair target "
            f"averages M = G(G-1)/2 >= 1 pairs); got shape {arr.shape}"
        )
    return arr


def check_scores(scores: ArrayLike, g: int, *, finite: bool = True) -> np.ndarray:
    """``scores`` as float64 of shape ``(..., G, d)`` matching ``G`` of the rewards."""
    arr = as_real_array("scores", scores) if not finite else check_finite("scores", scores)
    if arr.ndim < 2 or arr.shape[-2] != g or arr.shape[-1] < 1:
        raise ValueError(
            f"scores must have shape (..., G, d) with G = {g} (the last axis of rewards) and "
            f"d >= 1; got shape {arr.shape}"
        )
    return arr


def check_mask(mask: ArrayLike, g: int) -> np.ndarray:
    """``mask`` as bool of shape ``(..., G)``; accepts bool or numeric arrays holding 0/1 only."""
    try:
        arr = np.asarray(mask)
    except (ValueError, TypeError):  # ragged nested sequences
        raise ValueError("mask must be a rectangular (..., G) boolean array; got a ragged "
                         "sequence") from None
    if arr.dtype != np.bool_:
        if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(
                f"mask must be boolean (J_i = 1 when candidate i was completed); "
                f"got dtype {arr.dtype}"
            )
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"mask must be boolean or hold only 0/1 (J_i = 1 when candidate i was "
                f"completed); mask{name_index(where)} = {arr[where].item()!r}"
            )
        arr = arr.astype(bool)
    if arr.ndim < 1 or arr.shape[-1] != g:
        raise ValueError(
            f"mask must have shape (..., G) with G = {g} (the last axis of rewards); "
            f"got shape {arr.shape}"
        )
    return arr


def check_observed_finite(name: str, x: np.ndarray, mask: np.ndarray, extra_axes: int) -> None:
    """Raise if ``x`` is NaN/inf at a selected candidate (unselected entries are ignored)."""
    sel = mask.reshape(mask.shape + (1,) * extra_axes)
    bad = ~np.isfinite(x) & sel
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name} must be finite (no NaN or inf) at every selected candidate (mask True); "
            f"{name}{name_index(where)} = {x[where].item()!r}"
        )


def zero_unobserved(x: np.ndarray, mask: np.ndarray, extra_axes: int) -> np.ndarray:
    """``x`` with unselected candidates set to 0, so a NaN placeholder cannot propagate."""
    sel = mask.reshape(mask.shape + (1,) * extra_axes)
    if bool(np.all(sel)):
        return x
    return np.where(sel, x, 0.0)


def check_joint(joint: ArrayLike, g: int, name: str = "joint") -> np.ndarray:
    """``joint`` as symmetric float64 ``(..., G, G)`` with entries in [0, 1].

    Returned as ``(joint + joint^T) / 2``, which leaves an exactly symmetric input unchanged
    and makes every weight built from it exactly symmetric. The diagonal holds ``pi`` (as
    :meth:`pairht.designs.Design.joint` returns it), and every pair must satisfy the Frechet
    bounds ``max(0, pi_i + pi_j - 1) <= rho_ij <= min(pi_i, pi_j)`` within
    :data:`FRECHET_ATOL` (:func:`check_frechet`).
    """
    arr = check_probabilities(name, joint)
    if arr.ndim < 2 or arr.shape[-2:] != (g, g):
        raise ValueError(
            f"{name} must have shape (..., G, G) with G = {g} (rho_ij = P(J_i = J_j = 1)); "
            f"got shape {arr.shape}"
        )
    # one contiguous transposed copy serves both the check and the symmetrisation (strided
    # transposed reads in two separate expressions cost several times more)
    transposed = check_symmetric(name, arr, SYMMETRY_ATOL, "rho_ij = rho_ji")
    transposed += arr
    transposed *= 0.5
    check_frechet(transposed, name)
    return transposed


def check_frechet(rho: np.ndarray, name: str = "joint") -> None:
    """Raise unless ``max(0, pi_i + pi_j - 1) <= rho_ij <= min(pi_i, pi_j)`` off the diagonal.

    ``pi`` is the diagonal of ``rho`` (``rho_ii = P(J_i = 1)``). A pair probability above
    either marginal, or below what two events of those marginals must share, is no joint
    inclusion probability of any design.
    """
    g = rho.shape[-1]
    pi = np.diagonal(rho, axis1=-2, axis2=-1)
    pi_i, pi_j = pi[..., :, None], pi[..., None, :]
    over = rho - np.minimum(pi_i, pi_j) > FRECHET_ATOL
    under = (pi_i + pi_j - 1.0) - rho > FRECHET_ATOL
    bad = (over | under) & ~np.eye(g, dtype=bool)
    if not bad.any():
        return
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    i, j = where[-2], where[-1]
    lead = where[:-2]
    at_ii, at_jj = (*lead, i, i), (*lead, j, j)  # named: a starred index needs Python 3.11
    a, b, v = rho[at_ii].item(), rho[at_jj].item(), rho[where].item()
    if over[where]:
        rule = f"rho_ij <= min(pi_i, pi_j) = {min(a, b)!r}"
    else:
        rule = f"rho_ij >= pi_i + pi_j - 1 = {a + b - 1.0!r}"
    raise ValueError(
        f"{name} breaks the Frechet bounds max(0, pi_i + pi_j - 1) <= rho_ij <= min(pi_i, "
        f"pi_j), with pi the diagonal of {name} (as Design.joint() returns it): pair "
        f"({i}, {j}) has {name}{name_index(where)} = {v!r}, against {rule} "
        f"({name}{name_index((*lead, i, i))} = {a!r}, {name}{name_index((*lead, j, j))} = "
        f"{b!r}). For independent units use np.outer(pi, pi) with np.fill_diagonal(.., pi)."
    )


def check_pi(pi: ArrayLike, g: int) -> np.ndarray:
    """``pi`` as float64 ``(..., G)`` first-order inclusion probabilities."""
    arr = check_probabilities("pi", pi)
    if arr.shape[-1] != g:
        raise ValueError(
            f"pi must have shape (..., G) with G = {g} (one inclusion probability per "
            f"candidate); got shape {arr.shape}"
        )
    return arr


def observed_edges(mask: np.ndarray) -> np.ndarray:
    """``I_ij = J_i J_j`` for ``i != j``, shape ``(..., G, G)``, zero diagonal."""
    g = mask.shape[-1]
    obs = mask[..., :, None] & mask[..., None, :]
    return obs & ~np.eye(g, dtype=bool)


def check_positive_on(name: str, values: np.ndarray, observed: np.ndarray, what: str) -> None:
    """Raise if ``values <= 0`` on an observed edge (Horvitz-Thompson divides by them)."""
    bad = observed & ~(values > 0.0)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        val = np.broadcast_to(values, bad.shape)[where]
        raise ValueError(
            f"{name} must be > 0 on every observed edge ({what}): an edge with probability "
            f"zero cannot have been observed, and the estimator divides by it; "
            f"{name}{name_index(where)} = {val.item()!r} with both candidates selected"
        )


def broadcast_batch(**shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Broadcast the batch shapes of several arguments, naming them all on failure."""
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        listing = ", ".join(f"{k} batch shape {v}" for k, v in shapes.items())
        raise ValueError(
            f"the leading batch axes of the arguments must broadcast against each other; "
            f"got {listing}"
        ) from None


def check_dtype(dtype: Any) -> np.dtype:
    """Accumulation dtype: float32 or float64."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be float32 or float64; got {dtype!r}") from None
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be float32 or float64; got {dt}")
    return dt


def any_over_broadcast(flags: np.ndarray, batch: tuple[int, ...]) -> np.ndarray:
    """Reduce ``flags`` (``(*full, G)``) by ``any`` to the batch shape ``batch`` + ``(G,)``."""
    full = flags.shape[:-1]
    padded = (1,) * (len(full) - len(batch)) + tuple(batch)
    axes = tuple(ax for ax, (n, b) in enumerate(zip(padded, full)) if n == 1 and b != 1)
    reduced = flags.any(axis=axes, keepdims=True) if axes else flags
    return reduced.reshape((*batch, flags.shape[-1]))
