r"""The step's view of its inputs: predictions shrunk by the heads' skill, the score-norm proxy.

:class:`~pairht.allocation.inputs.StepInputs` itself (predictions, finished prefixes, budget)
lives below the step and the comparators, which both read it; ``pairht.step.StepInputs`` is
the same class.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite
from pairht.allocation.inputs import StepInputs


def shrink_predictions(inputs: StepInputs, skill_success: float = 1.0,
                       skill_cost: float = 1.0) -> StepInputs:
    r"""Predictions shrunk toward the group mean by the heads' measured skill.

    .. math::
        p'_i = \bar p + s_p (p_i - \bar p), \qquad
        c'_i = \bar c_u + s_c (c_i - \bar c_u) \quad (i \text{ unfinished}),

    with ``bar p`` the mean of ``p_hat`` over the group's ``G`` candidates (the success head
    is equally uninformative on finished ones) and ``bar c_u`` the mean predicted cost over
    its unfinished candidates (finished ones cost nothing). Skill 0 makes every unfinished
    candidate alike, so every allocator reduces to the uniform design among the unfinished
    ones; skill 1 leaves the predictions unchanged. Both convex combinations stay in range
    (``p'`` in [0, 1], ``c' > 0``).

    Parameters
    ----------
    inputs : StepInputs
    skill_success, skill_cost : float in [0, 1]
        Held-out skill of the success head (Brier skill) and cost head (R^2), clipped by the
        caller to [0, 1].

    Returns
    -------
    StepInputs (the same object when both skills are 1)
    """
    s_p = _skill("skill_success", skill_success)
    s_c = _skill("skill_cost", skill_cost)
    if s_p == 1.0 and s_c == 1.0:
        return inputs
    p = inputs.p_hat
    pm = p.mean(axis=1, keepdims=True)
    p2 = np.clip(pm + s_p * (p - pm), 0.0, 1.0)
    unf = inputs.unfinished
    n_u = np.maximum(unf.sum(axis=1, keepdims=True), 1)
    cm = np.where(unf, inputs.c_hat, 0.0).sum(axis=1, keepdims=True) / n_u
    c2 = np.where(unf, cm + s_c * (inputs.c_hat - cm), 0.0)
    # Shrinking is mean-preserving, but in floating point sum(c2) differs from sum(c) by a
    # few ulps; keep the budget the same *fraction* of the predicted suffix cost, so that a
    # full budget (ratio 1) stays exactly the full cost and gives pi = 1, not 1 - 1e-16.
    # A group with nothing left to pay keeps its token budget (the accounting metrics).
    ratio = inputs.budget_ratio
    full2 = c2.sum(axis=1)
    budget = np.where(full2 > 0, ratio * full2, inputs.budget)
    return StepInputs(p_hat=p2, c_hat=c2, finished=inputs.finished, budget=budget,
                      budget_ratio=ratio, prefix_tokens=inputs.prefix_tokens,
                      history=inputs.history)


def _skill(name: str, value: float) -> float:
    v = float(check_finite(name, value))
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1] (a measured skill, clipped to that range: "
                         f"0 = no better than the group mean, 1 = trust the head); got {value!r}")
    return v


def score_norm_proxy(prefix_len: ArrayLike, c_hat: ArrayLike, finished: ArrayLike) -> np.ndarray:
    r"""``m_hat = sqrt(L + [not finished] c_hat)``: a score-norm prediction from length.

    A sequence score is a sum of per-token terms, so its squared norm (the score energy) grows
    with the sequence length; ``m_hat^2`` is the predicted total generated length: the prefix
    tokens ``L`` plus, if the prefix has not ended, the predicted suffix ``c_hat``. Input of
    the length-scaled edge proxy ``a_ij = d_ij (m_i^2 + m_j^2) / 4``.

    Examples
    --------
    >>> score_norm_proxy([32, 20], [68.0, 5.0], [False, True]).tolist()
    [10.0, 4.47213595499958]
    """
    L = np.asarray(prefix_len, dtype=np.float64)
    c = np.asarray(c_hat, dtype=np.float64)
    f = np.asarray(finished, dtype=bool)
    return np.sqrt(L + np.where(f, 0.0, c))


__all__ = ["StepInputs", "score_norm_proxy", "shrink_predictions"]
