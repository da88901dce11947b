"""Two-phase generation on Hugging Face ``transformers``: prefixes to a checkpoint, then resume.

Phase 1 (:meth:`TransformersTwoPhase.generate_prefixes`) decodes every candidate to the prefix
checkpoint ``tau`` (snapped to the next newline or sentence delimiter within ``snap_window``
tokens), keeps the KV cache and computes the prefix features the heads read. Phase 2
(:meth:`TransformersTwoPhase.continue_selected`) resumes only the selected candidates from their
cached keys and values, so a selected candidate's completion is token for token the one an
uninterrupted :meth:`~TransformersTwoPhase.generate_full` would produce under greedy decoding
(PAIR paper, appendix "Implementation Details", paragraph "Prefix checkpoint").

How the cache is resumed exactly. Rows stop phase 1 at different lengths ``L_i``. After
phase 1 every row's cache is re-left-padded so that all rows end at the same column: row ``i``
is shifted right by ``max L - L_i`` columns and the new leading columns are masked out. Because
``generate`` derives position ids from the attention mask (``cumsum - 1``), each real token
keeps its position and the rotary-embedded keys stay valid; the cache then holds every prefix
token but the last, which phase 2 feeds as its first input, exactly as ``generate`` does between
two decoding steps.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.cache_utils import DynamicCache, DynamicLayer

__all__ = [
    "PrefixResult",
    "TransformersTwoPhase",
    "prefix_features",
    "snap_cut",
    "snap_token_ids_from_tokenizer",
    "trim_after_eos",
]

SENTENCE_DELIMITERS = (".", "!", "?")


@dataclass
class PrefixState:
    """Opaque resume state of phase 1 (consumed by :meth:`TransformersTwoPhase.continue_selected`).

    ``cache`` holds, for every row, the keys and values of prompt + prefix except the last prefix
    token, right-aligned (``(rows, heads, T - 1, head_dim)`` per layer); ``input_ids`` and
    ``attention_mask`` are ``(rows, T)`` with ``T = max prompt length + max prefix length``.
    """

    cache: DynamicCache | None
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prefix_lengths: np.ndarray
    consumed: bool = False


@dataclass
class PrefixResult:
    """Output of phase 1.

    Attributes
    ----------
    prefix_ids : list[list[int]]
        Per row, the generated prefix tokens (snapped; ending with EOS when the row finished).
    prefix_done : (rows,) bool tensor
        The prefix is already a complete completion (it ended with EOS, or reached the maximal
        completion length): its remaining suffix cost is 0 and phase 2 returns it unchanged.
    features : (rows, hidden) float32 tensor
        Mean of the final-layer hidden states of the last ``feature_window`` prefix tokens
        (fewer when the prefix is shorter), detached. Heads input ``u_i`` (paper Eq. heads).
    state : PrefixState
        Opaque resume state; pass the whole result to ``continue_selected``.
    """

    prefix_ids: list[list[int]]
    prefix_done: torch.Tensor
    features: torch.Tensor
    state: PrefixState = field(repr=False)

    @property
    def prefix_lengths(self) -> np.ndarray:
        """``(rows,)`` int array of prefix lengths (tokens generated in phase 1)."""
        return np.array([len(p) for p in self.prefix_ids], dtype=np.int64)


def _as_id_tensor(name: str, ids: Iterable[int] | int | None, *, allow_empty: bool) -> torch.Tensor:
    if ids is None:
        ids = []
    elif isinstance(ids, (int, np.integer)):
        ids = [int(ids)]
    out = sorted({int(i) for i in ids})
    if not allow_empty and not out:
        raise ValueError(f"{name} must name at least one token id; got {ids!r}")
    if any(i < 0 for i in out):
        raise ValueError(f"{name} must be non-negative token ids; got {out!r}")
    return torch.tensor(out, dtype=torch.long)


def _check_prompts(prompt_ids: Sequence[Sequence[int]]) -> list[list[int]]:
    prompts = [list(map(int, p)) for p in prompt_ids]
    if not prompts:
        raise ValueError("prompt_ids must hold at least one prompt; got an empty list")
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt_ids[{i}] is empty; every prompt needs at least one token")
    return prompts


def _left_pad(
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


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    # The rule `generate` uses (GenerationMixin._prepare_position_ids_for_generation), so that
    # a forward pass here sees the same rotary positions as decoding did.
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 0)


def _forward_kwargs(model) -> dict:
    # Only the final hidden states are needed; computing logits over a vocabulary of 150k for
    # every position would dominate memory, so keep one position where the model allows it.
    params = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


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


class _SnapStop(StoppingCriteria):
    """Stop a row as soon as its prefix checkpoint is reached (see :func:`snap_cut`)."""

    def __init__(self, prompt_width: int, tau: int, snap_ids: torch.Tensor):
        self.prompt_width, self.tau, self.snap_ids = prompt_width, tau, snap_ids

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        n_gen = input_ids.shape[1] - self.prompt_width
        last = input_ids[:, -1]
        if n_gen < self.tau or self.snap_ids.numel() == 0:
            # EOS and the hard length limit are handled by `generate` itself.
            return torch.zeros_like(last, dtype=torch.bool)
        return torch.isin(last, self.snap_ids.to(last.device))


class _RowBudget(StoppingCriteria):
    """Stop row ``i`` once it has generated ``budget[i]`` new tokens."""

    def __init__(self, input_width: int, budget: torch.Tensor):
        self.input_width, self.budget = input_width, budget

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        n_gen = input_ids.shape[1] - self.input_width
        return self.budget.to(input_ids.device) <= n_gen


def _dynamic_layers(cache) -> list[DynamicLayer]:
    if not isinstance(cache, DynamicCache):
        raise NotImplementedError(
            f"two-phase generation re-aligns a DynamicCache; got {type(cache).__name__}"
        )
    layers = list(cache.layers)
    for layer in layers:
        if type(layer) is not DynamicLayer:
            # A sliding-window layer keeps only the last W columns, so rows cannot be shifted
            # independently without losing keys; not supported.
            raise NotImplementedError(
                f"two-phase generation supports full-attention DynamicLayer caches only; "
                f"got {type(layer).__name__} (sliding-window or hybrid models are not supported)"
            )
    return layers


def _realign(
    layers: list[DynamicLayer], keep: torch.Tensor, shift: torch.Tensor, width: int
) -> None:
    """In place: row ``i`` of every layer becomes ``old[keep[i]]`` shifted right by ``shift[i]``.

    New column ``t`` of row ``i`` reads old column ``t - shift[i]``; columns with ``t < shift[i]``
    read column 0 (any finite value: the attention mask hides them).
    """
    device = layers[0].keys.device
    keep = keep.to(device)
    col = torch.arange(width, device=device).unsqueeze(0) - shift.to(device).unsqueeze(1)
    col = col.clamp(min=0)
    rows = keep.unsqueeze(1).expand_as(col)
    for layer in layers:
        # (rows, heads, S, d) -> (rows, S, heads, d) so that advanced indexing picks (row, col).
        layer.keys = layer.keys.transpose(1, 2)[rows, col].transpose(1, 2).contiguous()
        layer.values = layer.values.transpose(1, 2)[rows, col].transpose(1, 2).contiguous()


def _realign_2d(x: torch.Tensor, keep: torch.Tensor, shift: torch.Tensor, width: int, fill: int):
    col = torch.arange(width, device=x.device).unsqueeze(0) - shift.to(x.device).unsqueeze(1)
    valid = col >= 0
    rows = keep.to(x.device).unsqueeze(1).expand_as(col)
    out = x[rows, col.clamp(min=0)]
    return torch.where(valid, out, torch.full_like(out, fill))


def _masked_window_mean(hidden: torch.Tensor, lengths: torch.Tensor, window: int) -> torch.Tensor:
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
    prompts = _check_prompts(prompt_ids)
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
        ids, mask = _left_pad(seqs, pad_token_id, device)
        res = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=_position_ids(mask),
            use_cache=False,
            output_hidden_states=True,
            **_forward_kwargs(model),
        )
        w = min(window, int(lengths.max()))
        out.append(_masked_window_mean(res.hidden_states[-1][:, -w:], lengths, window))
    return torch.cat(out).detach()


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


class TransformersTwoPhase:
    """Two-phase generation with KV-cache reuse on a ``transformers`` causal LM.

    Parameters
    ----------
    tau : int
        Prefix checkpoint in generated tokens (paper: 128, 256 or 512).
    snap_window : int
        After ``tau`` tokens, keep decoding until a token of ``snap_token_ids`` is produced, for
        at most ``snap_window`` more tokens (see :func:`snap_cut` for the exact rule).
    feature_window : int
        Number of trailing prefix hidden states averaged into the features.
    eos_token_ids : int or iterable of int
        Tokens that end a completion.
    pad_token_id : int
        Padding token (left padding of prompts, and after finished rows).
    snap_token_ids : iterable of int, optional
        Newline / sentence-delimiter tokens (:func:`snap_token_ids_from_tokenizer`). ``None`` or
        empty: no snapping, every prefix is cut at exactly ``tau`` tokens (or its EOS).
    generation_config : transformers.GenerationConfig, optional
        Decoding settings (sampling, temperature, top-p, ...). ``None`` means greedy decoding.
        Its ``max_new_tokens`` is the maximal completion length unless ``max_completion_length``
        is given; EOS, padding and lengths are set here per phase.
    max_completion_length : int, optional
        Maximal completion length (prefix + suffix) in tokens, as TRL's
        ``max_completion_length``.

    Notes
    -----
    Call both phases with the KV cache enabled (inside ``trl``'s
    ``unwrap_model_for_generation``, which switches gradient checkpointing off, or in eval
    mode). Full-attention ``DynamicCache`` models only (Llama, Qwen2/3, Mistral without sliding
    window); sliding-window layers raise ``NotImplementedError``.

    Examples
    --------
    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> _ = torch.manual_seed(0)
    >>> model = LlamaForCausalLM(LlamaConfig(
    ...     vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...     num_attention_heads=2, num_key_value_heads=1)).eval()
    >>> tp = TransformersTwoPhase(tau=4, snap_window=2, eos_token_ids=[2], pad_token_id=0,
    ...                           snap_token_ids=[3], max_completion_length=12)
    >>> prompts = [[1, 5, 6], [1, 7], [1, 9, 9, 9]]
    >>> res = tp.generate_prefixes(model, prompts)
    >>> res.features.shape
    torch.Size([3, 16])
    >>> tp.continue_selected(model, res, [2, 0]) == [tp.generate_full(model, prompts)[i]
    ...                                              for i in (2, 0)]
    True
    """

    def __init__(
        self,
        *,
        tau: int,
        snap_window: int = 32,
        feature_window: int = 16,
        eos_token_ids,
        pad_token_id: int,
        snap_token_ids=None,
        generation_config: GenerationConfig | None = None,
        max_completion_length: int | None = None,
    ):
        if int(tau) < 1:
            raise ValueError(f"tau must be a positive number of tokens; got tau = {tau}")
        if int(snap_window) < 0:
            raise ValueError(f"snap_window must be >= 0 tokens; got snap_window = {snap_window}")
        if int(feature_window) < 1:
            raise ValueError(
                f"feature_window must be >= 1 token; got feature_window = {feature_window}"
            )
        self.tau = int(tau)
        self.snap_window = int(snap_window)
        self.feature_window = int(feature_window)
        self.eos_token_ids = _as_id_tensor("eos_token_ids", eos_token_ids, allow_empty=False)
        self.snap_token_ids = _as_id_tensor("snap_token_ids", snap_token_ids, allow_empty=True)
        if self.snap_window == 0:
            self.snap_token_ids = self.snap_token_ids[:0]
        self.pad_token_id = int(pad_token_id)
        self.generation_config = (
            copy.deepcopy(generation_config)
            if generation_config is not None
            else GenerationConfig(do_sample=False)
        )
        if max_completion_length is None:
            max_completion_length = self.generation_config.max_new_tokens
        if max_completion_length is None or int(max_completion_length) < 1:
            raise ValueError(
                "max_completion_length must be a positive number of tokens (or set "
                f"generation_config.max_new_tokens); got {max_completion_length!r}"
            )
        self.max_completion_length = int(max_completion_length)

    # ------------------------------------------------------------------ helpers
    def _config(self, max_new_tokens: int) -> GenerationConfig:
        gc = copy.deepcopy(self.generation_config)
        gc.max_new_tokens = int(max_new_tokens)
        gc.max_length = None
        gc.min_new_tokens = None
        gc.min_length = 0
        gc.eos_token_id = self.eos_token_ids.tolist()
        gc.pad_token_id = self.pad_token_id
        gc.use_cache = True
        gc.cache_implementation = None
        gc.return_dict_in_generate = True
        gc.output_hidden_states = False
        gc.output_scores = False
        gc.output_logits = False
        gc.num_return_sequences = 1
        return gc

    def _trim(self, ids: Sequence[int]) -> list[int]:
        return trim_after_eos(ids, self.eos_token_ids.tolist())[: self.max_completion_length]

    # ------------------------------------------------------------------ single phase
    @torch.no_grad()
    def generate_full(self, model, prompt_ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """One uninterrupted generation per prompt (the reference two-phase must reproduce).

        Returns the completion ids per row, trimmed after the first EOS (EOS kept).
        """
        prompts = _check_prompts(prompt_ids)
        ids, mask = _left_pad(prompts, self.pad_token_id, model.device)
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=self._config(self.max_completion_length),
            past_key_values=DynamicCache(config=model.config),
        )
        gen = out.sequences[:, ids.shape[1] :].tolist()
        return [self._trim(g) for g in gen]

    # ------------------------------------------------------------------ phase 1
    @torch.no_grad()
    def generate_prefixes(self, model, prompt_ids: Sequence[Sequence[int]]) -> PrefixResult:
        """Phase 1: decode every row to its snapped prefix checkpoint and compute features.

        Parameters
        ----------
        model : transformers causal LM (full-attention layers)
        prompt_ids : per-row prompt token lists; repeat a prompt G times for G candidates

        Returns
        -------
        PrefixResult
        """
        prompts = _check_prompts(prompt_ids)
        device = model.device
        ids, mask = _left_pad(prompts, self.pad_token_id, device)
        width = ids.shape[1]
        has_snap = self.snap_token_ids.numel() > 0
        max_new = min(self.tau + (self.snap_window if has_snap else 0), self.max_completion_length)
        cache = DynamicCache(config=model.config)
        _dynamic_layers(cache)  # refuse sliding-window models before decoding
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=self._config(max_new),
            stopping_criteria=StoppingCriteriaList(
                [_SnapStop(width, self.tau, self.snap_token_ids.to(device))]
            ),
            past_key_values=cache,
        )
        seq = out.sequences
        gen = seq[:, width:]
        lengths, ended = snap_cut(
            gen,
            tau=self.tau,
            snap_window=self.snap_window,
            snap_token_ids=self.snap_token_ids,
            eos_token_ids=self.eos_token_ids,
        )
        done = ended | (lengths >= self.max_completion_length)
        rows = seq.shape[0]
        l_max = int(lengths.max())
        total = width + l_max
        shift = (l_max - lengths).to(device)
        keep = torch.arange(rows, device=device)

        full_mask = torch.cat([mask, torch.ones_like(gen)], dim=1)
        new_ids = _realign_2d(seq, keep, shift, total, self.pad_token_id)
        new_mask = _realign_2d(full_mask, keep, shift, total, 0)
        cached = cache.get_seq_length() if out.past_key_values is cache else 0
        if cached != seq.shape[1] - 1:
            # Gradient checkpointing in train mode makes transformers drop the cache.
            raise RuntimeError(
                f"generate kept {cached} cached positions, expected {seq.shape[1] - 1}: the KV "
                "cache was disabled (gradient checkpointing in train mode, or use_cache=False). "
                "Generate inside trl's unwrap_model_for_generation or after "
                "model.gradient_checkpointing_disable()."
            )
        layers = _dynamic_layers(cache)  # layers may be created lazily by the first forward
        # The cache holds every token but the last generated one; the re-aligned cache holds every
        # prompt + prefix token but each row's last prefix token (fed first in phase 2).
        _realign(layers, keep, shift, total - 1)

        # Features: recompute the final-layer hidden states of the last w positions from the
        # cache (one w-token forward, cheap next to decoding and model-agnostic), then restore
        # the cached keys/values bit for bit so that phase 2 resumes the exact phase-1 state.
        w = min(self.feature_window, l_max)
        saved = [
            (lay.keys[..., total - w :, :].clone(), lay.values[..., total - w :, :].clone())
            for lay in layers
        ]
        for lay in layers:
            lay.keys = lay.keys[..., : total - w, :]
            lay.values = lay.values[..., : total - w, :]
        res = model(
            input_ids=new_ids[:, total - w :],
            attention_mask=new_mask,
            position_ids=_position_ids(new_mask)[:, total - w :],
            past_key_values=cache,
            use_cache=True,
            output_hidden_states=True,
            **_forward_kwargs(model),
        )
        features = _masked_window_mean(res.hidden_states[-1], lengths, self.feature_window)
        for lay, (k, v) in zip(layers, saved):
            lay.keys = lay.keys[..., : total - 1, :]
            lay.values = lay.values[..., : total - 1, :]
            lay.keys[..., total - w :, :].copy_(k)
            lay.values[..., total - w :, :].copy_(v)

        gen_list = gen.tolist()
        prefix_ids = [gen_list[i][: int(lengths[i])] for i in range(rows)]
        state = PrefixState(
            cache=cache,
            input_ids=new_ids,
            attention_mask=new_mask,
            prefix_lengths=lengths.cpu().numpy(),
        )
        return PrefixResult(
            prefix_ids=prefix_ids,
            prefix_done=done.cpu(),
            features=features.detach().to(torch.float32),
            state=state,
        )

    # ------------------------------------------------------------------ phase 2
    @torch.no_grad()
    def continue_selected(self, model, prefix: PrefixResult, selected) -> list[list[int]]:
        """Phase 2: resume the selected rows from their cached prefixes, to termination.

        Consumes ``prefix.state`` (the caches of unselected rows are released); call once.

        Parameters
        ----------
        model : the model that produced ``prefix``
        prefix : PrefixResult from :meth:`generate_prefixes`
        selected : (rows,) bool mask, or int indices into the rows

        Returns
        -------
        list of completion id lists (prefix + suffix, trimmed after the first EOS, EOS kept), one
        per selected row, in the order of ``selected`` (ascending row order for a mask).
        """
        state = prefix.state
        if state.consumed:
            raise ValueError(
                "prefix.state was already consumed by continue_selected; phase 2 releases the "
                "caches, so each PrefixResult can be continued once"
            )
        rows = len(prefix.prefix_ids)
        idx = self._selection(selected, rows)
        done = prefix.prefix_done.cpu().numpy()
        go = [i for i in idx if not done[i]]
        completions = {i: self._trim(prefix.prefix_ids[i]) for i in idx if done[i]}
        if go:
            device = state.input_ids.device
            go_t = torch.as_tensor(go, dtype=torch.long, device=device)
            ids = state.input_ids[go_t]
            mask = state.attention_mask[go_t]
            # Drop leading columns masked in every kept row: exact (positions come from the
            # mask) and it shortens attention for the resumed batch.
            first = int(mask.argmax(dim=1).min())
            ids, mask = ids[:, first:], mask[:, first:]
            layers = _dynamic_layers(state.cache)
            for lay in layers:
                lay.keys = lay.keys[go_t][..., first:, :]
                lay.values = lay.values[go_t][..., first:, :]
            budget = torch.as_tensor(
                self.max_completion_length - state.prefix_lengths[go], dtype=torch.long
            )
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=self._config(int(budget.max())),
                stopping_criteria=StoppingCriteriaList([_RowBudget(ids.shape[1], budget)]),
                past_key_values=state.cache,
            )
            suffix = out.sequences[:, ids.shape[1] :].tolist()
            for k, i in enumerate(go):
                completions[i] = self._trim(prefix.prefix_ids[i] + suffix[k][: int(budget[k])])
        state.cache = None
        state.consumed = True
        return [completions[i] for i in idx]

    @staticmethod
    def _selection(selected, rows: int) -> list[int]:
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
