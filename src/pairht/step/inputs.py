r"""What one PAIR step knows after phase 1: predictions, finished prefixes, budget.

Realised accounting (issue 14): a candidate whose prefix already ended (``finished``) is a
complete sequence. It is kept with probability one and costs nothing more, and the suffix
budget of a prompt is spent on its *unfinished* candidates only:

.. math:: \sum_{i \notin F} c_i \pi_i \le B, \qquad \pi_i = 1 \ (i \in F).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import as_real_array, check_finite, check_probabilities


@dataclass(frozen=True)
class StepInputs:
    r"""One batch of ``B`` prompts x ``G`` candidates after phase 1 (prefixes generated).

    Parameters
    ----------
    p_hat : (B, G) array_like
        Predicted success probabilities in [0, 1].
    c_hat : (B, G) array_like
        Predicted *remaining* (suffix) tokens; finite and ``> 0`` where unfinished. Entries of
        finished candidates are ignored (they cost nothing more) and may be 0 or NaN.
    finished : (B, G) array_like of bool
        The prefix already ended (EOS): the candidate is complete, ``pi = 1``, cost 0.
    budget : (B,) array_like
        Expected suffix-token budget of each prompt, spent on unfinished candidates only
        (``sum_{i unfinished} c_i pi_i <= budget``). :meth:`from_ratio` builds it as a
        fraction of the unfinished candidates' predicted cost.
    prefix_tokens : (B, G) array_like, optional
        Tokens already generated (phase 1), for the accounting metrics.
    history : mapping of str to array, optional
        Per-prompt history for prompt-level allocators, e.g. ``{"successes": (B,),
        "trials": (B,)}`` (read by the comparators' allocators).

    Raises
    ------
    ValueError, TypeError
        Naming the argument, the value and the rule (shape, range, finiteness).

    Examples
    --------
    >>> import numpy as np
    >>> x = StepInputs.from_ratio([[0.2, 0.9, 0.5]], [[40.0, 0.0, 10.0]],
    ...                           [[False, True, False]], budget_ratio=0.5)
    >>> x.budget.tolist(), x.n_unfinished.tolist()
    ([25.0], [2])
    """

    p_hat: np.ndarray
    c_hat: np.ndarray
    finished: np.ndarray
    budget: np.ndarray
    prefix_tokens: np.ndarray | None = None
    history: Mapping[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        p = check_probabilities("p_hat", self.p_hat)
        if p.ndim != 2 or p.shape[1] < 2:
            raise ValueError(f"p_hat must have shape (B, G) with G >= 2 candidates per prompt; "
                             f"got shape {p.shape}")
        fin = _as_bool("finished", self.finished, p.shape)
        c = as_real_array("c_hat", self.c_hat).astype(np.float64)
        if c.shape != p.shape:
            raise ValueError(f"c_hat must have the shape of p_hat {p.shape}; got {c.shape}")
        cu = np.where(fin, 1.0, c)
        bad = ~np.isfinite(cu) | (cu <= 0)
        if bad.any():
            b, i = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"c_hat must be finite and > 0 where the candidate is unfinished "
                             f"(predicted suffix tokens); c_hat[{b}, {i}] = {c[b, i]!r}")
        c = np.where(fin, 0.0, c)  # finished: nothing left to generate
        bud = check_finite("budget", self.budget)
        if bud.ndim == 0:
            bud = np.full(p.shape[0], float(bud))
        if bud.shape != (p.shape[0],):
            raise ValueError(f"budget must have shape (B,) = ({p.shape[0]},), one per prompt; got "
                             f"shape {np.shape(self.budget)}")
        if np.any(bud < 0):
            raise ValueError(f"budget must be >= 0 (suffix tokens); got min {bud.min()!r}")
        pre = None
        if self.prefix_tokens is not None:
            pre = check_finite("prefix_tokens", self.prefix_tokens)
            if pre.shape != p.shape:
                raise ValueError(f"prefix_tokens must have the shape of p_hat {p.shape}; got "
                                 f"{pre.shape}")
            if np.any(pre < 0):
                raise ValueError(f"prefix_tokens must be >= 0; got min {pre.min()!r}")
        if self.history is not None and not isinstance(self.history, Mapping):
            raise TypeError(f"history must be a mapping of str to arrays or None; got "
                            f"{type(self.history).__name__}")
        for name, value in (("p_hat", p), ("c_hat", c), ("finished", fin), ("budget", bud),
                            ("prefix_tokens", pre)):
            if value is not None:
                value = np.array(value)
                value.setflags(write=False)
            object.__setattr__(self, name, value)

    @classmethod
    def from_ratio(cls, p_hat: ArrayLike, c_hat: ArrayLike, finished: ArrayLike,
                   budget_ratio: float, **kwargs: object) -> StepInputs:
        r"""Inputs with ``budget_b = budget_ratio * sum_{i unfinished} c_hat_bi``.

        ``budget_ratio = 1`` affords every unfinished suffix (``pi = 1``); under realised
        accounting the ratio is a fraction of the *unfinished* candidates' predicted cost.
        """
        ratio = float(check_finite("budget_ratio", budget_ratio))
        if not 0.0 <= ratio:
            raise ValueError(f"budget_ratio must be >= 0; got {budget_ratio!r}")
        fin = _as_bool("finished", finished, np.shape(p_hat))
        c = as_real_array("c_hat", c_hat).astype(np.float64)
        if c.shape != fin.shape:
            raise ValueError(f"c_hat must have the shape of p_hat {fin.shape}; got {c.shape}")
        full = np.where(fin, 0.0, c).sum(axis=-1)
        return cls(p_hat=np.asarray(p_hat), c_hat=c, finished=fin, budget=ratio * full,
                   **kwargs)  # type: ignore[arg-type]

    @property
    def shape(self) -> tuple[int, int]:
        """``(B, G)``."""
        return self.p_hat.shape  # type: ignore[return-value]

    @property
    def unfinished(self) -> np.ndarray:
        """``(B, G)`` bool, the candidates the budget is spent on."""
        return ~self.finished

    @property
    def n_unfinished(self) -> np.ndarray:
        """``(B,)`` int, unfinished candidates per prompt."""
        return self.unfinished.sum(axis=1)

    @property
    def full_cost(self) -> np.ndarray:
        """``(B,)`` predicted cost of continuing every unfinished candidate, ``sum c_hat_u``."""
        return self.c_hat.sum(axis=1)


def _as_bool(name: str, x: ArrayLike, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "iuf" or not np.all(np.isin(arr, (0, 1))):
            raise TypeError(f"{name} must be a bool array (True where the prefix ended); got "
                            f"dtype {arr.dtype}")
        arr = arr.astype(bool)
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have the shape of p_hat {tuple(shape)}; got {arr.shape}")
    return arr


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
    full = np.where(unf, inputs.c_hat, 0.0).sum(axis=1)
    full2 = c2.sum(axis=1)
    ratio = np.divide(inputs.budget, full, out=np.ones_like(full), where=full > 0)
    budget = np.where(full > 0, ratio * full2, inputs.budget)
    return StepInputs(p_hat=p2, c_hat=c2, finished=inputs.finished, budget=budget,
                      prefix_tokens=inputs.prefix_tokens, history=inputs.history)


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
