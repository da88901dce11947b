"""Shared builders for the PairGRPOTrainer tests: a tiny random-init Llama on the toy
vocabulary (no hub download) and a deterministic reward with contrast."""

from __future__ import annotations

import numpy as np
import torch

from pairht.demo import toy
from pairht.trl import PairGRPOConfig, PairGRPOTrainer

TINY = toy.ToyModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)


class RecordingReward:
    """Reward ``(sum(ids) mod 5) / 4`` of the completion ids (real-valued, varied), recording
    every completion it was shown so tests can check who reached the verifier."""

    __name__ = "recording_reward"

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        self.seen.extend(list(map(list, completion_ids)))
        return [float(sum(ids) % 5) / 4.0 for ids in completion_ids]


def make_config(tmp_path, **overrides) -> PairGRPOConfig:
    kw = dict(
        output_dir=str(tmp_path),
        num_generations=6,
        per_device_train_batch_size=12,
        gradient_accumulation_steps=1,
        max_completion_length=12,
        tau=3,
        snap_window=2,
        budget_ratio=0.5,
        pi_min=0.1,
        head_width=16,
        head_feature_window=4,
        head_steps_per_update=4,
        head_batch_size=32,
        learning_rate=1e-2,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    kw.update(overrides)
    # These tests exercise PAIR's prefix path; the default (width="auto", which audits and
    # switches widths) has its own tests (test_auto_width.py). A test naming another rule,
    # design or weighting gets "prefixes" from the config's own default.
    if "width" not in overrides and kw.get("allocator", "pair") == "pair" \
            and kw.get("design") is None and kw.get("weighting", "exact") == "exact" \
            and not kw.get("anchor_pair", False):
        kw["width"] = "prefixes"
    return PairGRPOConfig(**kw)


def make_trainer(tmp_path, *, reward=None, double=False, n_prompts=8, seed=0, callbacks=None,
                 **overrides):
    tok = toy.make_tokenizer()
    model = toy.make_model(seed=seed, config=TINY)
    if double:
        model = model.double()
    args = make_config(tmp_path, **overrides)
    trainer = PairGRPOTrainer(
        model=model,
        reward_funcs=[reward or RecordingReward()],
        args=args,
        train_dataset=toy.make_dataset(n_prompts, rng=seed),
        processing_class=tok,
        callbacks=callbacks,
    )
    return trainer


def use_float64_logprobs(trainer) -> None:
    """Replace TRL's fused LM-head log-probabilities (a float32 kernel by design, even for a
    float64 model) by a plain float64 ``log_softmax`` of the logits, for the loss and for the
    reference scores alike, so that exact identities can be checked to float64 rounding. PAIR's
    part of the loss (advantages, masks, normaliser) is untouched."""

    def logps(model, input_ids, attention_mask, logits_to_keep, batch_size=None,
              compute_entropy=False, compute_aux_loss=False, **_):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        logits = logits[:, -logits_to_keep - 1 : -1] / trainer.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        target = input_ids[:, -logits_to_keep:]
        lp = logp_all.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        ent = -(logp_all.exp() * logp_all).sum(-1).detach() if compute_entropy else None
        return lp, ent, None

    trainer._get_per_token_logps_and_entropies = logps


def generation_batch(trainer, n_prompts: int) -> list[dict]:
    """The rows a training dataloader hands to ``_prepare_inputs``: G contiguous copies."""
    ds = trainer.train_dataset
    g = trainer.args.num_generations
    return [dict(ds[i]) for i in range(n_prompts) for _ in range(g)]


def scored_batch(trainer, n_prompts: int, *, seed: int = 0) -> dict:
    """One generation batch through the trainer's own generation + scoring, train mode."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    torch.manual_seed(seed)
    return trainer._generate_and_score_completions(generation_batch(trainer, n_prompts))


def loss_gradient(trainer, inputs: dict, block: torch.nn.Parameter) -> np.ndarray:
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, inputs)
    (grad,) = torch.autograd.grad(loss, block)
    return grad.detach().double().cpu().numpy().reshape(-1)


def sequence_scores(trainer, inputs: dict, block: torch.nn.Parameter, rows) -> np.ndarray:
    """Per-row score vectors s_i = d log pi(o_i | q) / d block by autograd, on the same padded
    tensors the loss uses (so positions and masks agree exactly)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, attn, inputs["completion_ids"].size(1)
    )
    seq = (logps * inputs["completion_mask"]).sum(-1)
    out = np.zeros((ids.shape[0], block.numel()))
    for i in rows:
        (g,) = torch.autograd.grad(seq[i], block, retain_graph=True)
        out[i] = g.detach().double().cpu().numpy().reshape(-1)
    return out
