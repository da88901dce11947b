"""Audit mode: a real (tiny) policy's candidate population, in the audit format, auditable."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from pair_helpers import RecordingReward, make_trainer

from pairht.audit.population import load_population
from pairht.trl.audit_mode import AuditCallback, collect_population, default_score_block
from pairht.trl.config import RewardFailureWarning, RewardFunctionError

G = 4


def test_population_records_full_candidates_and_autograd_scores(tmp_path):
    reward = RecordingReward()
    trainer = make_trainer(tmp_path, reward=reward, double=True, num_generations=G,
                           per_device_train_batch_size=G * 2)
    examples = [dict(trainer.train_dataset[i]) for i in range(3)]
    path = tmp_path / "pop.npz"
    collect_population(trainer, examples, path)
    pop = load_population(path)
    assert (pop.n_prompts, pop.group_size) == (3, G)
    model = trainer.model
    name = default_score_block(model)
    assert name == "model.norm.weight" and pop.meta["score_block"] == name
    assert pop.scores.shape == (3, G, model.config.hidden_size)
    # Every candidate was completed and scored by the reward function, once.
    assert len(reward.seen) == 3 * G
    want = np.array([float(sum(ids) % 5) / 4.0 for ids in reward.seen]).reshape(3, G)
    np.testing.assert_array_equal(pop.rewards, want)
    lengths = np.array([len(ids) for ids in reward.seen]).reshape(3, G)
    np.testing.assert_array_equal(pop.costs, np.maximum(lengths - pop.prefix_len, 1))
    assert np.all(pop.prefix_len >= 1) and np.all((pop.p_hat >= 0) & (pop.p_hat <= 1))

    # Scores are the gradient of log pi(o | q) w.r.t. the block: check one candidate's score
    # against a central finite difference of the sequence log-prob along a random direction
    # (float64: truncation error O(eps^2) ~ 1e-10 relative).
    tok_prompt = trainer.processing_class(examples[1]["prompt"])["input_ids"]
    completion = reward.seen[G + 2]
    block = dict(model.named_parameters())[name]
    ids = torch.tensor([tok_prompt + completion])
    v = torch.randn(block.shape, generator=torch.Generator().manual_seed(0), dtype=block.dtype)

    def logp(eps: float) -> float:
        with torch.no_grad():
            old = block.detach().clone()
            block.add_(eps * v)
            logits = model(input_ids=ids).logits[0, len(tok_prompt) - 1 : -1]
            block.copy_(old)
            lp = torch.log_softmax(logits.double(), -1)
            return float(lp.gather(-1, torch.tensor(completion)[:, None]).sum())

    eps = 1e-5
    fd = (logp(eps) - logp(-eps)) / (2 * eps)
    np.testing.assert_allclose(pop.scores[1, 2] @ v.double().numpy(), fd, rtol=1e-7)


def test_callback_writes_populations_that_pairht_audit_reads(tmp_path):
    cb = AuditCallback(steps=[1], n_prompts=2, output_dir=str(tmp_path / "audit"))
    trainer = make_trainer(tmp_path, num_generations=G, per_device_train_batch_size=2 * G,
                           max_steps=1, callbacks=[cb])
    assert cb.trainer is trainer
    trainer.train()
    assert len(cb.written) == 1
    # The callback audited PAIR against small-group GRPO on the population it wrote, over
    # the prefix options the trainer can switch to (the narrower width as width "subset").
    from pairht.audit import load_population, width_advice
    from pairht.trl.config import switchable_rules

    (step, adv), = cb.advice
    assert step == 1
    rules = switchable_rules(trainer.args.weighting)
    assert "pair_dr_narrow" in rules  # exact weights: the difference estimator's options too
    again = width_advice(load_population(cb.written[0]), trainer.args.budget_ratio,
                         pi_min=trainer.args.pi_min, seed=1, options=rules)
    assert adv == again and adv.choice in ("grpo_small", *rules)
    assert adv.choice == "grpo_small" or adv.ratio < 1.0  # PAIR only when better (confidently)
    assert 0.0 < adv.generated < 1.0 and 0.0 < adv.group_size < G
    out = tmp_path / "report"
    subprocess.run(
        [sys.executable, "-m", "pairht.cli", "audit", "--population", cb.written[0],
         "--draws", "0", "--out", str(out), "--no-figures", "--quiet"],
        check=True, capture_output=True, text=True,
    )
    assert (out / "audit.csv").exists()


def test_a_raising_reward_in_an_audit_names_the_example_or_is_recorded_when_zero(tmp_path):
    # the audit scores with the trainer's reward policy: "raise" names the example (the
    # prompt index), "zero" scores 0 and says so in the population, not in training's count
    def picky(prompts, completions, completion_ids, **kwargs):
        if any(p == bad for p in prompts):
            raise ValueError("unparseable")
        return [1.0] * len(prompts)

    for policy in ("raise", "zero"):
        trainer = make_trainer(tmp_path / policy, reward=picky, num_generations=G,
                               per_device_train_batch_size=G * 2, reward_failure=policy)
        examples = [dict(trainer.train_dataset[i]) for i in range(3)]
        bad = examples[2]["prompt"]
        assert bad not in (examples[0]["prompt"], examples[1]["prompt"])
        if policy == "raise":
            with pytest.raises(RewardFunctionError, match=r"'picky' raised on prompt 2 "
                                                          r"\(candidate 0 of 4, batch row 8\)"):
                collect_population(trainer, examples)
            continue
        with pytest.warns(RewardFailureWarning, match="4 completion"):
            pop = collect_population(trainer, examples)
        assert pop.meta["reward_failures"] == G
        np.testing.assert_array_equal(pop.rewards, [[1.0] * G, [1.0] * G, [0.0] * G])
        assert trainer._pair_stats["reward_failures"] == 0  # not training's failures
