r"""The difference pair estimator: HT advantages corrected by fixed reward predictions.

The complete-pair target is a weighted sum of the scores,

.. math:: g = \frac1M \sum_{i<j} h_{ij} = \sum_i c_i s_i, \qquad
          c_i = \frac{1}{2M} \sum_{j \ne i} (r_i - r_j).

With baselines ``b_j`` fixed before the draw (the heads' ``p_hat`` for unfinished candidates,
the known reward for finished ones), the *difference* advantages

.. math:: A_i = \frac{J_i}{2M} \Big[ \sum_{j \ne i} \frac{r_i - b_j}{\pi_i}
          + \sum_{j \ne i} J_j \frac{b_j - r_j}{\rho_{ij}} \Big]

satisfy ``E[A_i] = c_i`` for *any* baselines (``E[J_i] = pi_i``, ``E[J_i J_j] = rho_ij``), so
``sum_i A_i s_i`` is exactly design-unbiased whenever every ``pi_i`` and ``rho_ij`` is
positive. It reads only observed rewards. The second sum is a zero-mean control variate of
the pair-HT advantage: ``A_i = A_i^HT + (J_i / 2M) sum_j (r_i - b_j) (1/pi_i - J_j/rho_ij)``.

Why it matters: with exact baselines (``b = r``, hindsight) the correction vanishes and
``A_i = J_i c_i / pi_i``, the unit-level HT estimator of ``sum_i c_i s_i``. Under a model in
which the unobserved scores are independent with mean zero its expected variance is
``sum_i (1/pi_i - 1) c_i^2 E||s_i||^2``, the Godambe-Joshi lower bound for *any*
design-unbiased estimator at those ``pi`` (Godambe and Joshi 1965): so with good baselines the
allocation problem becomes Neyman's, ``pi_i`` proportional to ``|c_i| ||s_i|| / sqrt(C_i)``
(:mod:`pairht.step.neyman`), and no design-unbiased estimator at the same ``pi`` can do better
on average. The pair-HT estimator cannot reach it: an edge between two observed candidates
that agree still carries weight ``1/rho_ij`` on a difference that is zero, while edges to
unobserved ones are lost.

The advantages are bilinear in the inclusion indicators, ``A_i = sum_j a_ij J_i J_j`` with
``J_i J_i = J_i`` on the diagonal:

.. math:: a_{ii} = \frac{1}{2M\pi_i} \sum_{j \ne i} (r_i - b_j), \qquad
          a_{ij} = \frac{b_j - r_j}{2M\rho_{ij}} \quad (j \ne i),

so their exact design covariance needs inclusion probabilities up to order four, as the
pair-HT estimator's does (:func:`difference_moments`).

References
----------
V. P. Godambe and V. M. Joshi, "Admissibility and Bayes estimation in sampling finite
populations I", *Ann. Math. Statist.* 36 (1965).
C.-E. Särndal, B. Swensson and J. Wretman, *Model Assisted Survey Sampling*, Springer (1992),
Sec. 6.3 (the difference estimator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from numpy.typing import ArrayLike

from pairht.designs.base import Design
from pairht.estimators._inputs import check_mask, check_rewards, n_pairs
from pairht.estimators.covariance import _binomials, _inclusion_tables


def _check_baselines(baselines: ArrayLike, g: int) -> np.ndarray:
    b = np.asarray(baselines, dtype=np.float64)
    if b.shape[-1:] != (g,) or not np.all(np.isfinite(b)):
        raise ValueError(f"baselines must be a finite (..., G) array with G = {g} (one fixed "
                         f"reward prediction per candidate); got shape {b.shape}"
                         + ("" if b.shape[-1:] != (g,) else " with a non-finite entry"))
    return b


def _check_joint(joint: ArrayLike, g: int) -> np.ndarray:
    rho = np.asarray(joint, dtype=np.float64)
    if rho.shape[-2:] != (g, g) or not np.all(np.isfinite(rho)) or np.any(rho < 0) \
            or np.any(rho > 1 + 1e-12):
        raise ValueError(f"joint must be a (..., G, G) matrix of joint inclusion "
                         f"probabilities in [0, 1] with G = {g} (diagonal = pi); got shape "
                         f"{rho.shape}")
    return rho


def target_coefficients(rewards: ArrayLike) -> np.ndarray:
    r"""The target's coefficients ``c_i = (1/2M) sum_{j != i} (r_i - r_j) = (G r_i - sum_j
    r_j) / (2M)``, ``(..., G)``: ``g = sum_i c_i s_i``.

    Examples
    --------
    >>> target_coefficients([1.0, 0.0, 0.0]).tolist()
    [0.3333333333333333, -0.16666666666666666, -0.16666666666666666]
    """
    r = np.asarray(rewards, dtype=np.float64)
    g = r.shape[-1]
    return (g * r - r.sum(axis=-1, keepdims=True)) / (2.0 * n_pairs(g))


def prediction_baselines(p_hat: ArrayLike, rewards: ArrayLike,
                         finished: ArrayLike) -> np.ndarray:
    """The baselines the library uses, ``(..., G)``: the predictions ``p_hat`` of unfinished
    candidates and the known reward of finished ones (both fixed before the draw; rewards of
    unfinished candidates are never read and may be NaN).

    Examples
    --------
    >>> prediction_baselines([0.3, 0.8], [float("nan"), 1.0], [False, True]).tolist()
    [0.3, 1.0]
    """
    return np.where(np.asarray(finished, dtype=bool), np.asarray(rewards, dtype=np.float64),
                    np.asarray(p_hat, dtype=np.float64))


def difference_coefficients(rewards: ArrayLike, baselines: ArrayLike,
                            joint: ArrayLike) -> np.ndarray:
    r"""``a`` with ``A_i = sum_j a_ij J_i J_j`` (module docstring), shape ``(..., G, G)``.

    ``a_ii = sum_{j != i} (r_i - b_j) / (2 M pi_i)``, ``a_ij = (b_j - r_j) / (2 M rho_ij)``;
    0 where the inclusion probability is 0 (never observed). Needs every reward (the audit
    knows them; :func:`difference_advantages` reads only the observed ones).

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import Bernoulli
    >>> a = difference_coefficients([1.0, 0.0], [1.0, 0.0], Bernoulli([0.5, 1.0]).joint())
    >>> a.tolist()   # exact baselines: only the diagonal, c_i / pi_i
    [[1.0, 0.0], [0.0, -0.5]]
    """
    r = check_rewards(rewards)
    g = r.shape[-1]
    b = _check_baselines(baselines, g)
    rho = _check_joint(joint, g)
    m = n_pairs(g)
    pi = np.diagonal(rho, axis1=-2, axis2=-1)
    off = ~np.eye(g, dtype=bool)
    shape = np.broadcast_shapes(rho.shape, (*r.shape[:-1], g, g), (*b.shape[:-1], g, g))
    # a_ij reads j's reward and baseline (columns) and the joint of i with j
    num = np.broadcast_to((b - r)[..., None, :], shape)
    den = np.broadcast_to(2.0 * m * rho, shape)
    a = np.zeros(shape)
    np.divide(num, den, out=a, where=(den > 0) & off)
    diag = (g * r - r - (b.sum(axis=-1, keepdims=True) - b)) / (2.0 * m)  # sum_{j!=i} r_i - b_j
    diag = np.divide(diag, pi, out=np.zeros_like(diag), where=pi > 0)
    idx = np.arange(g)
    a[..., idx, idx] = diag
    return a


def difference_advantages(rewards: ArrayLike, mask: ArrayLike, joint: ArrayLike,
                          baselines: ArrayLike) -> np.ndarray:
    r"""Difference advantages ``A_i`` (module docstring) of the completed candidates.

    Parameters
    ----------
    rewards : (..., G) array_like
        Rewards; entries of unselected candidates are never read (may be NaN).
    mask : (..., G) array_like of bool
        ``J_i``: which candidates were completed (finished ones always).
    joint : (..., G, G) array_like
        The design's ``rho_ij`` with ``pi_i`` on the diagonal, positive wherever both are
        completed.
    baselines : (..., G) array_like
        ``b_j``, fixed before the draw: predicted rewards of unfinished candidates, the known
        reward of finished ones.

    Returns
    -------
    (..., G) ndarray
        ``A_i``, 0 for unselected candidates; ``sum_i A_i s_i`` is unbiased for ``g``.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import Bernoulli
    >>> joint = Bernoulli([0.5, 0.5, 1.0]).joint()
    >>> difference_advantages([1.0, np.nan, 0.0], [True, False, True], joint,
    ...                       [1.0, 0.0, 0.0]).tolist()
    [0.6666666666666666, 0.0, -0.16666666666666666]
    """
    r_in = np.asarray(rewards, dtype=np.float64)
    msk = check_mask(mask, r_in.shape[-1])
    r = check_rewards(np.where(msk, r_in, 0.0))  # unselected rewards are never read
    g = r.shape[-1]
    rho = _check_joint(joint, g)
    both = msk[..., :, None] & msk[..., None, :]
    if np.any(both & (rho <= 0)):
        raise ValueError("joint must be positive on every pair of completed candidates "
                         "(rho_ij > 0 where J_i = J_j = 1): the draw could not have happened")
    a = difference_coefficients(r, baselines, rho)
    return np.where(msk, np.einsum("...ij,...ij->...i", a, both.astype(np.float64)), 0.0)


@numba.njit(cache=True)
def _set_inclusion(idx, rho, incl3, incl4, binom, uniform):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``P(J = 1 on the set of idx)`` for four indices that may repeat."""
    u = np.empty(4, dtype=np.int64)
    n = 0
    for x in idx:
        seen = False
        for k in range(n):
            if u[k] == x:
                seen = True
        if not seen:
            u[n] = x
            n += 1
    s = np.sort(u[:n])
    if n == 1:
        return rho[s[0], s[0]]
    if n == 2:
        return rho[s[0], s[1]]
    if uniform:
        return incl3[0] if n == 3 else incl4[0]
    if n == 3:
        return incl3[binom[s[0], 1] + binom[s[1], 2] + binom[s[2], 3]]
    return incl4[binom[s[0], 1] + binom[s[1], 2] + binom[s[2], 3] + binom[s[3], 4]]


@numba.njit(cache=True)
def _bilinear_covariance(a, rho, incl3, incl4, binom, uniform):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``Cov(A_i, A_k)`` for ``A_i = sum_j a_ij J_i J_j``, ``(G, G)``."""
    g = a.shape[0]
    out = np.zeros((g, g))
    idx = np.empty(4, dtype=np.int64)
    for i in range(g):
        for k in range(i, g):
            tot = 0.0
            for j in range(g):
                if a[i, j] == 0.0:
                    continue
                for l in range(g):
                    if a[k, l] == 0.0:
                        continue
                    idx[0], idx[1], idx[2], idx[3] = i, j, k, l
                    p = _set_inclusion(idx, rho, incl3, incl4, binom, uniform)
                    tot += a[i, j] * a[k, l] * (p - rho[i, j] * rho[k, l])
            out[i, k] = tot
            out[k, i] = tot
    return out


@dataclass(frozen=True)
class DifferenceMoments:
    """Exact design moments of the difference estimator on one group.

    Attributes
    ----------
    mean_advantages : (G,) ndarray
        ``E[A_i] = sum_j a_ij rho_ij``; equals ``c_i`` when every inclusion is positive.
    target_advantages : (G,) ndarray
        ``c_i = (1/2M) sum_j (r_i - r_j)``.
    advantage_covariance : (G, G) ndarray
        ``Cov(A_i, A_k)``.
    """

    mean_advantages: np.ndarray
    target_advantages: np.ndarray
    advantage_covariance: np.ndarray

    def bias(self, scores: ArrayLike) -> np.ndarray:
        """``E[hat g] - g = sum_i (E[A_i] - c_i) s_i`` for scores ``(G, d)``."""
        return (self.mean_advantages - self.target_advantages) @ np.asarray(scores, float)

    def trace(self, gram: ArrayLike) -> float:
        """``tr Cov(hat g) = sum_ik Cov(A_i, A_k) <s_i, s_k>`` for the Gram matrix ``(G, G)``."""
        return float(np.einsum("ik,ik->", self.advantage_covariance, np.asarray(gram, float)))


def difference_moments(rewards: ArrayLike, baselines: ArrayLike,
                       design: Design) -> DifferenceMoments:
    r"""Exact mean and covariance of the difference advantages under ``design``.

    .. math:: Cov(A_i, A_k) = \sum_{j, l} a_{ij} a_{kl}
              \big(P(J = 1 \text{ on } \{i, j, k, l\}) - \rho_{ij} \rho_{kl}\big)

    (``rho_ii = pi_i``), from the design's inclusion probabilities up to order four.

    Examples
    --------
    >>> from pairht.designs import Bernoulli
    >>> mom = difference_moments([1.0, 0.0], [1.0, 0.0], Bernoulli([0.5, 1.0]))
    >>> mom.mean_advantages.tolist(), mom.target_advantages.tolist()
    ([0.5, -0.5], [0.5, -0.5])
    >>> mom.advantage_covariance.tolist()   # Var(J_0 c_0 / pi_0) = (1/pi - 1) c^2
    [[0.25, 0.0], [0.0, 0.0]]
    """
    r = check_rewards(rewards)
    if r.ndim != 1 or r.shape[0] != design.n_units:
        raise ValueError(f"rewards must have shape (G,) = ({design.n_units},) for this design; "
                         f"got {r.shape}")
    rho = design.joint()
    a = difference_coefficients(r, baselines, rho)
    g = r.shape[0]
    incl3, incl4, uniform = _inclusion_tables(design)
    cov = _bilinear_covariance(np.ascontiguousarray(a), np.ascontiguousarray(rho), incl3,
                               incl4, _binomials(g), uniform)
    mean = np.einsum("ij,ij->i", a, rho)
    return DifferenceMoments(mean, target_coefficients(r), cov)


def bernoulli_difference_trace(rewards: ArrayLike, baselines: ArrayLike, pi: ArrayLike,
                               gram: ArrayLike) -> np.ndarray:
    r"""Trace of the design covariance of ``sum_i A_i s_i`` under a Bernoulli design, in
    closed form: ``O(G^2)`` per group and batched, where :func:`difference_moments` (any
    design) needs fourth-order inclusions.

    With independent ``X_i = J_i / pi_i = 1 + e_i`` (``E e_i = 0``, ``v_i = Var e_i =
    1/pi_i - 1``), ``d_j = b_j - r_j`` and ``a_i = sum_{j != i} (r_i - b_j)``,

    .. math:: 2M \hat g = \sum_i X_i a_i s_i + \sum_{i \ne j} X_i X_j d_j s_i ,

    and the terms ``e_i`` and ``e_i e_j`` (``i < j``) are uncorrelated, so

    .. math:: (2M)^2 \operatorname{tr} \operatorname{Cov} \hat g
              = \sum_i v_i \lVert \alpha_i s_i + d_i (S - s_i) \rVert^2
              + \sum_{i < j} v_i v_j \lVert d_j s_i + d_i s_j \rVert^2 ,

    with ``alpha_i = a_i + sum_{j != i} d_j`` and ``S = sum_j s_j``; every norm is read off
    the Gram matrix ``K_ij = <s_i, s_j>``.

    Parameters
    ----------
    rewards, baselines, pi : array_like, shape (..., G)
        Every candidate's reward, its fixed baseline and its inclusion probability (in
        ``(0, 1]``; ``pi = 1``, e.g. a finished candidate, adds no variance).
    gram : array_like, shape (..., G, G)
        ``K``, symmetric positive semi-definite.

    Returns
    -------
    ndarray, shape (...)

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import Bernoulli
    >>> r, b, pi = np.array([1.0, 0.0, 1.0]), np.array([0.7, 0.2, 0.4]), np.array([0.5, 0.8, 1.0])
    >>> K = np.array([[1.0, 0.2, 0.0], [0.2, 2.0, 0.3], [0.0, 0.3, 1.5]])
    >>> cov = difference_moments(r, b, Bernoulli(pi)).advantage_covariance
    >>> bool(np.isclose(bernoulli_difference_trace(r, b, pi, K), np.sum(cov * K)))
    True
    """
    r = check_rewards(rewards)
    g = r.shape[-1]
    b = _check_baselines(baselines, g)
    p = np.asarray(pi, dtype=np.float64)
    if p.shape[-1:] != (g,) or not np.all((p > 0) & (p <= 1)):
        raise ValueError(f"pi must be a (..., G) array with G = {g} and every entry in (0, 1]; "
                         f"got shape {p.shape}")
    K = np.asarray(gram, dtype=np.float64)
    if K.shape[-2:] != (g, g) or not np.all(np.isfinite(K)):
        raise ValueError(f"gram must be a finite (..., G, G) array with G = {g}; got shape "
                         f"{K.shape}")
    v = 1.0 / p - 1.0
    d = b - r
    a = (g - 1) * r - (b.sum(axis=-1, keepdims=True) - b)      # sum_{j != i} (r_i - b_j)
    alpha = a + d.sum(axis=-1, keepdims=True) - d
    Kd = np.diagonal(K, axis1=-2, axis2=-1)
    KS = K.sum(axis=-1)                                           # <s_i, S>
    SS = KS.sum(axis=-1, keepdims=True)                           # <S, S>
    unit = alpha**2 * Kd + 2 * alpha * d * (KS - Kd) + d**2 * (SS - 2 * KS + Kd)
    first = np.sum(v * unit, axis=-1)
    # sum_{i<j} v_i v_j ||d_j s_i + d_i s_j||^2
    #   = sum_i v_i K_ii sum_{j != i} v_j d_j^2 + sum_{i != j} (v_i d_i)(v_j d_j) K_ij
    vd2 = v * d**2
    vd = v * d
    second = np.sum(v * Kd * (vd2.sum(axis=-1, keepdims=True) - vd2), axis=-1) \
        + np.einsum("...i,...ij,...j->...", vd, K, vd) - np.sum(vd**2 * Kd, axis=-1)
    m = n_pairs(g)
    return (first + second) / (2.0 * m) ** 2
