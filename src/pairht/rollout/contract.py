"""The two-phase generation contract: what a trainer calls and what a backend returns.

A *backend* generates PAIR's rollouts in two phases (PAIR paper, Algorithm 1):

1. ``generate_prefixes(model, prompt_ids) -> PrefixResult``: every row (rows are already the G
   copies of each prompt) is decoded to its prefix checkpoint ``tau``, snapped to a delimiter by
   :func:`pairht.rollout.snapping.snap_cut`; the result carries the prefix tokens, which prefixes
   already ended, and the features the prefix heads read.
2. ``continue_selected(model, prefix, selected) -> list[list[int]]``: only the selected rows are
   resumed to termination; each returned completion is prefix + suffix, trimmed after its first
   EOS (kept), in the order of ``selected``. A ``PrefixResult`` is continued once.

``generate_full(model, prompt_ids)`` is the uninterrupted single-phase reference that the two
phases must reproduce (token for token under greedy decoding, in distribution when sampling).

Implementations: :class:`pairht.rollout.transformers_backend.TransformersTwoPhase` (KV-cache
resumption on Hugging Face ``generate``) and :class:`pairht.vllm.VLLMTwoPhase` (vLLM's prefix
cache). A new backend implements :class:`TwoPhaseBackend` (its ``continue_selected`` starting
with :func:`resume_rows`, as both do) and passes ``tests/rollout``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = [
    "PrefixResult",
    "TwoPhaseBackend",
    "check_prompts",
    "parse_selection",
    "resume_rows",
    "token_id_list",
]


@dataclass
class PrefixResult:
    """Output of phase 1, the same for every backend.

    Attributes
    ----------
    prefix_ids : list[list[int]]
        Per row, the generated prefix tokens (snapped; ending with EOS when the row finished).
    prefix_done : (rows,) bool tensor
        The prefix is already a complete completion (it ended with EOS, reached the maximal
        completion length, or the engine's context limit): its remaining suffix cost is 0 and
        phase 2 returns it unchanged.
    features : (rows, hidden) float32 tensor
        Mean of the final-layer hidden states of the last ``feature_window`` prefix tokens
        (fewer when the prefix is shorter), detached. Heads input ``u_i`` (paper Eq. heads).
    state : object
        The backend's opaque resume state; pass the whole result to ``continue_selected``.
    confidence : (rows, 2) float32 tensor or None
        How surprising the sampled prefix was: the minimum and the mean, over the prefix's
        tokens, of the log-probability the sampler gave each token it drew
        (:func:`pairht.rollout.features.confidence_features`; 0 for an empty prefix). A slip
        drawn from the tail of the policy shows here, and it predicts failure where the hidden
        state does not (docs/trl.md, "Prefix heads"). ``None`` when the backend cannot report
        it; the heads then read ``features`` alone.
    """

    prefix_ids: list[list[int]]
    prefix_done: torch.Tensor
    features: torch.Tensor
    state: Any = field(repr=False)
    confidence: torch.Tensor | None = None

    def head_inputs(self) -> torch.Tensor:
        """What the prefix heads read: ``features``, then ``confidence`` where reported,
        ``(rows, hidden [+ 2])`` float32."""
        if self.confidence is None:
            return self.features
        return torch.cat([self.features, self.confidence.to(self.features)], dim=1)

    @property
    def prefix_lengths(self) -> np.ndarray:
        """``(rows,)`` int array of prefix lengths (tokens generated in phase 1)."""
        return np.array([len(p) for p in self.prefix_ids], dtype=np.int64)


@runtime_checkable
class TwoPhaseBackend(Protocol):
    """What :class:`pairht.trl.PairGRPOTrainer` (or any trainer) needs from a generation backend.

    Attributes
    ----------
    tau, max_completion_length : int
        Prefix checkpoint and maximal completion length (prefix + suffix), in tokens.
    last_logprob_gap : float or None
        Sync check of the latest :meth:`generate_prefixes`: the largest absolute difference
        between the engine's and the policy's log-probabilities of a few phase-1 tokens
        (:mod:`pairht.rollout.sync_check`); ``None`` when no check ran. A backend that
        generates with the policy itself reports 0.
    """

    tau: int
    max_completion_length: int
    last_logprob_gap: float | None

    def generate_prefixes(self, model: Any, prompt_ids: Sequence[Sequence[int]]) -> PrefixResult:
        """Phase 1 for every row; ``model`` is the training policy (features come from it)."""
        ...

    def continue_selected(
        self, model: Any, prefix: PrefixResult, selected: Any
    ) -> list[list[int]]:
        """Phase 2 for the selected rows (bool mask or distinct int indices), in their order."""
        ...

    def generate_full(self, model: Any, prompt_ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """Single-phase reference: one uninterrupted completion per row."""
        ...


def parse_selection(selected: Any, rows: int) -> list[int]:
    """Row indices of a phase-2 selection: a ``(rows,)`` bool mask, or distinct int indices.

    A mask gives its true rows in ascending order; indices keep their order.

    Examples
    --------
    >>> parse_selection([True, False, True], 3)
    [0, 2]
    >>> parse_selection([2, 0], 3)
    [2, 0]
    """
    sel = (
        selected.detach().cpu().numpy()
        if isinstance(selected, torch.Tensor)
        else np.asarray(selected)
    )
    if sel.dtype == bool:
        if sel.shape != (rows,):
            raise ValueError(f"selected as a mask must have shape ({rows},); got {sel.shape}")
        return [int(i) for i in np.flatnonzero(sel)]
    if sel.size == 0:
        return []
    if sel.ndim != 1 or not np.issubdtype(sel.dtype, np.integer):
        raise ValueError(
            f"selected must be a bool mask of shape ({rows},) or 1-d int indices; "
            f"got dtype {sel.dtype} and shape {sel.shape}"
        )
    if sel.min() < 0 or sel.max() >= rows:
        raise ValueError(f"selected indices must lie in [0, {rows}); got {sel.tolist()}")
    if len(np.unique(sel)) != len(sel):
        raise ValueError(f"selected indices must be distinct; got {sel.tolist()}")
    return [int(i) for i in sel]


def resume_rows(
    prefix: PrefixResult, selected: Any, state_type: type[Any], backend: str
) -> tuple[Any, list[int], np.ndarray, list[int]]:
    """Phase 2's common start: check ``prefix`` can still be resumed, parse the selection.

    Every backend's ``continue_selected`` begins here. ``prefix.state`` must be a
    ``state_type`` (the resume state of ``backend``, named in the error) not yet consumed.

    Returns
    -------
    state : the ``state_type`` to resume from (the caller marks it consumed)
    rows : list[int], the selected rows in the order of :func:`parse_selection`
    done : (rows,) bool ndarray, ``prefix.prefix_done``: prefixes that are already complete
    go : list[int], the selected rows still to decode, in the order of ``rows``
    """
    state = prefix.state
    if not isinstance(state, state_type):
        raise ValueError(
            f"prefix must come from {backend}.generate_prefixes; its state is a "
            f"{type(state).__name__}"
        )
    if state.consumed:
        raise ValueError(
            "prefix.state was already consumed by continue_selected; each PrefixResult can "
            "be continued once"
        )
    rows = parse_selection(selected, len(prefix.prefix_ids))
    done = np.asarray(prefix.prefix_done.cpu(), dtype=bool)
    return state, rows, done, [i for i in rows if not done[i]]


def check_prompts(prompt_ids: Sequence[Sequence[int]]) -> list[list[int]]:
    """Prompts as lists of ints; refuses an empty batch and an empty prompt."""
    prompts = [[int(t) for t in p] for p in prompt_ids]
    if not prompts:
        raise ValueError("prompt_ids must hold at least one prompt; got an empty list")
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt_ids[{i}] is empty; every prompt needs at least one token")
    return prompts


def token_id_list(name: str, ids: Iterable[int] | int | None, *, allow_empty: bool) -> list[int]:
    """Sorted distinct non-negative token ids from an int, an iterable or ``None``."""
    if ids is None:
        ids = []
    elif isinstance(ids, (int, np.integer)):
        ids = [int(ids)]
    out = sorted({int(i) for i in ids})
    if not allow_empty and not out:
        raise ValueError(f"{name} must name at least one token id; got {ids!r}")
    if any(i < 0 for i in out):
        raise ValueError(f"{name} must be non-negative token ids; got {out!r}")
    return out
