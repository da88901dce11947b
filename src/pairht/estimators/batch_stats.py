r"""Horvitz-Thompson estimates of a batch's mean and variance from its completed candidates.

What a trainer logs about a batch (mean reward, reward spread, mean completion length) is a
statistic of all ``N = B G`` candidates; under a continuation design only the completed ones
(``J_i = 1``) are observed. Weighting each by ``1 / pi_i`` (and each pair by ``1 / rho_ij``)
estimates, without design bias, what the full batch would have shown:

* :func:`ht_mean`: ``(1/N) sum_i J_i y_i / pi_i``, unbiased for ``ybar = (1/N) sum_i y_i``;
* :func:`ht_variance`: ``(1 / (N (N-1))) sum_{i<j} J_i J_j (y_i - y_j)^2 / rho_ij``, unbiased
  for the sample variance ``S^2 = (1/(N-1)) sum_i (y_i - ybar)^2`` (Bessel-corrected, as
  ``torch.std``), and never negative;
* :func:`hajek_mean`: ``sum_i J_i y_i / pi_i / sum_i J_i / pi_i`` over a sub-population
  (e.g. completions that ended), consistent, not unbiased (a ratio).

Groups are drawn independently, so across groups ``rho_ij = pi_i pi_j``; within a group
``rho`` is the design's joint inclusion matrix (diagonal ``pi``). With every ``pi_i = 1`` each
estimate is the full-batch statistic itself.

References
----------
Horvitz & Thompson (1952), JASA 47:663; Sen (1953), Yates & Grundy (1953) for the pair form
of the variance.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["hajek_mean", "ht_mean", "ht_variance"]


def _inputs(values: ArrayLike, mask: ArrayLike, pi: ArrayLike) -> tuple[np.ndarray, ...]:
    y = np.asarray(values, dtype=np.float64)
    m = np.asarray(mask)
    p = np.asarray(pi, dtype=np.float64)
    if y.ndim != 2 or m.shape != y.shape or p.shape != y.shape:
        raise ValueError(f"values, mask and pi must share one (B, G) shape; got values "
                         f"{y.shape}, mask {m.shape}, pi {p.shape}")
    if m.dtype != bool:
        raise ValueError(f"mask must be a bool array (J_i, which candidates were completed); "
                         f"got dtype {m.dtype}")
    if np.any(m & ~(p > 0)):
        raise ValueError("pi must be positive wherever mask is True (a completed candidate "
                         "had a positive inclusion probability)")
    if not np.all(np.isfinite(y[m])):
        raise ValueError("values must be finite wherever mask is True")
    # unobserved entries are never read: zero weight, zero value
    w = np.where(m, 1.0 / np.where(m, p, 1.0), 0.0)
    return np.where(m, y, 0.0), m, w


def ht_mean(values: ArrayLike, mask: ArrayLike, pi: ArrayLike) -> float:
    r"""Horvitz-Thompson estimate of the batch mean, ``(1/N) sum_i J_i y_i / pi_i``.

    Parameters
    ----------
    values : (B, G) array   ``y_i``; read where ``mask`` only
    mask   : (B, G) bool    ``J_i``
    pi     : (B, G) array   ``pi_i > 0`` where ``mask``

    Returns
    -------
    float
        Design-unbiased for ``(1/N) sum_i y_i``, ``N = B G``.

    Examples
    --------
    >>> ht_mean([[1.0, 0.0, 1.0, 5.0]], [[True, True, False, False]], [[0.5, 1.0, 0.5, 0.5]])
    0.5
    """
    y, _, w = _inputs(values, mask, pi)
    return float((w * y).sum() / y.size)


def ht_variance(values: ArrayLike, mask: ArrayLike, pi: ArrayLike, joint: ArrayLike) -> float:
    r"""Unbiased estimate of the batch's sample variance from the completed candidates.

    Estimates ``S^2 = (1/(N(N-1))) sum_{i<j} (y_i - y_j)^2`` (Bessel-corrected variance of
    all ``N = B G`` values) with ``(1/(N(N-1))) sum_{i<j} J_i J_j (y_i - y_j)^2 / rho_ij``;
    ``rho_ij`` from ``joint`` within a group and ``pi_i pi_j`` across groups (independent
    draws). Needs ``rho_ij > 0`` for every pair of the same group.

    Parameters
    ----------
    values : (B, G) array      ``y_i``; read where ``mask`` only
    mask   : (B, G) bool       ``J_i``
    pi     : (B, G) array      ``pi_i``
    joint  : (B, G, G) array   ``rho_ij`` within each group

    Returns
    -------
    float
        ``>= 0``; its square root estimates ``torch.std`` of the full batch (consistently;
        the square root of an unbiased estimate is not unbiased).

    Examples
    --------
    >>> import numpy as np
    >>> y = np.array([[1.0, 0.0, 2.0]])
    >>> ht_variance(y, np.ones((1, 3), bool), np.ones((1, 3)), np.ones((1, 3, 3)))
    1.0
    """
    y, m, w = _inputs(values, mask, pi)
    rho = np.asarray(joint, dtype=np.float64)
    b, g = y.shape
    if rho.shape != (b, g, g):
        raise ValueError(f"joint must have shape (B, G, G) = {(b, g, g)}; got {rho.shape}")
    n = b * g
    if n < 2:
        raise ValueError(f"the variance needs at least 2 candidates; got N = {n}")
    both = m[:, :, None] & m[:, None, :]
    if np.any(both & ~(rho > 0)):
        raise ValueError("joint must be positive for every pair of completed candidates "
                         "(rho_ij > 0)")
    diff2 = (y[:, :, None] - y[:, None, :]) ** 2
    within = 0.5 * float(np.sum(np.where(both, diff2 / np.where(both, rho, 1.0), 0.0)))
    # across groups rho_ij = pi_i pi_j: sum_{b<c} sum_{i in b, j in c} w_i w_j (y_i - y_j)^2
    # = (W Q - sum_b W_b Q_b) - (S^2 - sum_b S_b^2), W = sum w, S = sum w y, Q = sum w y^2
    wb, sb, qb = w.sum(1), (w * y).sum(1), (w * y * y).sum(1)
    across = (wb.sum() * qb.sum() - wb @ qb) - (sb.sum() ** 2 - sb @ sb)
    return max(0.0, (within + float(across)) / (n * (n - 1)))


def hajek_mean(values: ArrayLike, mask: ArrayLike, pi: ArrayLike) -> float:
    r"""Hajek (ratio) estimate of a mean, ``sum_i J_i y_i / pi_i / sum_i J_i / pi_i``.

    For the mean over a sub-population whose size is itself unknown (e.g. the completions
    that ended with EOS: pass ``mask & ended``). ``nan`` when no candidate is observed.

    Parameters
    ----------
    values : (B, G) array   ``y_i``; read where ``mask`` only
    mask   : (B, G) bool    ``J_i`` (times the sub-population's indicator)
    pi     : (B, G) array   ``pi_i > 0`` where ``mask``

    Returns
    -------
    float

    Examples
    --------
    >>> hajek_mean([[4.0, 8.0, 1.0]], [[True, True, False]], [[0.5, 1.0, 0.5]])
    5.333333333333333
    """
    y, _, w = _inputs(values, mask, pi)
    total = w.sum()
    return float((w * y).sum() / total) if total > 0 else float("nan")
