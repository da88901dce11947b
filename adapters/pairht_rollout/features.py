"""Prefix features: what the prefix heads read, from one no-grad forward of the policy.

Shared by every backend: vLLM returns no hidden states, so its backend computes the features
with the training policy exactly as the transformers backend's check does.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from pairht_rollout.contract import check_prompts

__all__ = ["forward_kwargs", "left_pad", "masked_window_mean", "position_ids", "prefix_features"]


def left_pad(
    seqs: Sequence[Sequence[int]], pad_id: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ``(ids, attention_mask)``, as TRL pads prompts."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s) :] = torch.as_tensor(s, dtype=torch.long)
            mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    # The rule `generate` uses (GenerationMixin._prepareposition_ids_for_generation), so that
    # a forward pass here sees the same rotary positions as decoding did.
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 0)


def forward_kwargs(model) -> dict:
    # Only the final hidden states are needed; computing logits over a vocabulary of 150k for
    # every position would dominate memory, so keep one position where the model allows it.
    params = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def masked_window_mean(hidden: torch.Tensor, lengths: torch.Tensor, window: int) -> torch.Tensor:
    """Mean over the last ``min(window, L_i)`` positions of right-aligned ``hidden``
    of shape ``(rows, w, H)``."""
    w = hidden.shape[1]
    j = torch.arange(w, device=hidden.device).unsqueeze(0)
    take = torch.clamp(lengths.to(hidden.device), max=window).unsqueeze(1)
    weight = (j >= w - take).to(torch.float32).unsqueeze(-1)
    h = hidden.to(torch.float32)
    return (h * weight).sum(dim=1) / weight.sum(dim=1)


@torch.no_grad()
def prefix_features(
    model,
    prompt_ids: Sequence[Sequence[int]],
    prefix_ids: Sequence[Sequence[int]],
    *,
    window: int = 16,
    pad_token_id: int = 0,
    batch_size: int = 64,
) -> torch.Tensor:
    """Prefix features by one no-grad forward of the policy on prompt + prefix.

    ``u_i = (1/w_i) sum_{t = L_i - w_i}^{L_i - 1} h_t``, ``w_i = min(window, L_i)``, with ``h_t``
    the final-layer hidden state at prefix token ``t`` (``hidden_states[-1]`` of the causal LM,
    which for Llama/Qwen-style models is ``last_hidden_state``, after the final norm) (PAIR paper,
    appendix "Heads and calibration": mean of the last 16 prefix hidden states, detached).

    Parameters
    ----------
    model : transformers causal LM
    prompt_ids, prefix_ids : per-row token lists (every prefix non-empty)
    window : int                 number of trailing prefix tokens averaged
    pad_token_id : int           left-padding token (masked out)
    batch_size : int             rows per forward pass

    Returns
    -------
    (rows, hidden) float32 tensor on the model's device
    """
    prompts = check_prompts(prompt_ids)
    if len(prefix_ids) != len(prompts):
        raise ValueError(
            f"prefix_ids must have one entry per prompt; got {len(prefix_ids)} prefixes for "
            f"{len(prompts)} prompts"
        )
    if window < 1:
        raise ValueError(f"window must be a positive number of tokens; got {window}")
    prefixes = [list(map(int, p)) for p in prefix_ids]
    for i, p in enumerate(prefixes):
        if not p:
            raise ValueError(f"prefix_ids[{i}] is empty; features need at least one prefix token")
    device = model.device
    out = []
    for start in range(0, len(prompts), batch_size):
        seqs = [
            prompts[i] + prefixes[i] for i in range(start, min(start + batch_size, len(prompts)))
        ]
        lengths = torch.tensor([len(prefixes[i]) for i in range(start, start + len(seqs))])
        ids, mask = left_pad(seqs, pad_token_id, device)
        res = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=position_ids(mask),
            use_cache=False,
            output_hidden_states=True,
            **forward_kwargs(model),
        )
        w = min(window, int(lengths.max()))
        out.append(masked_window_mean(res.hidden_states[-1][:, -w:], lengths, window))
    return torch.cat(out).detach()
