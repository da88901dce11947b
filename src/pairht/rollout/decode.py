r"""Batched decoding that drops each row from the batch as soon as the row ends.

``transformers``' ``generate`` keeps a finished row in the batch, feeding it padding, until the
longest row ends; a decode step of a small model (or of any model at a latency-bound batch size)
costs nearly the same at half the rows, so a batch whose rows end at very different lengths
pays for its longest row on every row. :func:`decode_rows` runs the same decoding step as
``generate`` (the same model forward, the same logits processors built by the model's own
``generate`` machinery, then argmax or one multinomial draw per row) and removes a row from the
batch, its cache rows and its processors' per-row state the step it emits an end-of-sequence
token or reaches its own token budget.

What stays the same. A running row sees exactly the inputs it would see in ``generate``: its
own tokens, its attention mask (so its positions, ``cumsum(mask) - 1``) and its cached keys and
values; the other rows of a batch never enter its computation. So under greedy decoding the
output is ``generate``'s token for token (up to the float rounding of a batched matrix product
at another batch size, which the tests check does not change a token), and under sampling every
token is drawn from the same processed distribution given the same prefix (the tests compare
the processed scores with ``generate``'s own at every step). The random draws differ: one
multinomial call per step over the running rows consumes the generator differently from one
over all rows.

Needs ``transformers`` >= 5.17 (it calls the ``generate`` helpers that build the processors
from a ``GenerationConfig``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

import torch
from transformers import GenerationConfig, LogitsProcessorList
from transformers.cache_utils import DynamicCache

from pairht.rollout.features import forward_kwargs, position_ids

__all__ = ["decode_rows"]


def _budgets(max_new_tokens: int | Sequence[int] | torch.Tensor, rows: int) -> torch.Tensor:
    b = torch.as_tensor(max_new_tokens, dtype=torch.long).flatten()
    if b.numel() == 1:
        b = b.expand(rows).clone()
    if b.numel() != rows or bool((b < 0).any()):
        raise ValueError(
            f"max_new_tokens must be one int >= 0 or one per row ({rows} rows); "
            f"got {b.tolist()}"
        )
    return b


@torch.no_grad()
def decode_rows(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int | Sequence[int] | torch.Tensor,
    generation_config: GenerationConfig,
    past_key_values: DynamicCache | None = None,
    logits_processor: LogitsProcessorList | None = None,
) -> list[list[int]]:
    r"""Decode every row to its end, each row leaving the batch at its own end.

    Row ``i`` ends at the first token in ``generation_config.eos_token_id`` (kept) or after
    ``max_new_tokens[i]`` new tokens, whichever comes first. One step over the running rows
    ``R_t``: ``logits = model(last token, mask, cache)[:, -1]``, ``scores =
    processors(ids, logits)``, ``x = argmax(scores)`` (greedy) or ``x ~ softmax(scores)``
    (``do_sample``), as in ``generate``; then ``R_{t+1} = {i in R_t : x_i not EOS and
    t + 1 < max_new_tokens[i]}`` and the cache keeps the rows of ``R_{t+1}``.

    Parameters
    ----------
    model : transformers causal LM with a ``DynamicCache`` (full-attention layers)
    input_ids : (rows, T) long tensor, left-padded
    attention_mask : (rows, T) tensor, 0 on the padding
    max_new_tokens : int or (rows,) ints
        Each row's budget of new tokens.
    generation_config : transformers.GenerationConfig
        The decoding settings as ``generate`` would take them (``eos_token_id`` and
        ``pad_token_id`` set); the model's own generation defaults fill what it leaves unset, as
        in ``generate``. Beam search, assisted decoding and ``min_new_tokens`` are not
        supported.
    past_key_values : DynamicCache, optional
        The keys and values of the first ``c < T`` columns of every row (resuming a decode, as
        phase 2 does); consumed (rows are dropped from it in place). ``None``: a fresh cache.
    logits_processor : LogitsProcessorList, optional
        Extra processors run after ``generate``'s own, as ``generate``'s argument of that name;
        each is called with the running rows only.

    Returns
    -------
    list of ``rows`` lists of new token ids, in row order (EOS kept, nothing after it).

    Examples
    --------
    >>> import torch
    >>> from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    >>> _ = torch.manual_seed(0)
    >>> model = LlamaForCausalLM(LlamaConfig(
    ...     vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...     num_attention_heads=2, num_key_value_heads=1)).eval()
    >>> ids = torch.tensor([[0, 1, 5, 6], [1, 7, 8, 9]])
    >>> mask = (ids != 0).long()
    >>> gc = GenerationConfig(do_sample=False, eos_token_id=2, pad_token_id=0)
    >>> out = decode_rows(model, ids, mask, max_new_tokens=[3, 5], generation_config=gc)
    >>> ref = model.generate(ids, attention_mask=mask, generation_config=GenerationConfig(
    ...     do_sample=False, eos_token_id=2, pad_token_id=0, max_new_tokens=5))[:, 4:]
    >>> ref.tolist()  # generate pads row 0 after its EOS until row 1 ends
    [[2, 0, 0, 0, 0], [28, 1, 11, 24, 28]]
    >>> out  # row 0 left the batch at its EOS
    [[2], [28, 1, 11, 24, 28]]
    """
    rows, width = input_ids.shape
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask must have input_ids' shape {tuple(input_ids.shape)}; "
            f"got {tuple(attention_mask.shape)}"
        )
    budget = _budgets(max_new_tokens, rows).to(input_ids.device)
    out: list[list[int]] = [[] for _ in range(rows)]
    if rows == 0 or int(budget.max()) == 0:
        return out
    device = input_ids.device
    # The configuration and processors exactly as `generate` derives them (model defaults
    # filled in, special tokens as tensors), so that a step processes its scores as there.
    gc, _ = model._prepare_generation_config(copy.deepcopy(generation_config))
    if (gc.num_beams or 1) > 1 or gc.min_new_tokens or gc.min_length:
        raise ValueError(
            "generation_config must decode one beam without a minimum length for decode_rows; "
            f"got num_beams={gc.num_beams}, min_new_tokens={gc.min_new_tokens}, "
            f"min_length={gc.min_length}"
        )
    model._prepare_special_tokens(gc, True, device=device)
    eos = gc._eos_token_tensor
    if eos is None:
        raise ValueError("generation_config.eos_token_id must name the end-of-sequence token(s)")

    def processors(mask: torch.Tensor) -> LogitsProcessorList:
        # Rebuilt whenever rows leave: a processor may hold per-row state taken from the mask
        # (the repetition penalty's padding lengths).
        procs = model._get_logits_processor(
            generation_config=gc, input_ids_seq_length=width, device=device,
            model_kwargs={"attention_mask": mask},
        )
        procs.extend(logits_processor or [])
        return procs

    cache = past_key_values if past_key_values is not None else DynamicCache(config=model.config)
    cached = cache.get_seq_length()
    if cached >= width:
        raise ValueError(
            f"past_key_values must hold fewer columns than input_ids ({width}); got {cached}"
        )
    running = torch.arange(rows, device=device)  # original row of each batch row
    ids, mask = input_ids, attention_mask
    if not bool((budget > 0).all()):
        running = (budget > 0).nonzero().squeeze(1)
        ids, mask = ids[running], mask[running]
        if cached:
            cache.batch_select_indices(running)
    step_ids = ids[:, cached:]
    step_pos = position_ids(mask)[:, cached:]
    procs = processors(mask)
    extra = forward_kwargs(model)
    for t in range(int(budget.max())):
        logits = model(
            input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
            past_key_values=cache, use_cache=True, **extra,
        ).logits[:, -1].to(copy=True, dtype=torch.float32)
        scores = procs(cast(torch.LongTensor, ids), cast(torch.FloatTensor, logits))
        if gc.do_sample:
            nxt = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        else:
            nxt = scores.argmax(dim=-1)
        for r, x in zip(running.tolist(), nxt.tolist()):
            out[r].append(x)
        alive = ~torch.isin(nxt, eos) & (budget[running] > t + 1)
        ids = torch.cat([ids, nxt.unsqueeze(1)], dim=1)
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        if not bool(alive.all()):
            if not bool(alive.any()):
                break
            keep = alive.nonzero().squeeze(1)
            running, ids, mask = running[keep], ids[keep], mask[keep]
            nxt = nxt[keep]
            cache.batch_select_indices(keep)
            procs = processors(mask)
        step_ids = nxt.unsqueeze(1)
        step_pos = (mask.long().sum(dim=1, keepdim=True) - 1)
    return out
