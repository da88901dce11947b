"""Two-phase generation with KV reuse vs completing every candidate, measured in the same run.

A random-init Llama (:func:`pairht.rollout.tiny_model.tiny_llama`; CPU, float32, one thread)
decodes B prompts x G candidates greedily to ``max_completion_length`` tokens. The script
times, as CPU time (best of ``--repeats``):

* ``full``: one uninterrupted ``generate_full`` of all B*G candidates (the cost PAIR avoids);
* ``prefix``: ``generate_prefixes`` (tau tokens + snapping, cache re-alignment, features);
* ``plain prefix``: a bare ``model.generate`` of tau + window tokens for comparison, so
  ``prefix / plain prefix`` is the overhead of re-alignment and the feature forward;
* ``continue``: ``continue_selected`` on a fraction ``--keep`` of the candidates;

and prints ``(prefix + continue) / full`` and whether the selected completions equal the
uninterrupted ones token for token.

Run:  .venv/bin/python benchmarks/bench_generation.py [--keep 0.5] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np
import torch
from transformers import GenerationConfig

from pairht.rollout.features import left_pad
from pairht.rollout.tiny_model import tiny_llama
from pairht.rollout.transformers_backend import TransformersTwoPhase

EOS, PAD, BOS = 2, 0, 1


def best_time(fn, repeats: int):
    out, best = None, float("inf")
    for _ in range(repeats):
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--tau", type=int, default=48)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--keep", type=float, default=0.5)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    # The project's one tiny-Llama builder, at a size where decoding dominates; PAD and EOS are
    # the benchmark's own ids (its prompts are random ids, no tokenizer).
    ids = SimpleNamespace(pad_token_id=PAD, eos_token_id=EOS)
    model = tiny_llama(ids, vocab_size=2000, hidden_size=args.hidden,
                       intermediate_size=4 * args.hidden, num_layers=args.layers, num_heads=8,
                       max_positions=1024, tie_word_embeddings=False, init_std=0.1,
                       seed=0).eval()
    rng = np.random.default_rng(0)
    prompts = []
    for _ in range(args.prompts):
        p = [BOS, *rng.integers(10, 2000, size=int(rng.integers(20, 60))).tolist()]
        prompts += [p] * args.group
    # Distinct candidates under greedy decoding: vary the last prompt token per candidate.
    prompts = [[*p[:-1], 10 + i] for i, p in enumerate(prompts)]
    tp = TransformersTwoPhase(
        tau=args.tau,
        snap_window=args.window,
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        snap_token_ids=list(range(10, 60)),  # ~2.5% of the vocabulary ends a sentence
        max_completion_length=args.max_len,
        generation_config=GenerationConfig(do_sample=False),
    )
    n = len(prompts)
    keep = np.sort(rng.choice(n, size=max(1, int(args.keep * n)), replace=False))

    t_full, full = best_time(lambda: tp.generate_full(model, prompts), args.repeats)

    def plain():
        ids, mask = left_pad(prompts, PAD, model.device)
        return model.generate(
            input_ids=ids, attention_mask=mask, generation_config=tp._config(args.tau + args.window)
        )

    t_plain = best_time(plain, args.repeats)[0]
    t_prefix, t_cont, outs = [], [], None
    for _ in range(args.repeats):
        a, res = best_time(lambda: tp.generate_prefixes(model, prompts), 1)
        b, outs = best_time(lambda res=res: tp.continue_selected(model, res, keep), 1)
        t_prefix.append(a)
        t_cont.append(b)
    lengths = res.prefix_lengths
    exact = outs == [full[i] for i in keep]
    print(
        f"rows {n}, kept {len(keep)}, mean prefix {lengths.mean():.1f} tokens, "
        f"mean completion {np.mean([len(f) for f in full]):.1f} tokens"
    )
    print(f"full            {t_full:8.3f} s CPU")
    print(f"prefix          {min(t_prefix):8.3f} s CPU")
    print(f"plain prefix    {t_plain:8.3f} s CPU   prefix / plain = {min(t_prefix) / t_plain:.3f}")
    print(f"continue        {min(t_cont):8.3f} s CPU")
    print(f"(prefix + continue) / full = {(min(t_prefix) + min(t_cont)) / t_full:.3f}")
    print(f"selected completions equal uninterrupted generation: {exact}")


if __name__ == "__main__":
    main()
