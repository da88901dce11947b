r"""HORA: hit-utility optimal rollout allocation (Wang et al., 2026, arXiv 2605.07114).

From the paper (as its abstract states it): a learning-free rule that allocates additional
rollouts to maximise the total posterior *hit utility* of the batch, the posterior
probability that at least one of a prompt's additional rollouts is correct, under a uniform
prior, leaving the advantage estimator unchanged. The paper's method section was not
available to us in full. Ours: the closed form below (it follows from the definition under the
Beta posterior), the exact greedy solver, no per-prompt minimum by default (the abstract
states none; ``min_rollouts`` adds one) and ties to the lower prompt index.

With a uniform Beta(1, 1) prior updated by a prompt's observed ``s_b``
successes in ``t_b`` trials, ``p_b ~ Beta(a_b, b_b)``, ``a_b = 1 + s_b``,
``b_b = 1 + t_b - s_b``, the hit utility of ``k`` additional rollouts is

.. math:: H_b(k) = 1 - \mathbb E[(1 - p_b)^k] = 1 - \frac{B(a_b, b_b + k)}{B(a_b, b_b)}
          = 1 - \prod_{j=0}^{k-1} \frac{b_b + j}{a_b + b_b + j}.

HORA maximises ``sum_b H_b(k_b)`` under the batch's rollout budget. The marginal utility of
the ``(k+1)``-th rollout is

.. math:: \Delta_b(k) = H_b(k+1) - H_b(k) = \mathbb E[p_b (1 - p_b)^k]
          = \frac{a_b}{a_b + b_b + k} \prod_{j=0}^{k-1} \frac{b_b + j}{a_b + b_b + j},

which is nonincreasing in ``k`` (``p (1-p)^{k+1} <= p (1-p)^k`` pointwise), so ``H_b`` is
concave and the greedy allocation is exactly optimal. The advantage estimator is unchanged.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import betaln

from pairht._validation import check_finite
from pairht.comparators._integer import greedy_allocation


def _history(successes: ArrayLike, trials: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = check_finite("successes", successes)
    t = check_finite("trials", trials)
    if np.any(s < 0) or np.any(s > t):
        raise ValueError("successes and trials must satisfy 0 <= successes <= trials; got "
                         f"successes = {s.tolist()}, trials = {t.tolist()}")
    return s, t


def hit_utility(successes: ArrayLike, trials: ArrayLike, k: ArrayLike) -> np.ndarray:
    r"""``H(k) = 1 - B(a, b + k) / B(a, b)`` under the Beta(1+s, 1+t-s) posterior.

    Examples
    --------
    >>> float(hit_utility(0, 0, 1))   # uniform prior: P(one rollout correct) = 1/2
    0.5
    >>> round(float(hit_utility(0, 0, 3)), 12)   # 1 - E[(1-p)^3] = 1 - 1/4
    0.75
    """
    s, t = _history(successes, trials)
    k = check_finite("k", k)
    if np.any(k < 0):
        raise ValueError(f"k must be >= 0 (a number of rollouts); got min {k.min()!r}")
    a, b = 1.0 + s, 1.0 + t - s
    return 1.0 - np.exp(betaln(a, b + k) - betaln(a, b))


def hit_gains(successes: np.ndarray, trials: np.ndarray, width: int) -> np.ndarray:
    """``(B, width)`` marginal hit utilities ``Delta_b(k)``, ``k = 0 .. width-1``."""
    a = 1.0 + successes[:, None]
    b = 1.0 + trials[:, None] - successes[:, None]
    j = np.arange(width, dtype=float)[None, :]
    # survival S(k) = prod_{j<k} (b+j)/(a+b+j); Delta(k) = a/(a+b+k) * S(k)
    ratios = (b + j) / (a + b + j)
    surv = np.concatenate([np.ones_like(a), np.cumprod(ratios, axis=1)[:, :-1]], axis=1)
    return a / (a + b + j) * surv


def hora_extra_rollouts(
    successes: ArrayLike,
    trials: ArrayLike,
    n_unfinished: ArrayLike,
    total: int,
    *,
    lower: ArrayLike | None = None,
) -> np.ndarray:
    r"""Exact HORA allocation: ``k_b`` maximising ``sum_b H_b(k_b)`` s.t. ``sum k_b <= total``.

    Parameters
    ----------
    successes, trials : (B,) array_like
        History per prompt.
    n_unfinished : (B,) int array_like
        ``U_b``: the most rollouts prompt ``b`` can receive.
    total : int
        Rollout budget ``N``.
    lower : (B,) int array_like, optional
        Minimum rollouts per prompt (default 0: none). Every pair of a prompt's candidates
        has a positive joint inclusion probability in the comparators' design once
        ``k_b >= min(1, U_b)`` (:mod:`pairht.comparators.allocators`).

    Returns
    -------
    (B,) int ndarray

    Examples
    --------
    >>> hora_extra_rollouts([0, 4, 2], [4, 4, 4], [4, 4, 4], 4).tolist()
    [1, 1, 2]
    """
    s, t = _history(successes, trials)
    U = np.asarray(n_unfinished, dtype=np.int64)
    lo = np.zeros_like(U) if lower is None else np.asarray(lower, dtype=np.int64)
    width = int((U - lo).max()) if U.size else 0
    if width == 0:
        return greedy_allocation(np.zeros((U.size, 0)), lo, U, total)
    full = hit_gains(s, t, int(U.max()))
    idx = np.minimum(lo[:, None] + np.arange(width)[None, :], full.shape[1] - 1)
    gains = np.take_along_axis(full, idx, axis=1)
    return greedy_allocation(gains, lo, U, total)
