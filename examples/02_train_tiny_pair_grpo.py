"""Train a tiny policy with PAIR on CPU in about a minute (TRL + the built-in toy task).

    python examples/02_train_tiny_pair_grpo.py

The toy task (``pairht.demo.toy``): prompts ``repeat c 5 :`` ask for a declared count and five
numbered lines; the reward is 1 for exactly the right lines. A randomly initialised two-layer
Llama is warm-started by supervised learning on an imperfect demonstrator (success rate about
0.4), then trained with ``PairGRPOTrainer`` in exact mode: G prefixes of ~tau tokens snapped to
a newline, prefix heads, continuation probabilities at half the full-group suffix budget, a
Bernoulli draw, pair-HT advantages on the completed candidates only. For the side-by-side with
plain GRPO, run ``pairht demo`` (``pairht.demo.demo``).

Needs the ``trl`` extra (torch, transformers, trl, accelerate).
"""

from __future__ import annotations

import tempfile

import numpy as np
import torch

from pairht.demo import toy
from pairht.trl import PairGRPOConfig, PairGRPOTrainer

torch.set_num_threads(1)  # tiny matmuls: one thread is fastest and steady on a busy machine
SEED, STEPS, G = 0, 20, 8

tokenizer = toy.make_tokenizer()
model, warm = toy.warm_started_model(SEED, progress=True)
before = toy.success_rate(model, tokenizer, split="eval", seed=1)
print(f"warm-up: {warm.steps} steps in {warm.seconds:.0f}s; held-out success {before:.3f}")

config = PairGRPOConfig(
    output_dir=tempfile.mkdtemp(prefix="pairht-example-"),
    mode="exact",  # unclipped, unstandardised, one epoch: the update is the pair-HT estimator
    tau=6,  # prefix checkpoint (tokens), snapped forward to the next newline ...
    snap_window=8,  # ... within 8 tokens
    budget_ratio=0.5,  # expected suffix tokens = half of the full group's predicted cost
    pi_min=0.08,
    design="bernoulli",
    num_generations=G,
    per_device_train_batch_size=8 * G,  # 8 prompts x G candidates per step
    max_completion_length=toy.response_length(toy.MAX_COUNT) + 8,
    max_steps=STEPS,
    learning_rate=3e-4,
    lr_scheduler_type="constant",
    temperature=1.0,
    seed=SEED,
    use_cpu=True,
    logging_steps=5,
    save_strategy="no",
    report_to="none",
)
trainer = PairGRPOTrainer(
    model=model,
    reward_funcs=toy.toy_reward,
    args=config,
    train_dataset=toy.make_dataset(STEPS * 8, rng=SEED),
    processing_class=tokenizer,
)
trainer.train()

after = toy.success_rate(trainer.model, tokenizer, split="eval", seed=1)
draw = trainer.last_draw  # the last step's logged design: pi, J, rho, p_hat, c_hat, ...
print(f"\nheld-out success (sampled, T=1): {before:.3f} -> {after:.3f}")
print("last group: pi =", np.round(draw.pi[0], 2), " J =", draw.mask[0].astype(int))
print("            p_hat =", np.round(draw.p_hat[0], 2), " c_hat =", np.round(draw.c_hat[0], 1))
print("            prefix tokens =", draw.prefix_len[0], " suffix tokens =", draw.suffix_len[0])
