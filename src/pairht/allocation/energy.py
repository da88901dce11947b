r"""The length-scaled energy proxy: score energy grows with sequence length.

The disagreement proxy ``a_ij = d_ij`` treats every candidate's score as equally large. A
sequence score ``s_i = sum_t grad log pi(y_t | ...)`` sums one term per token, and its squared
norm grows with the length: long candidates carry more of the pair-kernel energy
``||h_ij||^2 = (r_i - r_j)^2 ||s_i - s_j||^2 / 4`` than ``d_ij`` says (docs/audit.md). This
module models

* score energy ``m_i^2 = E||s_i||^2`` proportional to the predicted *total* length
  ``prefix_len_i + c_hat_i``, scores of different candidates uncorrelated
  (``E<s_i, s_j> = 0``), independent of the Bernoulli(``p_i``) rewards;
* edge proxy ``a_ij = E||h_ij||^2 = d_ij (m_i^2 + m_j^2) / 4`` with the disagreement
  ``d_ij = p_i (1 - p_j) + p_j (1 - p_i)``;
* the shared-vertex term computed *directly* (not bounded by Cauchy-Schwarz as
  :func:`pairht.allocation.covariance_term` does): for ``j != k`` both ``!= i``,
  ``E<h_ij, h_ik> = E[(r_i - r_j)(r_i - r_k)] E<s_i - s_j, s_i - s_k> / 4
  = [p_i (1 - p_j)(1 - p_k) + (1 - p_i) p_j p_k] m_i^2 / 4``, so summing over ordered
  pairs ``(j, k)`` (the convention of ``b_i`` in :mod:`pairht.allocation.proxies`)

  .. math:: b_i = \frac{m_i^2}{2}\Big[p_i\, e_2(1 - p_{-i}) + (1 - p_i)\, e_2(p_{-i})\Big],

  ``e_2(x_{-i}) = sum_{j<k; j,k != i} x_j x_k`` the second elementary symmetric polynomial
  of the other candidates.

With ``a`` and ``b`` the exact expectations under this model, the Bernoulli-HT variance is
``(1/M^2)[sum_{i<j} a_ij (1/(pi_i pi_j) - 1) + sum_i b_i (1/pi_i - 1)]`` (PAIR paper,
Proposition 1): PAIR's program with this ``(a, b)``, which
:func:`~pairht.allocation.solve_program` solves (:func:`~pairht.allocation.allocate` derives
``b`` from ``a`` instead, so it cannot take this one). The step uses it as
``proxy="length_energy"`` (:mod:`pairht.step.pair_program`).

Examples
--------
The allocation at the predicted total lengths ``prefix_len + c_hat``:

>>> import numpy as np
>>> from pairht.allocation import solve_program
>>> p_hat, c_hat = np.array([0.1, 0.5, 0.9, 0.5]), np.array([100.0, 400.0, 200.0, 300.0])
>>> prefix_len = np.full(4, 32.0)
>>> res = solve_program(p_hat, c_hat, 500.0, *length_energy(p_hat, prefix_len + c_hat), 0.08)
>>> res.converged, round(res.expected_cost, 9)
(True, 500.0)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite, check_probabilities
from pairht.allocation.proxies import disagreement

#: Registry name of this proxy (``proxy="length_energy"`` in the audit and the step).
NAME = "length_energy"


def second_symmetric_others(x: np.ndarray) -> np.ndarray:
    r"""``e_2(x_{-i}) = sum_{j<k; j,k != i} x_j x_k`` for every ``i``, shape ``(..., G)``.

    From the power sums of the others: ``e_2 = ((S - x_i)^2 - (Q - x_i^2)) / 2`` with
    ``S = sum x`` and ``Q = sum x^2``; clipped at 0 (it is a sum of nonnegative terms for
    ``x >= 0``, rounding can leave -1e-17).

    Examples
    --------
    >>> second_symmetric_others(np.array([1.0, 2.0, 3.0])).tolist()
    [6.0, 3.0, 2.0]
    """
    s = x.sum(axis=-1, keepdims=True) - x
    q = (x * x).sum(axis=-1, keepdims=True) - x * x
    return np.maximum(0.5 * (s * s - q), 0.0)


def length_energy(p_hat: ArrayLike, total_len: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    r"""Edge proxy ``a`` and shared-vertex term ``b`` of the length-scaled energy model.

    ``m_i^2 = total_len_i / mean(total_len)`` (the scale of ``m^2`` does not move the
    allocation; normalising keeps the objective near 1),
    ``a_ij = d_ij (m_i^2 + m_j^2) / 4`` (zero diagonal) and
    ``b_i = (m_i^2 / 2) [p_i e_2(1 - p_{-i}) + (1 - p_i) e_2(p_{-i})]``.

    Parameters
    ----------
    p_hat : (..., G) array_like
        Predicted success probabilities in [0, 1].
    total_len : (..., G) array_like
        Predicted total lengths (prefix tokens + predicted suffix tokens), > 0.

    Returns
    -------
    a : (..., G, G) ndarray
    b : (..., G) ndarray

    Examples
    --------
    >>> a, b = length_energy([0.0, 1.0, 0.5], [100.0, 300.0, 200.0])
    >>> a.round(4).tolist()
    [[0.0, 0.5, 0.1875], [0.5, 0.0, 0.3125], [0.1875, 0.3125, 0.0]]
    >>> b.round(4).tolist()
    [0.125, 0.375, 0.0]
    """
    p = check_probabilities("p_hat", p_hat)
    n = check_finite("total_len", total_len)
    if n.shape != p.shape:
        raise ValueError(f"total_len must have the shape of p_hat {p.shape}; got {n.shape}")
    if np.any(n <= 0):
        idx = tuple(int(i) for i in np.argwhere(n <= 0)[0])
        raise ValueError(f"total_len must be positive (predicted tokens); total_len{list(idx)} "
                         f"= {float(n[idx])!r}")
    m2 = n / n.mean(axis=-1, keepdims=True)
    a = disagreement(p) * (m2[..., :, None] + m2[..., None, :]) / 4.0
    b = 0.5 * m2 * (p * second_symmetric_others(1.0 - p)
                    + (1.0 - p) * second_symmetric_others(p))
    return a, b
