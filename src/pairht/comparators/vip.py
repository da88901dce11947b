r"""VIP: variance-informed predictive allocation of group sizes (Nguyen et al., 2026).

arXiv 2602.01601. From the paper (as its abstract and summary state it): a Gaussian process
predicts each prompt's success probability from its recent rollouts, and the group sizes
minimise the predicted gradient variance under a rollout budget, with the variance of the
Dr. GRPO and RLOO estimators as a function of ``p_b`` and the group size. The paper's method
section was not available to us in full; this module is our reconstruction of it. The GP
(:func:`~pairht.comparators.gp.gp_success_probability`: kernel, noise, features) and the
exact integer solvers are ours. The group sizes ``n_b`` solve

.. math:: \min_n \sum_b p_b (1 - p_b)\, f(n_b) \quad\text{s.t.}\quad \sum_b k_b \le N,\quad
          n_b = F_b + k_b,\ k_b^{\min} \le k_b \le U_b,

with the per-prompt gradient variance shape ``f`` of the estimator:

* ``"rloo"`` (default): ``f(n) = 1/(n-1)`` (RLOO: ``Var = 4 sigma^2 p(1-p)/(n-1)``). It is the
  shape of the estimator ``pairht.trl`` trains with: on ``n`` completed candidates drawn
  uniformly, the pair-HT gradient is ``(1/(n-1)) sum_i (r_i - rbar) s_i``, RLOO's, and the
  trainer's default ``loss_type="dr_grpo"`` divides it by a constant;
* ``"dr_grpo"``: ``f(n) = (n-1)/n^2`` (Dr. GRPO: ``Var = 4 sigma^2 p(1-p)(n-1)/n^2``);
* ``"inverse"``: ``f(n) = 1/n`` (the plain ``p(1-p)/n`` model; ours, not one of the paper's
  two);

the score variance ``sigma^2`` is taken equal across prompts (it cancels from the program).
``F_b`` finished candidates are free and always in; ``k_b`` of the ``U_b`` unfinished are
continued. ``"inverse"`` and ``"rloo"`` are convex on the integers, so the greedy allocation
is exact (:func:`~pairht.comparators._integer.greedy_allocation`); ``(n-1)/n^2`` is not convex
on ``n = 2..4`` and is solved exactly by dynamic programming instead.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_probabilities
from pairht.comparators._integer import dp_allocation, greedy_allocation, is_concave

VarianceModel = Literal["inverse", "rloo", "dr_grpo"]
VARIANCE_MODELS: tuple[str, ...] = ("inverse", "rloo", "dr_grpo")


def variance_shape(n: ArrayLike, model: VarianceModel = "rloo") -> np.ndarray:
    r"""The group-size factor ``f(n)`` of a prompt's gradient variance (``n >= 1``).

    ``1/(n-1)`` (rloo, the default; ``inf`` at ``n = 1``), ``(n-1)/n^2`` (dr_grpo), ``1/n``
    (inverse).
    ``n = 0`` (no rollout) gives ``inf``: the prompt contributes no estimate.

    Examples
    --------
    >>> variance_shape([1, 2, 4], "dr_grpo").tolist()
    [0.0, 0.25, 0.1875]
    """
    if model not in VARIANCE_MODELS:
        raise ValueError(f"model must be one of {VARIANCE_MODELS}; got {model!r}")
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if model == "inverse":
            out = 1.0 / n
        elif model == "rloo":
            out = np.where(n > 1, 1.0 / (n - 1.0), np.inf)
        else:
            out = np.where(n > 0, (n - 1.0) / n**2, np.inf)
    return np.where(n > 0, out, np.inf)


def vip_group_sizes(
    p: ArrayLike,
    n_finished: ArrayLike,
    n_unfinished: ArrayLike,
    total: int,
    *,
    model: VarianceModel = "rloo",
    min_group: int = 2,
    min_rollouts: int = 0,
) -> np.ndarray:
    r"""Exact integer solution of VIP's program: continuations ``k_b`` per prompt.

    Parameters
    ----------
    p : (B,) array_like
        Predicted success probabilities.
    n_finished, n_unfinished : (B,) int array_like
        ``F_b`` (free, always in) and ``U_b`` (candidates that can be continued).
    total : int
        Continuations the batch may buy, ``N``.
    model : {"rloo", "dr_grpo", "inverse"}
        Variance shape ``f`` (module doc); ``"rloo"`` by default.
    min_group : int
        Minimum group size ``n_b = F_b + k_b`` (2: a group-relative advantage needs a pair);
        ``k_b^min = min(U_b, max(0, min_group - F_b))``.
    min_rollouts : int
        Also ``k_b >= min(U_b, min_rollouts)`` (0: no minimum beyond ``min_group``; 1 or more:
        every pair of the group can be observed, which the pair-HT estimator needs to be
        exactly unbiased, see :mod:`pairht.comparators.allocators`).

    Returns
    -------
    (B,) int ndarray
        ``k_b``. Units of zero gain (``p_b`` in {0, 1}) are not spent.

    Examples
    --------
    >>> vip_group_sizes([0.5, 0.9, 0.0], [0, 0, 0], [8, 8, 8], 12).tolist()
    [6, 4, 2]
    """
    if model not in VARIANCE_MODELS:
        raise ValueError(f"model must be one of {VARIANCE_MODELS}; got {model!r}")
    need = 1 if model == "inverse" else 2
    if isinstance(min_group, bool) or not isinstance(min_group, (int, np.integer)) \
            or min_group < need:
        raise ValueError(f"min_group must be an int >= {need} for model {model!r} (smaller "
                         f"groups have infinite or degenerate variance); got {min_group!r}")
    w = check_probabilities("p", p, ndim=1)
    w = w * (1.0 - w)
    F = np.asarray(n_finished, dtype=np.int64)
    U = np.asarray(n_unfinished, dtype=np.int64)
    if isinstance(min_rollouts, bool) or not isinstance(min_rollouts, (int, np.integer)) \
            or min_rollouts < 0:
        raise ValueError(f"min_rollouts must be an int >= 0; got {min_rollouts!r}")
    lower = np.maximum(np.minimum(U, np.maximum(0, min_group - F)), np.minimum(U, min_rollouts))
    width = int((U - lower).max()) if U.size else 0
    if width == 0:
        return greedy_allocation(np.zeros((U.size, 0)), lower, U, total)
    levels = lower[:, None] + np.arange(width + 1)[None, :]           # k values
    valid = levels <= U[:, None]
    # V_b(k) = w_b f(F_b + k); finite because F_b + k_b >= min(G, min_group) >= need
    cost = w[:, None] * variance_shape(F[:, None] + np.minimum(levels, U[:, None]), model)
    gains = cost[:, :-1] - cost[:, 1:]
    gvalid = valid[:, 1:]
    if is_concave(gains, gvalid):
        return greedy_allocation(np.where(gvalid, gains, 0.0), lower, U, total)
    return dp_allocation(np.where(valid, -cost, -np.inf), lower, U, total)
