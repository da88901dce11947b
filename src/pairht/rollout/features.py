"""Prefix features: what the prefix heads read, from one no-grad forward of the policy.

Shared by every backend: vLLM returns no hidden states, so its backend computes the features
with the training policy exactly as the transformers backend's check does. The rows of a GRPO
batch repeat each prompt ``G`` times, so :func:`prefix_features` computes prompt tokens that
rows share once and expands their keys and values (see its Notes): on a real engine this
forward was the largest cost of two-phase generation over single-phase (docs/vllm.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from pairht.rollout.contract import check_prompts

__all__ = [
    "CONFIDENCE_FEATURES",
    "confidence_features",
    "forward_kwargs",
    "left_pad",
    "masked_window_mean",
    "position_ids",
    "prefix_features",
]


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
    share_prompts: bool = True,
) -> torch.Tensor:
    """Prefix features by one no-grad forward of the policy on prompt + prefix.

    ``u_i = (1/w_i) sum_{t = L_i - w_i}^{L_i - 1} h_t``, ``w_i = min(window, L_i)``, with ``h_t``
    the final-layer hidden state at prefix token ``t`` (``hidden_states[-1]`` of the causal LM,
    which for Llama/Qwen-style models is ``last_hidden_state``, after the final norm) (PAIR paper,
    appendix "Heads and calibration": mean of the last 16 prefix hidden states, detached).

    Parameters
    ----------
    model : transformers causal LM
        The policy (no-grad forwards only).
    prompt_ids, prefix_ids : sequence of sequence of int
        Per-row token lists (every prompt and every prefix non-empty); the ``G`` candidates of
        a group repeat the same prompt.
    window : int, default 16
        Number of trailing prefix tokens averaged.
    pad_token_id : int, default 0
        Padding token (masked out).
    batch_size : int, default 64
        Rows per forward pass.
    share_prompts : bool, default True
        Compute prompt tokens that several rows of a batch share once (their keys and values,
        expanded to those rows), then only what differs; see Notes. ``False`` runs the full
        forward on prompt + prefix of every row.

    Returns
    -------
    torch.Tensor
        ``(rows, hidden)`` float32, on the model's device.

    Notes
    -----
    With sharing, a batch of rows runs in up to three passes that each extend one cache: the
    longest token prefix common to all its prompts (a chat template's system preamble), once;
    the rest of each distinct prompt, once per prompt; the prefix of every row. Between passes
    the cache's rows are repeated to the next pass's rows. This changes the batching of the
    forward, not what it computes: every token attends to the same keys and values at the same
    rotary positions (taken from the attention mask over all columns, as in the full forward),
    so the features equal the full forward's up to floating-point rounding (``tests/rollout``).
    Rows are grouped by prompt before batching (the result keeps the input order). A batch
    takes the full forward when sharing would not cut its padded token count by a tenth (no
    repeated prompt and no common preamble, say), and so does a model whose forward takes no
    ``past_key_values`` or whose cache is not a full-attention ``DynamicCache`` (sliding-window
    layers keep only the last keys). For ``G`` rows per prompt of ``P`` tokens, ``C`` of them
    common, and prefixes of ``p`` tokens, the forward reads about
    ``(C / rows + (P - C) / G + p) / (P + p)`` of the tokens of the full one.
    """
    prompts = check_prompts(prompt_ids)
    if len(prefix_ids) != len(prompts):
        raise ValueError(
            f"prefix_ids must have one entry per prompt; got {len(prefix_ids)} prefixes for "
            f"{len(prompts)} prompts"
        )
    if window < 1:
        raise ValueError(f"window must be a positive number of tokens; got {window}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive number of rows; got {batch_size}")
    prefixes = [list(map(int, p)) for p in prefix_ids]
    for i, p in enumerate(prefixes):
        if not p:
            raise ValueError(f"prefix_ids[{i}] is empty; features need at least one prefix token")
    device = model.device
    share = share_prompts and _accepts_cache(model)
    order = list(range(len(prompts)))
    if share:
        # Rows of the same prompt in the same batch is what lets the batch share it; the sort
        # is stable, so rows that share nothing keep their order.
        group: dict[tuple[int, ...], int] = {}
        row_group = [group.setdefault(tuple(p), len(group)) for p in prompts]
        order.sort(key=row_group.__getitem__)
    out = []
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        chunk_prompts = [prompts[i] for i in chunk]
        chunk_prefixes = [prefixes[i] for i in chunk]
        feats = None
        if share:
            feats = _shared_prompt_features(
                model, chunk_prompts, chunk_prefixes, window=window, pad_token_id=pad_token_id
            )
        if feats is None:
            feats = _full_features(
                model, chunk_prompts, chunk_prefixes, window=window, pad_token_id=pad_token_id,
                device=device,
            )
        out.append(feats)
    features = torch.cat(out)
    if order != sorted(order):
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.as_tensor(order, dtype=torch.long)] = torch.arange(len(order))
        features = features[inverse.to(features.device)]
    return features.detach()


#: The columns of :func:`confidence_features`, in order.
CONFIDENCE_FEATURES = ("min_logprob", "mean_logprob")


def confidence_features(token_logprobs: Sequence[Sequence[float]]) -> torch.Tensor:
    r"""How surprising each sampled prefix was: ``(rows, 2)`` float32.

    For row ``i`` with prefix tokens ``y_1 .. y_L`` drawn with probabilities ``q(y_t | ...)``
    (the sampler's, after temperature and the other logit processors):

        [ min_t log q(y_t | x, y_<t),  (1/L) sum_t log q(y_t | x, y_<t) ],

    and ``[0, 0]`` for an empty prefix. Sampling a token from the policy's tail (a slip in a
    chain of steps, say) is what often makes a completion fail, and it shows in the minimum;
    the policy's hidden state after the slip need not encode it (on the chain task of
    ``pairht.demo`` a cross-validated linear probe explains no within-prompt success variance
    from the hidden state and 19% from these two numbers: docs/trl.md, "Prefix heads").

    Parameters
    ----------
    token_logprobs : per row, the log-probabilities of the prefix's tokens (finite, <= 0)

    Examples
    --------
    >>> confidence_features([[-0.1, -2.3, -0.2], []]).tolist()
    [[-2.299999952316284, -0.8666666746139526], [0.0, 0.0]]
    """
    out = torch.zeros((len(token_logprobs), len(CONFIDENCE_FEATURES)), dtype=torch.float32)
    for i, row in enumerate(token_logprobs):
        lp = torch.as_tensor(list(row), dtype=torch.float64)
        if lp.numel() == 0:
            continue
        if not bool(torch.isfinite(lp).all()) or bool((lp > 1e-6).any()):
            raise ValueError(
                f"token_logprobs must be finite log-probabilities (<= 0); row {i} has "
                f"{lp.tolist()}"
            )
        out[i, 0] = float(lp.min())
        out[i, 1] = float(lp.mean())
    return out


def _accepts_cache(model: Any) -> bool:
    # A model whose forward takes no cache (or a wrapper that hides it) cannot be fed the
    # shared keys and values: it gets the full forward.
    return "past_key_values" in inspect.signature(model.forward).parameters


def _full_features(
    model: Any,
    prompts: list[list[int]],
    prefixes: list[list[int]],
    *,
    window: int,
    pad_token_id: int,
    device: Any,
) -> torch.Tensor:
    """The reference forward: prompt + prefix of every row, left-padded, in one pass."""
    seqs = [p + q for p, q in zip(prompts, prefixes)]
    lengths = torch.tensor([len(q) for q in prefixes])
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
    return masked_window_mean(res.hidden_states[-1][:, -w:], lengths, window)


def full_attention_layers(cache: Any) -> list[Any] | None:
    """The cache's layers when every one is a full-attention ``DynamicLayer`` (rows can be
    copied or shifted independently), else ``None`` (sliding-window or hybrid models)."""
    from transformers.cache_utils import DynamicLayer

    layers = list(cache.layers)
    return layers if all(type(layer) is DynamicLayer for layer in layers) else None


def _common_length(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix common to every sequence."""
    first, n = seqs[0], min(len(s) for s in seqs)
    for t in range(n):
        if any(s[t] != first[t] for s in seqs):
            return t
    return n


def _shared_prompt_features(
    model: Any,
    prompts: list[list[int]],
    prefixes: list[list[int]],
    *,
    window: int,
    pad_token_id: int,
) -> torch.Tensor | None:
    """Features of one batch, computing shared prompt tokens once; ``None``: not worth it.

    Row ``i``'s columns: ``[common | pad, rest of prompt_i | prefix_i, pad]``, each block a pass
    (the common block is skipped when empty, the middle one when there is one distinct prompt).
    Padding inside a block is masked; a padded query of the middle block still sees the common
    block (or, with no common block, it is the left padding the full forward has too), and the
    right padding after a prefix comes after every real token of its row, which the causal mask
    hides from them.
    """
    group: dict[tuple[int, ...], int] = {}
    row_group = [group.setdefault(tuple(p), len(group)) for p in prompts]
    distinct = [list(p) for p in group]
    rows, n_distinct = len(prompts), len(distinct)
    common = _common_length(distinct)
    # Keep one real token per distinct prompt out of the common block, so the middle block is
    # never all padding: with one distinct prompt that block is skipped instead.
    if n_distinct > 1 and common == min(len(p) for p in distinct):
        common -= 1
    if n_distinct == 1:
        common = len(distinct[0])
    rest = [p[common:] for p in distinct]
    width_s = max(len(q) for q in prefixes)
    shared_cost = common + n_distinct * max(len(r) for r in rest) + rows * width_s
    full_cost = rows * max(len(p) + len(q) for p, q in zip(prompts, prefixes))
    # A pass has costs of its own (the cache expansion, the masks, per-layer overheads); below
    # a tenth of the padded tokens saved, the single full pass is as fast and simpler.
    if shared_cost > 0.9 * full_cost:
        return None
    # Imported here: the rest of this module needs torch only (pairht.rollout.sync_check).
    from transformers.cache_utils import DynamicCache

    device = model.device
    cache = DynamicCache(config=model.config)
    if full_attention_layers(cache) is None:  # layers built from the config: refuse early
        return None
    blocks: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
    if common and n_distinct > 1:
        blocks.append((
            torch.tensor([distinct[0][:common]], dtype=torch.long),
            torch.ones((1, common), dtype=torch.long),
            None,
        ))
        ids, mask = left_pad(rest, pad_token_id, "cpu")
        blocks.append((ids, mask, torch.zeros(n_distinct, dtype=torch.long)))
    else:
        ids, mask = left_pad(distinct, pad_token_id, "cpu")
        blocks.append((ids, mask, None))
    ids = torch.full((rows, width_s), pad_token_id, dtype=torch.long)
    mask = torch.zeros((rows, width_s), dtype=torch.long)
    for i, q in enumerate(prefixes):
        ids[i, : len(q)] = torch.as_tensor(q, dtype=torch.long)
        mask[i, : len(q)] = 1
    blocks.append((ids, mask, torch.as_tensor(row_group, dtype=torch.long)))

    seen = None  # attention mask of the columns already in the cache
    res = None
    for k, (ids, mask, take) in enumerate(blocks):
        ids, mask = ids.to(device), mask.to(device)
        if seen is not None and take is not None:
            take = take.to(device)
            layers = full_attention_layers(cache)  # the first pass creates the layers
            if layers is None or cache.get_seq_length() != seen.shape[1]:
                return None
            for layer in layers:
                layer.keys = layer.keys.index_select(0, take)
                layer.values = layer.values.index_select(0, take)
            seen = seen.index_select(0, take)
        full = mask if seen is None else torch.cat([seen, mask], dim=1)
        res = model(
            input_ids=ids,
            attention_mask=full,
            position_ids=position_ids(full)[:, full.shape[1] - ids.shape[1] :],
            past_key_values=cache,
            use_cache=True,
            output_hidden_states=k == len(blocks) - 1,
            **forward_kwargs(model),
        )
        seen = full
    assert res is not None
    hidden = res.hidden_states[-1]
    lengths = torch.tensor([len(q) for q in prefixes], device=device)
    # Right-align each row's last w prefix states (columns before 0 clamp to 0 and are then
    # weighted out by masked_window_mean, which only reads the last min(window, L_i)).
    w = min(window, width_s)
    col = (lengths.unsqueeze(1) - w + torch.arange(w, device=device)).clamp(min=0)
    right = hidden.gather(1, col.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
    return masked_window_mean(right, lengths, window)
