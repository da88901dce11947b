"""PAIR vs GRPO per training step on a GPU: wall-clock and tokens, HF backend, fp32 and bf16.

One command, under 10 minutes on one H100/H200, needing only torch, transformers and pairht's
core and rollout (no TRL, no vLLM, no downloads):

    python benchmarks/gpu_step.py                 # ~0.5B Qwen2, 128/256/512 rows, 4 dtype modes
    python benchmarks/gpu_step.py --tiny          # 2-layer model, 8 rows, fp32, CPU (the CI form)

The policy is a randomly initialised Qwen2 of about 0.5B parameters (Qwen2.5-0.5B's shape:
hidden 896, 24 layers, 14 heads, 2 KV heads, vocabulary 151936, tied embeddings), built on the
device. Prompts are random token ids, ``--group`` candidates each. Decoding samples at
temperature 1 from the full vocabulary with a constant bias on EOS (``sequence_bias``), chosen
so that a completion ends after about ``--mean-len`` tokens, capped at ``--max-len``: lengths
vary as in RL rollouts, and both methods sample from the same distribution.

Per step, for each row count and dtype mode, the two methods run back to back on the same
prompts:

* **GRPO**: ``TransformersTwoPhase.generate_full`` of every row, then one policy-gradient
  forward and backward over every completion (``train``);
* **PAIR**: ``generate_prefixes`` (``--tau`` tokens, features; ``p1``), a linear probe on the
  features for ``p_hat``, the remaining length for ``c_hat``, and
  :func:`pairht.step.plan_continuations` at ``--budget-ratio`` of the unfinished candidates'
  predicted cost (``plan``), ``continue_selected`` of the drawn rows (``p2``), then the same
  policy-gradient pass over the completed rows only (drawn and finished in phase 1).

Reported per step: wall seconds of each phase (``torch.cuda.synchronize`` around each), the
generated tokens (PAIR: every prefix plus the resumed suffixes), the rows trained on, and the
ratios PAIR / GRPO of wall (generation only and whole step) and of tokens.

Dtype modes (``--modes``):

* ``fp32``: float32 weights;
* ``bf16``: bfloat16 weights, no autocast;
* ``autocast``: float32 weights, each backend call and the training pass inside one
  ``torch.autocast(bfloat16)`` region;
* ``autocast-forward``: float32 weights with ``model.forward`` wrapped in its own autocast
  region, which is what accelerate (TRL's ``bf16=True``) does: the bf16 weight copies are then
  re-made at every decoding step (docs/performance.md).

Output: one table on stdout; ``--json PATH`` also writes the records.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from pairht.rollout.transformers_backend import TransformersTwoPhase
from pairht.step import StepInputs, plan_continuations

EOS, PAD, BOS = 2, 0, 1
# bf16 last: it rounds the weights in place, and every mode must see the same float32 model.
MODES = ("fp32", "autocast", "autocast-forward", "bf16")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true",
                    help="CI form: 2-layer model, 8 rows, fp32, CPU, short completions")
    ap.add_argument("--rows", type=int, nargs="+", default=[128, 256, 512],
                    help="rows per step (prompts x group)")
    ap.add_argument("--modes", nargs="+", default=None, choices=MODES,
                    help="dtype modes (default: all four; fp32 with --tiny)")
    ap.add_argument("--group", type=int, default=8, help="candidates per prompt (G)")
    ap.add_argument("--max-len", type=int, default=256, help="maximal completion length")
    ap.add_argument("--mean-len", type=float, default=160.0,
                    help="mean completion length the EOS bias aims at (before the cap)")
    ap.add_argument("--tau", type=int, default=64, help="prefix checkpoint (tokens)")
    ap.add_argument("--snap-window", type=int, default=16)
    ap.add_argument("--budget-ratio", type=float, default=0.5,
                    help="PAIR's suffix budget as a fraction of the unfinished rows' c_hat sum")
    ap.add_argument("--train-micro", type=int, default=16,
                    help="rows per micro-batch of the policy-gradient pass")
    ap.add_argument("--no-train", action="store_true", help="time generation only")
    ap.add_argument("--greedy", action="store_true",
                    help="greedy decoding without the EOS bias (every row runs to --max-len)")
    ap.add_argument("--repeats", type=int, default=1, help="steps per setting (medians)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=540.0,
                    help="start no new setting after this many seconds (keeps one command "
                         "under 10 minutes; skipped settings are listed)")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument("--json", default=None, help="also write the records to this file")
    args = ap.parse_args(argv)
    if args.tiny:
        args.rows, args.group = [8], 4
        args.modes = args.modes or ["fp32"]
        args.max_len, args.mean_len, args.tau, args.snap_window = 24, 16.0, 6, 2
        args.train_micro = 4
        args.device = args.device or "cpu"
    args.modes = args.modes or list(MODES)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    for r in args.rows:
        if r % args.group:
            ap.error(f"--rows must be multiples of --group = {args.group}; got {r}")
    return args


# ------------------------------------------------------------------------------ the model
def build_model(tiny: bool, device: str, seed: int) -> Any:
    """Random-init Qwen2 (Qwen2.5-0.5B's shape, or a 2-layer toy), float32, on ``device``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape: dict[str, Any] = (
        dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
        if tiny else
        dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
             num_attention_heads=14, num_key_value_heads=2))
    cfg = Qwen2Config(**shape, max_position_embeddings=1024, tie_word_embeddings=True,
                      pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    return model.eval()


def eos_bias(vocab: int, mean_len: float) -> float:
    """EOS logit bias giving a per-step stop probability ``1/mean_len`` under near-uniform
    logits: ``e^x / (e^x + V - 1) = 1/L``, ``x = log((V - 1) / (L - 1))`` (the random-init
    model's logits spread by ~0.6, so the realised mean is close, not exact)."""
    return math.log((vocab - 1) / max(mean_len - 1.0, 1e-9))


def make_backend(args: argparse.Namespace, vocab: int) -> TransformersTwoPhase:
    from transformers import GenerationConfig

    if args.greedy:
        gc = GenerationConfig(do_sample=False)
    else:
        gc = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              sequence_bias={(EOS,): eos_bias(vocab, args.mean_len)})
    # Ten ids stand for newline tokens: prefixes snap to them within the window, if drawn.
    return TransformersTwoPhase(
        tau=args.tau, snap_window=args.snap_window, eos_token_ids=[EOS], pad_token_id=PAD,
        snap_token_ids=list(range(3, 13)), generation_config=gc,
        max_completion_length=args.max_len, record_confidence=False)


def prompts_for(rows: int, group: int, vocab: int, rng: np.random.Generator) -> list[list[int]]:
    out = []
    for _ in range(rows // group):
        p = [BOS, *rng.integers(13, vocab, size=int(rng.integers(32, 97))).tolist()]
        out += [p] * group
    return out


# ------------------------------------------------------------------------------ timing
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Clock:
    """Wall seconds per named phase, the device synchronised at each boundary."""

    def __init__(self, device: str):
        self.device = device
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn, *a, **k):
        sync(self.device)
        t0 = time.perf_counter()
        out = fn(*a, **k)
        sync(self.device)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        return out


# ------------------------------------------------------------------------------ one step
def policy_gradient(model, prompts: list[list[int]], completions: list[list[int]],
                    micro: int, device: str) -> int:
    """One REINFORCE forward and backward over ``completions`` (random +-1 advantages), in
    micro-batches of ``micro`` rows; returns the completion tokens trained on. The cost of a
    GRPO-style policy loss without the reference model; gradients are dropped after."""
    if not completions:
        return 0
    tokens = 0
    adv = torch.tensor(np.where(np.arange(len(completions)) % 2 == 0, 1.0, -1.0),
                       dtype=torch.float32, device=device)
    for s in range(0, len(completions), micro):
        seqs = [p + c for p, c in zip(prompts[s:s + micro], completions[s:s + micro])]
        width = max(len(q) for q in seqs)
        ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        gen = torch.zeros((len(seqs), width), dtype=torch.bool)
        for i, (q, p) in enumerate(zip(seqs, prompts[s:s + micro])):
            ids[i, :len(q)] = torch.as_tensor(q)
            mask[i, :len(q)] = 1
            gen[i, len(p):len(q)] = True
        ids, mask, gen = ids.to(device), mask.to(device), gen.to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), dim=-1).gather(
            -1, ids[:, 1:, None]).squeeze(-1)
        g = gen[:, 1:].float()
        per_row = (logp * g).sum(1) / g.sum(1).clamp(min=1.0)
        loss = -(adv[s:s + micro] * per_row).sum() / len(completions)
        loss.backward()
        tokens += int(gen.sum())
    model.zero_grad(set_to_none=True)
    return tokens


def grpo_step(model, tp, prompts, args, ctx) -> dict[str, Any]:
    clock = Clock(args.device)
    with ctx():
        comps = clock.run("gen", tp.generate_full, model, prompts)
        trained = 0 if args.no_train else clock.run(
            "train", policy_gradient, model, prompts, comps, args.train_micro, args.device)
    return {"seconds": clock.seconds, "tokens": sum(len(c) for c in comps),
            "rows_trained": len(comps), "train_tokens": trained, "completions": comps}


def pair_step(model, tp, prompts, args, ctx, probe: torch.Tensor, rng) -> dict[str, Any]:
    clock = Clock(args.device)
    G = args.group
    with ctx():
        pre = clock.run("p1", tp.generate_prefixes, model, prompts)

        def plan():
            feats = pre.features.to(probe.device)
            p_hat = torch.sigmoid(feats @ probe).double().cpu().numpy().reshape(-1, G)
            lengths = pre.prefix_lengths.reshape(-1, G).astype(np.float64)
            finished = pre.prefix_done.numpy().reshape(-1, G)
            c_hat = np.maximum(args.max_len - lengths, 1.0)
            inputs = StepInputs.from_ratio(p_hat, c_hat, finished,
                                           budget_ratio=args.budget_ratio)
            return plan_continuations(inputs, rng=rng)

        p = clock.run("plan", plan)
        sel = np.asarray(p.selected, dtype=bool).reshape(-1)
        done = pre.prefix_done.numpy().reshape(-1)
        go = [i for i in range(len(prompts)) if sel[i] or done[i]]
        resumed = [i for i in go if not done[i]]
        prefix_tokens = int(sum(len(x) for x in pre.prefix_ids))
        comps = clock.run("p2", tp.continue_selected, model, pre, go)
        suffix_tokens = sum(len(comps[k]) - len(pre.prefix_ids[i])
                            for k, i in enumerate(go) if not done[i])
        trained = 0 if args.no_train else clock.run(
            "train", policy_gradient, model, [prompts[i] for i in go], comps,
            args.train_micro, args.device)
    return {"seconds": clock.seconds, "tokens": prefix_tokens + suffix_tokens,
            "prefix_tokens": prefix_tokens, "rows_trained": len(go),
            "rows_resumed": len(resumed), "train_tokens": trained, "resumed": resumed,
            "prefix_lengths": [len(x) for x in pre.prefix_ids],
            "completions": {i: comps[k] for k, i in enumerate(go)}}


# ------------------------------------------------------------------------------ modes
def prepare(model, mode: str, device: str):
    """The model for ``mode`` and the context each step runs in."""
    import contextlib

    dev = "cuda" if device.startswith("cuda") else "cpu"
    if mode == "bf16":
        return model.to(torch.bfloat16), contextlib.nullcontext
    model = model.to(torch.float32)
    if mode == "autocast":
        return model, functools.partial(torch.autocast, dev, dtype=torch.bfloat16)
    if mode == "autocast-forward":
        # accelerate's prepare_model with mixed_precision="bf16": forward wrapped in autocast.
        inner = type(model).forward.__get__(model)
        model.forward = torch.autocast(dev, dtype=torch.bfloat16)(inner)
        return model, contextlib.nullcontext
    return model, contextlib.nullcontext


def unprepare(model) -> None:
    if "forward" in model.__dict__:
        del model.forward


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    model = build_model(args.tiny, args.device, args.seed)
    vocab = model.config.vocab_size
    tp = make_backend(args, vocab)
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    probe = (torch.randn(model.config.hidden_size, generator=gen)
             / math.sqrt(model.config.hidden_size)).to(args.device)
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    skipped = []
    print(f"# model: random-init Qwen2, {n_params / 1e6:.0f}M parameters; device: "
          f"{torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}; "
          f"torch {torch.__version__}; G = {args.group}, tau = {args.tau}, max_len = "
          f"{args.max_len}, budget ratio {args.budget_ratio}", flush=True)
    print(HEADER, flush=True)
    for mode in sorted(args.modes, key=MODES.index):
        model, ctx = prepare(model, mode, args.device)
        if not args.tiny:
            # Warm-up: kernels, the caching allocator, the allocation's numba kernel.
            warm = prompts_for(2 * args.group, args.group, vocab, np.random.default_rng(99))
            torch.manual_seed(args.seed)
            pair_step(model, tp, warm, args, ctx, probe, np.random.default_rng(0))
            grpo_step(model, tp, warm, args, ctx)
        for rows in args.rows:
            for rep in range(args.repeats):
                if time.perf_counter() - start > args.max_seconds:
                    skipped.append(f"{mode}/{rows} rows/repeat {rep}")
                    continue
                rng = np.random.default_rng(args.seed + 1000 * rep + rows)
                prompts = prompts_for(rows, args.group, vocab, rng)
                torch.manual_seed(args.seed + rep)
                g = grpo_step(model, tp, prompts, args, ctx)
                torch.manual_seed(args.seed + rep)
                p = pair_step(model, tp, prompts, args, ctx, probe, rng)
                rec = {"mode": mode, "rows": rows, "repeat": rep, "grpo": g, "pair": p}
                print(format_row(rec), flush=True)
                records.append(rec)
        unprepare(model)
    if skipped:
        print(f"# skipped after --max-seconds {args.max_seconds:g}: {', '.join(skipped)}")
    return records


def format_row(rec: dict[str, Any]) -> str:
    g, p = rec["grpo"], rec["pair"]
    gs, ps = g["seconds"], p["seconds"]
    g_gen, p_gen = gs["gen"], ps["p1"] + ps["plan"] + ps["p2"]
    g_all, p_all = g_gen + gs.get("train", 0.0), p_gen + ps.get("train", 0.0)
    return (f"| {rec['rows']} | {rec['mode']} | {g_gen:.2f} | {gs.get('train', 0.0):.2f} | "
            f"{g['tokens']} | {ps['p1']:.2f} | {ps['plan']:.3f} | {ps['p2']:.2f} | "
            f"{ps.get('train', 0.0):.2f} | {p['tokens']} | {p['rows_resumed']} | "
            f"{p['rows_trained']} | {p_gen / g_gen:.2f} | {p_all / g_all:.2f} | "
            f"{p['tokens'] / max(g['tokens'], 1):.2f} |")


HEADER = ("| rows | mode | GRPO gen s | GRPO train s | GRPO tokens | PAIR p1 s | PAIR plan s | "
          "PAIR p2 s | PAIR train s | PAIR tokens | resumed | trained | gen wall ratio | "
          "step wall ratio | token ratio |\n" + "|---" * 15 + "|")


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    if not args.device.startswith("cuda"):
        torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    t0 = time.perf_counter()
    records = run(args)
    print(f"# total {time.perf_counter() - t0:.0f} s; ratios are PAIR / GRPO on the same "
          "prompts; gen = generation (+ plan for PAIR), step = gen + train", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v if k not in ("grpo", "pair") else
                        {a: b for a, b in v.items() if a not in ("completions", "resumed")}
                        for k, v in r.items()} for r in records], f, indent=1)
    return records


if __name__ == "__main__":
    main(sys.argv[1:])
