r"""How low can any prefix design go? The Godambe-Joshi bound at equal realised tokens.

A design that generates every prefix and then continues a random subset of the unfinished
candidates estimates ``g = sum_i c_i s_i`` (``c_i = (1/2M) sum_j (r_i - r_j)``) from the
completed ones. Give it everything a prefix could reveal, *hindsight-perfect*: every reward
``r_i``, every realised suffix cost ``C_i`` and every score norm ``||s_i||``; only the
directions of the unobserved scores stay unknown. Model them as independent with mean zero
(``E[s_i s_j^T] = 0`` for ``i != j``). Then for **any** design-unbiased estimator with
inclusion probabilities ``pi`` (Godambe and Joshi 1965)

.. math:: E_\xi\, E_p \|\hat g - g\|^2 \;\ge\; \sum_{i \in U} (1/\pi_i - 1)\, c_i^2 \|s_i\|^2,

and the best ``pi`` at expected realised suffix tokens ``T = budget sum_{i in U} C_i`` is
Neyman's (:func:`pairht.step.neyman.neyman_pi`, ``pi_min = 0``). :func:`neyman_bound` returns
that minimum per prompt: the lowest exact MSE any prefix design can have at that budget under
the model, PAIR's rules included, with one budget for the batch (``batch=True``) or each prompt
at its own. The difference estimator at the same allocation attains it
(:mod:`pairht.estimators.difference`; ``pair_dr`` with hindsight predictions, up to its
floor ``pi_min``).

The model's expected MSE of any row is its exact MSE on :func:`independent_directions` (the
population with its Gram matrices replaced by their diagonals), so a cell in which the bound
exceeds ``0.8`` of small-group GRPO's MSE there is a cell in which **no** design-unbiased prefix
design reaches ``0.8x`` GRPO in expectation under the model, with any heads (docs/audit.md,
"The difference estimator (``pair_dr``) and how low a prefix design can go").

References
----------
V. P. Godambe and V. M. Joshi, "Admissibility and Bayes estimation in sampling finite
populations I", *Ann. Math. Statist.* 36 (1965), 1707-1722.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pairht.audit.base import finished_mask, suffix_costs
from pairht.audit.population import Population
from pairht.estimators.difference import target_coefficients
from pairht.step.neyman import neyman_pi


def independent_directions(pop: Population) -> Population:
    """``pop`` with every Gram matrix replaced by its diagonal (same score norms, orthogonal
    scores): exact MSEs on it are the model expectations of :func:`neyman_bound`.

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> K = independent_directions(synthetic_population(2, 3, rng=0)).gram_matrix()
    >>> bool((K[0] == K[0].T).all() and K[0, 0, 1] == 0.0)
    True
    """
    K = pop.gram_matrix()
    idx = np.arange(K.shape[1])
    D = np.zeros_like(K)
    D[:, idx, idx] = K[:, idx, idx]
    return dataclasses.replace(pop, scores=None, gram=D)


def neyman_bound(pop: Population, budget_ratio: float, *, batch: bool = True) -> np.ndarray:
    r"""Per-prompt Godambe-Joshi bound at Neyman's allocation (module docstring), ``(P,)``.

    Parameters
    ----------
    pop : Population
        Rewards, realised suffix costs, finished flags and scores (or Gram matrices).
    budget_ratio : float
        Expected realised suffix tokens as a fraction of the full cost of the unfinished
        candidates, pooled over prompts (the audit's matching), in ``(0, 1]``.
    batch : bool
        One budget for the batch (the lowest any design can go) or each prompt at
        ``budget_ratio`` of its own full cost.

    Returns
    -------
    (P,) ndarray
        ``sum_{i in U_q} (1/pi_i - 1) c_i^2 ||s_i||^2`` at the minimising ``pi``.

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> pop = synthetic_population(4, 6, rng=0)
    >>> lo = neyman_bound(pop, 0.5)
    >>> bool(lo.sum() <= neyman_bound(pop, 0.5, batch=False).sum())   # the batch pools
    True
    >>> float(neyman_bound(pop, 1.0).sum())                           # everything completed
    0.0
    """
    if not 0.0 < budget_ratio <= 1.0:
        raise ValueError(f"budget_ratio must lie in (0, 1] (a fraction of the full suffix "
                         f"cost); got {budget_ratio!r}")
    K = pop.gram_matrix()
    w = target_coefficients(pop.rewards) ** 2 * np.diagonal(K, axis1=1, axis2=2)
    unf = ~finished_mask(pop)
    C = suffix_costs(pop)
    if batch:
        pi, _ = neyman_pi(w.ravel(), C.ravel(), unf.ravel(), budget_ratio * float(C.sum()), 0.0)
        pi = pi.reshape(w.shape)
    else:
        pi = np.stack([neyman_pi(w[q], C[q], unf[q], budget_ratio * float(C[q].sum()), 0.0)[0]
                       for q in range(w.shape[0])])
    live = unf & (w > 0)
    safe = np.where(live, pi, 1.0)
    return np.where(live, (1.0 / safe - 1.0) * w, 0.0).sum(axis=1)
