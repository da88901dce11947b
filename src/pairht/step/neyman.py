r"""Neyman allocation for the difference pair estimator, one budget for the batch.

The difference estimator (:mod:`pairht.estimators.difference`) with exact baselines is the
unit-level HT estimator of ``g = sum_i c_i s_i``, ``c_i = (1/2M) sum_j (r_i - r_j)``. If the
unobserved scores are independent with mean zero, its expected variance is

.. math:: V(\pi) = \sum_{b} \sum_{i \in U_b} (1/\pi_i - 1)\, E[c_i^2]\, m_i^2,

which no design-unbiased estimator at those ``pi`` beats (Godambe and Joshi 1965). Minimising
it subject to the batch's expected suffix tokens ``sum_b sum_{i in U_b} pi_i c_hat_i = T``
and ``pi_min <= pi_i <= 1`` gives Neyman's rule

.. math:: \pi_i = \mathrm{clip}\big(\sqrt{w_i / (\lambda \hat c_i)},\ \pi_{min},\ 1\big),
          \qquad w_i = E[c_i^2]\, m_i^2,

with one multiplier ``lambda`` for the whole batch (found by bisection on the monotone cost).
``E[c_i^2]`` is taken under the predictions: with ``r_j ~ Bernoulli(p_j)`` independent
(finished candidates' rewards known),

.. math:: E[2M c_i] = (G-1) p_i - \sum_{j \ne i} p_j, \qquad
          Var[2M c_i] = (G-1)^2 v_i + \sum_{j \ne i} v_j, \quad v = p (1 - p).

``m_i`` is the predicted score norm (``score_norm``; 1 when not given). A group whose
candidates are all predicted to agree has ``w = 0``: its unfinished candidates keep the
floor, the budget goes where a contrast is predicted. With ``pi_min > 0`` every ``pi_ij`` of
the Bernoulli design is positive, so the estimator stays exactly unbiased for any
predictions; with hindsight-perfect ones (``p = r``, ``m = ||s||``) it attains the bound
above, up to the floor.
"""

from __future__ import annotations

import numpy as np

from pairht.allocation.baselines import fill_to_budget
from pairht.estimators import n_pairs
from pairht.estimators.difference import target_coefficients


def coefficient_energy(p_hat: np.ndarray, finished: np.ndarray,
                       known: np.ndarray | None = None) -> np.ndarray:
    r"""``E[c_i^2]`` under independent Bernoulli rewards (module docstring), ``(B, G)``.

    ``known`` (``(B, G)``) holds the rewards of finished candidates (read only there); without
    it a finished candidate's ``p_hat`` is used, with its variance.

    Examples
    --------
    >>> import numpy as np
    >>> coefficient_energy(np.array([[1.0, 0.0]]), np.zeros((1, 2), bool)).tolist()
    [[0.25, 0.25]]
    """
    p = np.asarray(p_hat, dtype=np.float64)
    fin = np.asarray(finished, dtype=bool)
    if known is not None:
        p = np.where(fin, np.clip(np.asarray(known, dtype=np.float64), 0.0, 1.0), p)
        v = np.where(fin, 0.0, p * (1.0 - p))
    else:
        v = p * (1.0 - p)
    g = p.shape[-1]
    mean = target_coefficients(p)  # linear in the rewards: E[c_i] is c_i at r = p
    var = ((g - 1) ** 2 * v + (v.sum(axis=-1, keepdims=True) - v)) / (2.0 * n_pairs(g)) ** 2
    return mean**2 + var


def neyman_pi(w: np.ndarray, c: np.ndarray, unfinished: np.ndarray, total: float,
              pi_min: float) -> tuple[np.ndarray, str]:
    r"""``pi`` minimising ``sum (1/pi - 1) w`` at ``sum pi c = total`` over ``unfinished``.

    Finished entries get 1. Returns ``(pi, status)``: ``"neyman"`` (the budget binds),
    ``"full"`` (it pays every unfinished candidate), ``"contrast_full"`` (it pays every
    candidate with ``w > 0``; the rest is spread uniformly over the others), ``"floor"`` (no
    candidate has ``w > 0``: uniform among unfinished at what the budget affords, at least
    ``pi_min``; or the budget pays only the floors).
    """
    unf = np.asarray(unfinished, dtype=bool)
    cu = np.where(unf, c, 0.0)
    full = float(cu.sum())
    pi = np.ones(w.shape)
    if full <= 0.0:
        return pi, "full"
    if total >= full * (1.0 - 1e-12):
        return pi, "full"
    live = unf & (w > 0)
    if not live.any():
        # no predicted contrast anywhere: uniform among unfinished spends the budget
        pi[unf] = max(pi_min, total / full)
        return pi, "floor"
    floor_cost = pi_min * full
    if total <= floor_cost * (1.0 + 1e-12):
        pi[unf] = pi_min
        return pi, "floor"

    # Neyman: pi = clip(sqrt(w / (lambda c)), pi_min, 1) = clip(t sqrt(w / c), pi_min, 1), the
    # scale spending the budget found by exact water-filling; with every contrast paid in
    # full the rest lifts the others uniformly (the same filling)
    dead = unf & ~live
    live_cost = float(cu[live].sum())
    status = ("contrast_full" if live_cost + pi_min * float(cu[dead].sum()) <= total
              else "neyman")
    free = live & (c <= 0)  # a contrast that costs nothing is always paid
    ratio = np.divide(w, c, out=np.zeros(w.shape), where=live & ~free)
    pi[unf] = fill_to_budget(np.sqrt(ratio[unf])[None, :], cu[unf][None, :],
                             np.array([total]), pi_min)[0]
    pi[free] = 1.0
    return pi, status
