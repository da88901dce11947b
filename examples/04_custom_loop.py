"""PAIR in a plain torch loop: the core step + the transformers two-phase backend, no TRL.

    python examples/04_custom_loop.py              # PAIRHT_EXAMPLE_STEPS=20 by default
    PAIRHT_EXAMPLE_STEPS=3 PAIRHT_EXAMPLE_WARMUP=40 python examples/04_custom_loop.py

The toy task of ``pairht.demo.toy`` ("repeat c 5 :" -> "5 \\n c 1 \\n ... c 5 \\n"), a tiny Llama
and its tokenizer built in memory. One step, as data:

    prompts -> backend.generate_prefixes (phase 1, tau tokens, snapped)
            -> predictions p_hat (per-prompt running success mean), c_hat (running mean
               remaining length)                                        [no heads needed]
            -> pairht.step.plan_step -> pi, selected, exact joint (logged)
            -> backend.continue_selected (phase 2, KV reuse) -> toy_reward on selected rows
            -> pairht.step.estimate(plan, rewards) -> advantages -> REINFORCE-style loss.

Every prefix that already ended is complete: it is kept for free (pi = 1) and the budget
(half the unfinished candidates' predicted suffix tokens) is spent on the others.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from pairht.demo.toy import (
    make_tokenizer,
    prompt_text,
    sample_prompts,
    toy_reward,
    warm_started_model,
)
from pairht.rollout import snap_token_ids_from_tokenizer
from pairht.rollout.transformers_backend import TransformersTwoPhase
from pairht.step import estimate, plan_step

STEPS = int(os.environ.get("PAIRHT_EXAMPLE_STEPS", "20"))
WARMUP = int(os.environ.get("PAIRHT_EXAMPLE_WARMUP", "300"))
B, G, TAU, BUDGET_RATIO, LR = 4, 8, 6, 0.5, 1e-4


def sequence_logprobs(model, prompt_ids, completions, pad_id):
    """Sum of log pi(o_t | q, o_<t) over each completion's tokens, shape (rows,)."""
    rows = [p + c for p, c in zip(prompt_ids, completions)]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    resp = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (p, c) in enumerate(zip(prompt_ids, completions)):  # right padding
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attn[i, : len(p) + len(c)] = 1
        resp[i, len(p): len(p) + len(c)] = True
    logp = torch.log_softmax(model(input_ids=ids, attention_mask=attn).logits[:, :-1], -1)
    tok_logp = logp.gather(-1, ids[:, 1:, None])[..., 0]
    return (tok_logp * resp[:, 1:]).sum(-1)


def main(steps: int = STEPS, warmup: int = WARMUP, seed: int = 0,
         lr: float = LR) -> dict[str, float]:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    tok = make_tokenizer()
    model, _ = warm_started_model(seed, steps=warmup, batch_size=32)  # an imperfect policy
    backend = TransformersTwoPhase(
        tau=TAU, snap_window=4, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
        snap_token_ids=snap_token_ids_from_tokenizer(tok),
        generation_config=model.generation_config, max_completion_length=40)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    start = [p.detach().clone() for p in model.parameters()]
    n_contrast = 0  # candidates with a nonzero pair advantage (they alone move the policy)
    wins: dict[tuple[str, int], list[float]] = {}  # per-prompt success history
    mean_suffix = 10.0  # running mean of realised suffix lengths (the cost "head")
    t0, log = time.perf_counter(), {}
    for step in range(steps):
        items = sample_prompts(B, rng)
        prompt_ids = [tok(prompt_text(*it))["input_ids"] for it in items for _ in range(G)]
        model.eval()
        with torch.no_grad():
            prefix = backend.generate_prefixes(model, prompt_ids)            # phase 1
            # --- the PAIR step: ~10 lines ------------------------------------------------
            done = prefix.prefix_done.numpy().reshape(B, G)
            p_hat = np.repeat([[np.mean(wins.get(it, [0.5]))] for it in items], G, axis=1)
            c_hat = np.full((B, G), mean_suffix)
            plan = plan_step(p_hat, c_hat, done, budget_ratio=BUDGET_RATIO, rng=rng)
            selected = np.flatnonzero(plan.selected.reshape(-1)).tolist()
            finished = backend.continue_selected(model, prefix, selected)  # phase 2
        texts = tok.batch_decode(finished, skip_special_tokens=True)
        rewards = np.full(B * G, np.nan)
        rewards[selected] = toy_reward([tok.decode(prompt_ids[i]) for i in selected], texts)
        rewards = rewards.reshape(B, G)
        adv = estimate(plan, rewards).advantages                            # (B, G)
        # -------------------------------------------------------------------------------
        model.train()
        logp = sequence_logprobs(model, [prompt_ids[i] for i in selected], finished,
                                 tok.pad_token_id)
        a = torch.as_tensor(adv.reshape(-1)[selected], dtype=logp.dtype)
        n_contrast += int((a != 0).sum())
        loss = -(a * logp).sum() / (B * G)                          # REINFORCE-style
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        for (it, r) in zip([items[i // G] for i in selected], rewards.reshape(-1)[selected]):
            wins.setdefault(it, []).append(float(r))
        suffix = [len(f) - len(prefix.prefix_ids[i]) for i, f in zip(selected, finished)]
        live = [s for s, i in zip(suffix, selected) if not done.reshape(-1)[i]]
        if live:
            mean_suffix = 0.8 * mean_suffix + 0.2 * float(np.mean(live))
        log = {"step": step, "reward": float(np.nanmean(rewards)),
               "selected": float(plan.selected.mean()),
               "suffix_fraction": plan.metrics["predicted_suffix_fraction"],
               "unspent_budget": plan.metrics["unspent_budget"], "loss": float(loss.detach())}
        print({k: round(v, 3) for k, v in log.items()})
    log["seconds"] = time.perf_counter() - t0
    log["nonzero_advantages"] = float(n_contrast)
    log["update_norm"] = float(sum(((p.detach() - q) ** 2).sum()
                                   for p, q in zip(model.parameters(), start)) ** 0.5)
    return log


if __name__ == "__main__":
    main()
