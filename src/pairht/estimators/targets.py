r"""The complete-pair target and the group-relative gradients it equals.

For ``G`` candidates with rewards ``r_i`` and sequence scores ``s_i`` (PAIR paper, Sec. 2):

.. math::

    h_{ij} = \tfrac12 (r_i - r_j)(s_i - s_j), \qquad
    g_{pair} = \frac1M \sum_{i<j} h_{ij}, \qquad M = \binom G2,

and Theorem 1 (pairwise representation) states

.. math::

    g_{pair} = \frac{1}{G-1}\sum_i (r_i - \bar r) s_i
             = \frac1G \sum_i (r_i - \bar r_{-i}) s_i = g_{LOO},
    \qquad g_{mean} = \frac1G \sum_i (r_i - \bar r) s_i = \frac{G-1}{G} g_{pair}.

Only :func:`pair_kernel` materialises the ``(G, G, d)`` kernel; every other function here
costs ``O(G d)``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht.estimators._inputs import broadcast_batch, check_rewards, check_scores

#: Largest number of entries ``prod(batch) * G * G * d`` that :func:`pair_kernel` will
#: materialise (2**24 float64 entries = 128 MiB). Use :func:`pair_gradient` or
#: :func:`~pairht.estimators.pair_advantages` for large inputs; they never build the kernel.
MAX_KERNEL_ENTRIES = 2**24


def _rewards_scores(rewards: ArrayLike, scores: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    r = check_rewards(rewards)
    s = check_scores(scores, r.shape[-1])
    batch = broadcast_batch(rewards=r.shape[:-1], scores=s.shape[:-2])
    r = np.broadcast_to(r, (*batch, r.shape[-1]))
    return r, s


def pair_kernel(rewards: ArrayLike, scores: ArrayLike) -> np.ndarray:
    r"""Dense pair kernel ``h_ij = (r_i - r_j)(s_i - s_j) / 2`` (PAIR paper, Eq. pair-kernel).

    For inspection and tests on small inputs only: the output has ``G * G * d`` entries per
    group, and inputs whose output would exceed :data:`MAX_KERNEL_ENTRIES` (``2**24``) are
    refused. The gradient-level functions (:func:`pair_gradient`,
    :func:`~pairht.estimators.pair_ht_gradient`) never build it.

    Parameters
    ----------
    rewards : (..., G) array_like
        Rewards ``r_i``.
    scores : (..., G, d) array_like
        Sequence scores ``s_i``.

    Returns
    -------
    (..., G, G, d) ndarray
        Symmetric in ``(i, j)`` with a zero diagonal.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.estimators import pair_kernel
    >>> h = pair_kernel([1.0, 0.0], np.array([[2.0], [0.0]]))
    >>> h[:, :, 0].tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    r, s = _rewards_scores(rewards, scores)
    g, d = s.shape[-2], s.shape[-1]
    batch = np.broadcast_shapes(r.shape[:-1], s.shape[:-2])
    entries = int(np.prod(batch, dtype=np.int64)) * g * g * d
    if entries > MAX_KERNEL_ENTRIES:
        raise ValueError(
            f"pair_kernel would materialise {entries} entries (batch {batch}, G = {g}, d = {d}), "
            f"more than MAX_KERNEL_ENTRIES = {MAX_KERNEL_ENTRIES}; use pair_gradient or "
            f"pair_advantages, which never build the (G, G, d) kernel"
        )
    dr = r[..., :, None] - r[..., None, :]
    ds = s[..., :, None, :] - s[..., None, :, :]
    return 0.5 * dr[..., None] * ds


def _centered_sum(r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``sum_i (r_i - rbar) s_i``, shape ``(..., d)``."""
    centered = r - r.mean(axis=-1, keepdims=True)
    return np.einsum("...g,...gd->...d", centered, s)


def pair_gradient(rewards: ArrayLike, scores: ArrayLike) -> np.ndarray:
    r"""Complete pair average ``g_pair = (1/M) sum_{i<j} h_ij`` (PAIR paper, Eq. pair-average).

    Computed in ``O(G d)`` through the identity of Theorem 1,
    ``(1/M) sum_{i<j} h_ij = (1/(G-1)) sum_i (r_i - rbar) s_i``, without the dense kernel.
    This is the target every estimator in :mod:`pairht.estimators` estimates.

    Parameters
    ----------
    rewards : (..., G) array_like
        Rewards ``r_i``, ``G >= 2``.
    scores : (..., G, d) array_like
        Sequence scores ``s_i``.

    Returns
    -------
    (..., d) ndarray

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.estimators import pair_gradient
    >>> pair_gradient([1.0, 0.0, 0.0], np.array([[3.0], [0.0], [0.0]])).tolist()
    [1.0]
    """
    r, s = _rewards_scores(rewards, scores)
    return _centered_sum(r, s) / (r.shape[-1] - 1)


def loo_gradient(rewards: ArrayLike, scores: ArrayLike) -> np.ndarray:
    r"""Leave-one-out (RLOO) gradient ``(1/G) sum_i (r_i - rbar_{-i}) s_i`` (PAIR paper, Eq. loo).

    ``rbar_{-i} = (1/(G-1)) sum_{j != i} r_j``. Equal to :func:`pair_gradient` exactly
    (Theorem 1); computed here from its own definition so the identity can be tested.
    ``rewards`` ``(..., G)``, ``scores`` ``(..., G, d)`` and the ``(..., d)`` result are as
    in :func:`pair_gradient`.

    Examples
    --------
    >>> from pairht.estimators import loo_gradient, pair_gradient
    >>> r, s = [1.0, 0.0, 2.0], [[3.0, 1.0], [1.0, 0.0], [0.0, 2.0]]
    >>> bool(abs(loo_gradient(r, s) - pair_gradient(r, s)).max() < 1e-15)  # Theorem 1
    True
    """
    r, s = _rewards_scores(rewards, scores)
    g = r.shape[-1]
    loo_mean = (r.sum(axis=-1, keepdims=True) - r) / (g - 1)
    return np.einsum("...g,...gd->...d", r - loo_mean, s) / g


def group_mean_gradient(rewards: ArrayLike, scores: ArrayLike) -> np.ndarray:
    r"""Group-mean baseline gradient ``(1/G) sum_i (r_i - rbar) s_i``.

    Equals ``(G-1)/G`` times :func:`pair_gradient` (Theorem 1): the group-mean baseline
    shrinks the unbiased pair target by a finite-``G`` factor. ``rewards`` ``(..., G)``,
    ``scores`` ``(..., G, d)`` and the ``(..., d)`` result are as in :func:`pair_gradient`.

    Examples
    --------
    >>> from pairht.estimators import group_mean_gradient
    >>> group_mean_gradient([1.0, 0.0, 0.0], [[3.0], [0.0], [0.0]]).tolist()  # (2/3) g_pair
    [0.6666666666666666]
    """
    r, s = _rewards_scores(rewards, scores)
    return _centered_sum(r, s) / r.shape[-1]
