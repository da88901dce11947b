"""Two-phase generation on Hugging Face ``transformers``: prefixes to a checkpoint, then resume.

Phase 1 (:meth:`TransformersTwoPhase.generate_prefixes`) decodes every candidate to the prefix
checkpoint ``tau`` (snapped to the next newline or sentence delimiter within ``snap_window``
tokens), keeps the KV cache and computes the prefix features the heads read. Phase 2
(:meth:`TransformersTwoPhase.continue_selected`) resumes only the selected candidates from their
cached keys and values, so a selected candidate's completion is token for token the one an
uninterrupted :meth:`~TransformersTwoPhase.generate_full` would produce under greedy decoding
(PAIR paper, appendix "Implementation Details", paragraph "Prefix checkpoint"). Phase 2 and
:meth:`~TransformersTwoPhase.generate_full` decode with :func:`pairht.rollout.decode.decode_rows`,
which removes each row from the batch the step it ends (``generate`` keeps it until the longest
row ends); phase 1 keeps every row, whose cache phase 2 resumes.

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
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.cache_utils import DynamicCache, DynamicLayer

from pairht.rollout.contract import PrefixResult, check_prompts, resume_rows, token_id_list
from pairht.rollout.decode import decode_rows
from pairht.rollout.features import (
    confidence_features,
    forward_kwargs,
    full_attention_layers,
    left_pad,
    masked_window_mean,
    position_ids,
    prefix_features,
)
from pairht.rollout.snapping import (
    SENTENCE_DELIMITERS,
    snap_cut,
    snap_token_ids_from_tokenizer,
    trim_after_eos,
)

# The contract's names are re-exported here, so that a user of this backend needs one import.
__all__ = [
    "SENTENCE_DELIMITERS",
    "PrefixResult",
    "PrefixState",
    "TransformersTwoPhase",
    "prefix_features",
    "snap_cut",
    "snap_token_ids_from_tokenizer",
    "trim_after_eos",
]


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


def _as_id_tensor(name: str, ids, *, allow_empty: bool) -> torch.Tensor:
    return torch.tensor(token_id_list(name, ids, allow_empty=allow_empty), dtype=torch.long)


class _SampledLogprobs(LogitsProcessor):
    """Record the log-probability of every token ``generate`` samples, under the distribution
    it samples from.

    Custom processors run after ``generate``'s own (temperature, top-k, top-p, ...), so the
    scores seen here are the final ones. The token drawn from step ``t``'s scores is known at
    step ``t + 1`` (the last column of ``input_ids``), so one step's log-softmax is kept, not
    the whole ``(rows, steps, vocab)`` history that ``output_scores`` would hold.
    """

    def __init__(self) -> None:
        self._last: torch.Tensor | None = None
        self.columns: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._last is not None:
            self._take(input_ids[:, -1])
        self._last = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        assert self._last is not None
        self.columns.append(self._last.gather(1, tokens.unsqueeze(1)).squeeze(1))
        self._last = None

    def per_row(self, generated: torch.Tensor, lengths: torch.Tensor) -> list[list[float]]:
        """The first ``lengths[i]`` log-probabilities of row ``i`` (``generated``: the new
        tokens, whose last column was drawn from the last recorded scores)."""
        if self._last is not None:
            self._take(generated[:, len(self.columns)])
        table = torch.stack(self.columns, dim=1).cpu() if self.columns else None
        return [
            [] if table is None else table[i, : int(n)].tolist()
            for i, n in enumerate(lengths.tolist())
        ]


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


def _dynamic_layers(cache) -> list[Any]:
    # list[Any]: transformers types a layer's keys/values as optional; these are filled.
    if not isinstance(cache, DynamicCache):
        raise NotImplementedError(
            f"two-phase generation re-aligns a DynamicCache; got {type(cache).__name__}"
        )
    layers = full_attention_layers(cache)
    if layers is None:
        # A sliding-window layer keeps only the last W columns, so rows cannot be shifted
        # independently without losing keys; not supported.
        other = next(type(lay).__name__ for lay in cache.layers if type(lay) is not DynamicLayer)
        raise NotImplementedError(
            f"two-phase generation supports full-attention DynamicLayer caches only; "
            f"got {other} (sliding-window or hybrid models are not supported)"
        )
    return layers


def _realign(
    layers: list[Any], keep: torch.Tensor, shift: torch.Tensor, width: int
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
    record_confidence : bool
        Record the log-probability of every sampled prefix token (one log-softmax over the
        vocabulary per decoding step) for :attr:`PrefixResult.confidence`. ``False`` skips that
        work and reports ``confidence=None`` (the trainer's ``head_confidence=False``).
    drop_finished_rows : bool
        Phase 2 and :meth:`generate_full` decode with :func:`pairht.rollout.decode.decode_rows`,
        which removes a row from the batch the step it ends (greedy output identical, sampled
        tokens from the same distribution). ``False``: ``model.generate``, which keeps every
        row until the longest one ends (the reference the benchmarks compare with).

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
        record_confidence: bool = True,
        drop_finished_rows: bool = True,
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
        self.record_confidence = bool(record_confidence)
        self.drop_finished_rows = bool(drop_finished_rows)
        #: Sync check (contract attribute): this backend decodes with the policy itself, so
        #: after a phase 1 the engine-policy log-probability gap is 0 by construction.
        self.last_logprob_gap: float | None = None
        self.last_feature_seconds: float | None = None

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

        Returns the completion ids per row, trimmed after the first EOS (EOS kept); no prompts,
        no completions (the trainer's ``width="whole"`` asks for the rows this process drew).
        """
        if not len(prompt_ids):
            return []
        prompts = check_prompts(prompt_ids)
        ids, mask = left_pad(prompts, self.pad_token_id, model.device)
        if self.drop_finished_rows:
            gen = decode_rows(
                model, ids, mask, max_new_tokens=self.max_completion_length,
                generation_config=self._config(self.max_completion_length),
            )
        else:
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
        prompts = check_prompts(prompt_ids)
        device = model.device
        ids, mask = left_pad(prompts, self.pad_token_id, device)
        width = ids.shape[1]
        has_snap = self.snap_token_ids.numel() > 0
        max_new = min(self.tau + (self.snap_window if has_snap else 0), self.max_completion_length)
        cache = DynamicCache(config=model.config)
        _dynamic_layers(cache)  # refuse sliding-window models before decoding
        recorder = _SampledLogprobs() if self.record_confidence else None
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=self._config(max_new),
            logits_processor=LogitsProcessorList([recorder] if recorder is not None else []),
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
        feature_start = time.perf_counter()
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
            position_ids=position_ids(new_mask)[:, total - w :],
            past_key_values=cache,
            use_cache=True,
            output_hidden_states=True,
            **forward_kwargs(model),
        )
        features = masked_window_mean(res.hidden_states[-1], lengths, self.feature_window)
        for lay, (k, v) in zip(layers, saved):
            lay.keys = lay.keys[..., : total - 1, :]
            lay.values = lay.values[..., : total - 1, :]
            lay.keys[..., total - w :, :].copy_(k)
            lay.values[..., total - w :, :].copy_(v)
        # Read by the trainer's per-step time split (pairht.trl.timing: the features phase).
        self.last_feature_seconds = time.perf_counter() - feature_start

        gen_list = gen.tolist()
        prefix_ids = [gen_list[i][: int(lengths[i])] for i in range(rows)]
        self.last_logprob_gap = 0.0
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
            confidence=None if recorder is None
            else confidence_features(recorder.per_row(gen, lengths)),
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
        state, idx, done, go = resume_rows(prefix, selected, PrefixState, "TransformersTwoPhase")
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
            if self.drop_finished_rows:
                suffix = decode_rows(
                    model, ids, mask, max_new_tokens=budget,
                    generation_config=self._config(int(budget.max())),
                    past_key_values=state.cache,
                )
            else:
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
