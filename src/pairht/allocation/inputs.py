r"""What an allocation rule reads after phase 1: predictions, finished prefixes, budget.

Realised accounting: a candidate whose prefix already ended (``finished``) is a complete
sequence. It is kept with probability one and costs nothing more, and the suffix budget of a
prompt is spent on its *unfinished* candidates only:

.. math:: \sum_{i \notin F} c_i \pi_i \le B, \qquad \pi_i = 1 \ (i \in F).

The budget has two forms, the tokens ``budget`` and the fraction ``budget_ratio`` of the
unfinished candidates' predicted cost. :class:`StepInputs` keeps the one it is given exactly
and derives the other once, so no rule converts a budget back into the form it came from.
Every allocation rule (``pairht.step``'s and the comparators') reads this one type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import (
    as_bool_array,
    as_real_array,
    check_finite,
    check_probabilities,
)


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
    budget : (B,) array_like, optional
        Expected suffix-token budget of each prompt, spent on unfinished candidates only
        (``sum_{i unfinished} c_i pi_i <= budget``).
    prefix_tokens : (B, G) array_like, optional
        Tokens already generated (phase 1), for the accounting metrics.
    history : mapping of str to array, optional
        Per-prompt history for prompt-level allocators, e.g. ``{"successes": (B,),
        "trials": (B,)}`` (read by the comparators' allocators).
    budget_ratio : float or (B,) array_like, optional
        The budget as a fraction of the unfinished candidates' predicted cost,
        ``budget_b = budget_ratio_b * sum_{i unfinished} c_hat_bi`` (:meth:`from_ratio`).

    Give ``budget`` or ``budget_ratio``: the other is derived once, ``budget_ratio_b =
    budget_b / sum_u c_hat_bu`` (1 where every candidate finished: nothing to pay for).
    Both are accepted only when one is the other's derived form (what
    ``dataclasses.replace`` passes); to change the budget use :meth:`with_budget`.

    Raises
    ------
    ValueError, TypeError
        Naming the argument, the value and the rule (shape, range, finiteness).

    Examples
    --------
    >>> x = StepInputs.from_ratio([[0.2, 0.9, 0.5]], [[40.0, 0.0, 10.0]],
    ...                           [[False, True, False]], budget_ratio=0.5)
    >>> x.budget.tolist(), x.budget_ratio.tolist(), x.n_unfinished.tolist()
    ([25.0], [0.5], [2])
    >>> StepInputs([[0.2, 0.9]], [[40.0, 10.0]], [[False, False]], budget=[60.0]).share
    array([1.])
    """

    p_hat: np.ndarray
    c_hat: np.ndarray
    finished: np.ndarray
    budget: np.ndarray = None  # type: ignore[assignment]  # derived when budget_ratio is given
    prefix_tokens: np.ndarray | None = None
    history: Mapping[str, np.ndarray] | None = None
    budget_ratio: np.ndarray = None  # type: ignore[assignment]  # derived when budget is given

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
                             f"(predicted suffix tokens); c_hat[{b}, {i}] = {float(c[b, i])!r}")
        c = np.where(fin, 0.0, c)  # finished: nothing left to generate
        bud, ratio = _budget_forms(self.budget, self.budget_ratio, c.sum(axis=1))
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
                            ("prefix_tokens", pre), ("budget_ratio", ratio)):
            if value is not None:
                value = np.array(value)
                value.setflags(write=False)
            object.__setattr__(self, name, value)

    @classmethod
    def from_ratio(cls, p_hat: ArrayLike, c_hat: ArrayLike, finished: ArrayLike,
                   budget_ratio: ArrayLike, **kwargs: object) -> StepInputs:
        r"""Inputs with ``budget_b = budget_ratio * sum_{i unfinished} c_hat_bi``.

        ``budget_ratio = 1`` affords every unfinished suffix (``pi = 1``); under realised
        accounting the ratio is a fraction of the *unfinished* candidates' predicted cost.
        The ratio is kept as given (:attr:`budget_ratio`).
        """
        return cls(p_hat, c_hat, finished, budget_ratio=budget_ratio,  # type: ignore[arg-type]
                   **kwargs)  # type: ignore[arg-type]

    def with_budget(self, budget: ArrayLike) -> StepInputs:
        """The same batch at the token budgets ``budget`` ``(B,)`` (the ratio derived anew)."""
        return StepInputs(self.p_hat, self.c_hat, self.finished,
                          budget=budget,  # type: ignore[arg-type]  # validated on construction
                          prefix_tokens=self.prefix_tokens, history=self.history)

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
    def n_finished(self) -> np.ndarray:
        """``(B,)`` int, finished (free, always kept) candidates per prompt."""
        return self.finished.sum(axis=1)

    @property
    def full_cost(self) -> np.ndarray:
        """``(B,)`` predicted cost of continuing every unfinished candidate, ``sum c_hat_u``."""
        return self.c_hat.sum(axis=1)

    @property
    def share(self) -> np.ndarray:
        """``(B,)`` the uniform probability the budget affords, ``min(1, budget_ratio)``."""
        return np.minimum(1.0, self.budget_ratio)


def check_inputs(inputs: object) -> StepInputs:
    """``inputs`` itself if it is a :class:`StepInputs` (validated when built), else a
    ``TypeError`` naming what it is: every allocation rule reads this one type."""
    if not isinstance(inputs, StepInputs):
        raise TypeError(f"inputs must be a pairht.step.StepInputs (the arrays validated once, "
                        f"with the budget in both forms); got {type(inputs).__name__}")
    return inputs


def _budget_forms(budget: ArrayLike | None, ratio: ArrayLike | None, full: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(budget, budget_ratio)``, each ``(B,)``: the one given kept, the other derived."""
    B = full.shape[0]

    def read(name: str, x: ArrayLike, unit: str) -> np.ndarray:
        arr = check_finite(name, x)
        if arr.ndim == 0:
            arr = np.full(B, float(arr))
        if arr.shape != (B,):
            raise ValueError(f"{name} must have shape (B,) = ({B},), one per prompt; got "
                             f"shape {np.shape(x)}")
        if np.any(arr < 0):
            raise ValueError(f"{name} must be >= 0 ({unit}); got min {float(arr.min())!r}")
        return arr

    if budget is None and ratio is None:
        raise ValueError("budget or budget_ratio is required (suffix tokens per prompt, or "
                         "their fraction of the unfinished candidates' predicted cost); got "
                         "neither")
    bud = None if budget is None else read("budget", budget, "suffix tokens")
    rat = None if ratio is None else read("budget_ratio", ratio, "a fraction of the cost")
    from_ratio = None if rat is None else rat * full
    from_budget = None if bud is None else np.divide(bud, full, out=np.ones(B), where=full > 0)
    if bud is None:
        assert rat is not None and from_ratio is not None
        return from_ratio, rat
    if rat is None:
        assert from_budget is not None
        return bud, from_budget
    assert from_ratio is not None and from_budget is not None
    agree = (bud == from_ratio) | (rat == from_budget)
    if not agree.all():
        b = int(np.argmin(agree))
        raise ValueError(f"budget and budget_ratio disagree: give one, the other is derived "
                         f"(to change the budget use StepInputs.with_budget); prompt {b} has "
                         f"budget = {bud[b]!r}, budget_ratio = {rat[b]!r}, unfinished cost "
                         f"{full[b]!r}")
    return bud, rat


def _as_bool(name: str, x: ArrayLike, shape: tuple[int, ...]) -> np.ndarray:
    arr = as_bool_array(name, x, "True where the prefix ended")
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have the shape of p_hat {tuple(shape)}; got {arr.shape}")
    return arr
