"""Where a prefix ends: the snapped checkpoint, EOS trimming and the delimiter vocabulary.

Shared by every backend of :mod:`pairht.rollout.contract`, so that a prefix ends at the same
token whichever engine decoded it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

__all__ = ["SENTENCE_DELIMITERS", "snap_cut", "snap_token_ids_from_tokenizer", "trim_after_eos"]

#: Text endings (besides a newline) that make a token a snap point.
SENTENCE_DELIMITERS = (".", "!", "?")


def trim_after_eos(ids: Sequence[int], eos_token_ids: Iterable[int]) -> list[int]:
    """Cut a completion after its first EOS token, keeping the EOS (as TRL masks completions).

    Examples
    --------
    >>> trim_after_eos([5, 6, 2, 0, 0], eos_token_ids=[2])
    [5, 6, 2]
    >>> trim_after_eos([5, 6], eos_token_ids=[2])
    [5, 6]
    """
    eos = set(int(e) for e in eos_token_ids)
    out = []
    for t in ids:
        out.append(int(t))
        if int(t) in eos:
            break
    return out


def snap_cut(
    generated: torch.Tensor,
    *,
    tau: int,
    snap_window: int,
    snap_token_ids: torch.Tensor,
    eos_token_ids: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefix length of every row: the checkpoint ``tau`` snapped to a delimiter, or an EOS.

    With ``gen`` the generated tokens of a row (0-based), the prefix is ``gen[:L]`` with

        L = min( e + 1,                                 e: first EOS index
                 s + 1,                                 s: first snap token with s >= tau - 1
                 tau + snap_window )                    (no delimiter within the window)

    and ``L = min(e + 1, tau)`` when there are no snap tokens. ``L`` is a stopping time (it
    depends on ``gen[:L]`` only): discarding the tokens after it and resampling them in phase 2
    leaves every completion distributed exactly as an uninterrupted sample. (Cutting back at
    ``tau`` when the window holds no delimiter would not: it would discard tokens whose
    distribution was conditioned on the window having no delimiter.)

    Parameters
    ----------
    generated : (rows, n) long tensor     phase-1 tokens (padding after a finished row is ignored)
    tau : int                             prefix checkpoint in tokens
    snap_window : int                     delimiter search window after ``tau``
    snap_token_ids, eos_token_ids : 1-d long tensors

    Returns
    -------
    lengths : (rows,) long tensor   L per row, clipped to ``n``
    ended : (rows,) bool tensor     whether ``gen[L - 1]`` is an EOS

    Examples
    --------
    >>> g = torch.tensor([[5, 9, 5, 5, 9, 5], [5, 2, 0, 0, 0, 0], [5, 5, 5, 5, 5, 5]])
    >>> L, ended = snap_cut(g, tau=3, snap_window=2, snap_token_ids=torch.tensor([9]),
    ...                     eos_token_ids=torch.tensor([2]))
    >>> L.tolist(), ended.tolist()
    ([5, 2, 5], [False, True, False])
    """
    rows, n = generated.shape
    device = generated.device
    col = torch.arange(n, device=device).expand(rows, n)
    big = torch.full((rows, n), n + tau + snap_window + 1, device=device, dtype=torch.long)
    is_eos = torch.isin(generated, eos_token_ids.to(device))
    eos_end = torch.where(is_eos, col + 1, big).amin(dim=1)
    if snap_token_ids.numel():
        is_snap = torch.isin(generated, snap_token_ids.to(device)) & (col >= tau - 1)
        snap_end = torch.where(is_snap, col + 1, big).amin(dim=1)
        limit = torch.clamp(snap_end, max=tau + snap_window)
    else:
        limit = torch.full((rows,), tau, device=device, dtype=torch.long)
    lengths = torch.minimum(eos_end, limit).clamp(max=n)
    ended = eos_end <= lengths
    return lengths, ended


def snap_token_ids_from_tokenizer(
    tokenizer, delimiters: Sequence[str] = SENTENCE_DELIMITERS
) -> list[int]:
    """Token ids that end a line or a sentence: the decoded token contains a newline, or its text
    (right-stripped of spaces) ends with one of ``delimiters``.

    Decodes the vocabulary one token at a time (a one-off cost of about a second for a 150k
    vocabulary); special tokens are excluded.
    """
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = []
    for tid in range(len(tokenizer)):
        if tid in special:
            continue
        text = tokenizer.decode([tid])
        if "\n" in text or text.rstrip(" ").endswith(tuple(delimiters)):
            ids.append(tid)
    return ids
