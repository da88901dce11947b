"""The demo's GRPO arm decodes as TRL's GRPOTrainer does, with finished rows leaving the batch."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")
from pairht.demo import toy
from pairht.demo.chain import CHAIN_TASK
from pairht.demo.demo import trainer_kwargs
from pairht.demo.grpo import RowDropGRPOTrainer
from trl import GRPOConfig, GRPOTrainer


def _trainer(cls, tmp_path, model, tok, **generation):
    kw = trainer_kwargs(tmp_path / cls.__name__, steps=1, seed=0, num_generations=4,
                      prompts_per_step=2, learning_rate=1e-4,
                      max_completion_length=CHAIN_TASK.max_new_tokens)
    return cls(model=model, reward_funcs=CHAIN_TASK.reward,
               args=GRPOConfig(**kw, generation_kwargs=generation or None),
               train_dataset=CHAIN_TASK.dataset(8, rng=0, split="train"), processing_class=tok)


def _prompts(tok, n=8):
    rows = CHAIN_TASK.dataset(n, rng=1, split="train")
    return [tok(r["prompt"])["input_ids"] for r in rows]


def test_greedy_completions_are_grpo_trainers_token_for_token(tmp_path):
    tok = toy.make_tokenizer(CHAIN_TASK)
    model = toy.make_model(0, toy.ToyModelConfig(max_positions=96), CHAIN_TASK).eval()
    with torch.no_grad():  # a likelier EOS: greedy rows of this random policy end at 1-66 tokens
        model.lm_head.weight[tok.eos_token_id] *= 3.0
    prompts = _prompts(tok)
    ours = _trainer(RowDropGRPOTrainer, tmp_path, model, tok, do_sample=False)
    trl = _trainer(GRPOTrainer, tmp_path, model, tok, do_sample=False)
    a, lp_a = ours._generate_single_turn(prompts, None, {}, 4)
    b, lp_b = trl._generate_single_turn(prompts, None, {}, 4)
    assert a == b and lp_a is None and lp_b is None
    assert len({len(c) for c in a}) >= 3  # rows of different lengths: the drop is exercised


def test_sampled_completions_stop_at_eos_or_the_length_limit(tmp_path):
    tok = toy.make_tokenizer(CHAIN_TASK)
    model = toy.make_model(0, toy.ToyModelConfig(max_positions=96), CHAIN_TASK).eval()
    trainer = _trainer(RowDropGRPOTrainer, tmp_path, model, tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        out, _ = trainer._generate_single_turn(_prompts(tok), None, {}, 4)
    eos = set(trainer.eos_token_ids)
    for c in out:
        assert 1 <= len(c) <= CHAIN_TASK.max_new_tokens
        assert not eos & set(c[:-1])
        assert c[-1] in eos or len(c) == CHAIN_TASK.max_new_tokens
