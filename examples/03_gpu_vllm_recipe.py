"""GPU RECIPE (not run by the test suite, never run on CPU): PAIR on a real model with vLLM.

    # colocate: vLLM shares the training GPU(s)
    accelerate launch examples/03_gpu_vllm_recipe.py --model Qwen/Qwen3-1.7B --mode colocate

    # server: vLLM on its own GPU(s), started first (flags from TRL 1.16's VLLMClient docs,
    # plus prefix caching, which phase 2 relies on)
    CUDA_VISIBLE_DEVICES=0 VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen3-1.7B \
        --weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs \
        --enable-prefix-caching
    CUDA_VISIBLE_DEVICES=1 accelerate launch examples/03_gpu_vllm_recipe.py \
        --model Qwen/Qwen3-1.7B --mode server --server-url http://localhost:8000

Status: written against vLLM 0.31 (supported ``vllm>=0.31,<0.34``) and TRL 1.16; the two-phase
vLLM backend's request construction is tested on CPU with a fake ``vllm`` module
(tests/trl/test_vllm_adapter.py), but this script has not been run on a GPU by the test suite.
Install: ``pip install 'pairht[trl,vllm,verify]'``.

What it does (paper defaults, appendix "Default training configuration"): G = 16 prefixes of
tau = 256 tokens snapped to a newline within 32, expected suffix budget 50% of the full group's
predicted cost, pi_min = 0.08, Bernoulli design, exact mode (unclipped, unstandardised, one
epoch). Generation runs on vLLM in two phases (``pairht_vllm.VLLMTwoPhase``): phase 1 samples
prefixes, phase 2 resumes only the selected candidates from ``prompt + prefix``, which vLLM's
automatic prefix caching serves from the KV blocks computed in phase 1. The weights are pushed
to vLLM (and its prefix cache reset) before every phase 1 by TRL's ``VLLMGeneration``.

The reward is a placeholder: plug in a verifier from ``pairht_trl.verifiers`` for your data.
"""

from __future__ import annotations

import argparse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="Qwen/Qwen3-1.7B")
    p.add_argument("--mode", choices=("colocate", "server"), default="colocate")
    p.add_argument("--server-url", default="http://localhost:8000")
    p.add_argument("--dataset", default="openai/gsm8k")
    p.add_argument("--output-dir", default="pair-grpo-vllm")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    a = p.parse_args()

    import torch
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl.generation.vllm_generation import VLLMGeneration

    from pairht_trl import PairGRPOConfig, PairGRPOTrainer
    from pairht_trl.generation import snap_token_ids_from_tokenizer
    from pairht_vllm import VLLMTwoPhase

    if not torch.cuda.is_available():
        raise SystemExit("this recipe needs a GPU (vLLM); on CPU run examples/02_*.py instead")

    tok = AutoTokenizer.from_pretrained(a.model)
    data = load_dataset(a.dataset, "main", split="train")
    data = data.map(lambda ex: {"prompt": [{"role": "user", "content": ex["question"]}],
                                "answer": ex["answer"].split("####")[-1].strip()})

    def reward(prompts, completions, answer, **kwargs):
        # placeholder verifier: exact final-number match; use pairht_trl.verifiers for math
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(t.strip().split()[-1:] == [ans]) if t.strip() else 0.0
                for t, ans in zip(texts, answer)]

    cfg = PairGRPOConfig(
        output_dir=a.output_dir,
        mode="exact",
        tau=256,
        snap_window=32,
        budget_ratio=0.5,
        pi_min=0.08,
        design="bernoulli",
        num_generations=16,
        per_device_train_batch_size=16,
        gradient_accumulation_steps=8,
        steps_per_generation=8,
        max_completion_length=4096,
        learning_rate=1e-6,
        lr_scheduler_type="cosine",
        warmup_ratio=0.03,
        bf16=True,
        logging_steps=1,
        report_to="none",
    )
    trainer = PairGRPOTrainer(model=a.model, reward_funcs=reward, args=cfg, train_dataset=data,
                              processing_class=tok)

    # TRL's engine wrapper: builds vllm.LLM (colocate) or a VLLMClient (server) and syncs weights.
    vgen = VLLMGeneration(
        model=trainer.model,
        accelerator=trainer.accelerator,
        processing_class=tok,
        mode=a.mode,
        server_base_url=a.server_url if a.mode == "server" else None,
        gpu_memory_utilization=a.gpu_memory_utilization,
        max_model_length=8192,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_completion_length=cfg.max_completion_length,
    )
    # Swap the two-phase backend: same interface as the transformers one the trainer built.
    trainer.generation_backend = VLLMTwoPhase.from_trl(
        vgen,
        tau=cfg.tau,
        snap_window=cfg.snap_window,
        feature_window=cfg.head_feature_window,
        eos_token_ids=sorted({tok.eos_token_id, *trainer.eos_token_ids}),
        pad_token_id=tok.pad_token_id,
        snap_token_ids=snap_token_ids_from_tokenizer(tok),
        max_completion_length=cfg.max_completion_length,
    )
    trainer.train()
    backend = trainer.generation_backend
    print("vLLM requests and tokens:", backend.stats)


if __name__ == "__main__":
    main()
