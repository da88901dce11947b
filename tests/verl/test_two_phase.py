"""Two-phase generation through a verl server manager, faked by the project's transformers
two-phase backend (pairht.rollout.TransformersTwoPhase on a tiny random Llama): greedy two-phase
equals greedy single-phase, the plan's pi and joint travel with each candidate, and phase 2
reuses each candidate's prefix cache through its sticky request id."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from verl_required import require_verl_for_tests

require_verl_for_tests()

import torch  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402
from verl_batch import data_proto, per_row  # noqa: E402

import pairht  # noqa: E402
from pairht.rollout.tiny_model import tiny_llama  # noqa: E402
from pairht.rollout.transformers_backend import TransformersTwoPhase  # noqa: E402
from pairht.verl.advantage import pair_advantage  # noqa: E402
from pairht.verl.config import PairVerlConfig  # noqa: E402
from pairht.verl.rows import FIELDS, group_rows  # noqa: E402
from pairht.verl.two_phase import two_phase_group  # noqa: E402

pytestmark = pytest.mark.verl

EOS, PAD, LENGTH = 1, 0, 12


class FakeServerManager:
    """verl's ``generate(request_id=, prompt_ids=, sampling_params=) -> TokenOutput``, backed by
    TransformersTwoPhase: a short request is a phase-1 prefix whose KV cache is kept under its
    request id; a later request with that id must send ``prompt + prefix`` and resumes from the
    cache; any other request decodes the whole response."""

    def __init__(self, model):
        self.model = model
        self.cached: dict[str, tuple[list[int], list[int], object]] = {}
        self.calls: list[tuple[str, int, str]] = []  # (request id, max_tokens, kind)

    def _backend(self, tau: int) -> TransformersTwoPhase:
        return TransformersTwoPhase(tau=tau, snap_window=0, eos_token_ids=[EOS],
                                    pad_token_id=PAD, max_completion_length=LENGTH,
                                    record_confidence=False)

    async def generate(self, *, request_id, prompt_ids, sampling_params, **_):
        assert sampling_params["temperature"] == 0  # the fake decodes greedily only
        max_tokens = sampling_params["max_tokens"]
        with torch.no_grad():
            if request_id in self.cached:
                prompt, prefix, result = self.cached.pop(request_id)
                assert list(prompt_ids) == prompt + prefix, "phase 2 must send prompt + prefix"
                full = self._backend(len(prefix) or 1).continue_selected(self.model, result, [0])[0]
                assert full[: len(prefix)] == prefix
                self.calls.append((request_id, max_tokens, "resumed"))
                return TokenOutput(token_ids=full[len(prefix):])
            if max_tokens < LENGTH:
                result = self._backend(max_tokens).generate_prefixes(self.model, [prompt_ids])
                prefix = list(result.prefix_ids[0])
                self.cached[request_id] = (list(prompt_ids), prefix, result)
                self.calls.append((request_id, max_tokens, "prefix"))
                return TokenOutput(token_ids=prefix)
            full = self._backend(1).generate_full(self.model, [prompt_ids])[0]
            self.calls.append((request_id, max_tokens, "full"))
            return TokenOutput(token_ids=full)


@pytest.fixture(scope="module")
def model():
    tok = SimpleNamespace(pad_token_id=PAD, eos_token_id=EOS)
    return tiny_llama(tok, vocab_size=32, hidden_size=16, num_layers=1, num_heads=2,
                      intermediate_size=32, max_positions=64, init_std=0.5, seed=3).eval()


def _run(server, prompt, g, budget_ratio, seed=0):
    cfg = PairVerlConfig(tau=4, budget_ratio=budget_ratio, pi_min=0.2)
    return asyncio.run(two_phase_group(
        server, prompt, request_ids=[f"u-{i}" for i in range(g)],
        sampling_params={"temperature": 0}, response_length=LENGTH, eos_token_ids=[EOS],
        config=cfg, rng=np.random.default_rng(seed)))


@pytest.mark.parametrize("prompt", [[5, 6, 7], [9, 3], [4, 4, 8, 2, 11]])
def test_two_phase_greedy_equals_single_phase_greedy(model, prompt):
    server = FakeServerManager(model)
    whole = asyncio.run(server.generate(request_id="single", prompt_ids=prompt,
                                        sampling_params={"temperature": 0,
                                                         "max_tokens": LENGTH})).token_ids
    plan, cands = _run(server, prompt, g=4, budget_ratio=1.0)
    assert plan.selected.all()
    for c in cands:
        assert c.response_ids == whole


def test_unselected_candidates_keep_their_prefix_and_the_plan_travels_with_each(model):
    prompt = [5, 6, 7]
    server = FakeServerManager(model)
    whole = asyncio.run(server.generate(request_id="single", prompt_ids=prompt,
                                        sampling_params={"temperature": 0,
                                                         "max_tokens": LENGTH})).token_ids
    assert len(whole) > 4 and whole[3] != EOS  # the prefix is unfinished: a real choice
    plan, cands = _run(server, prompt, g=6, budget_ratio=0.5, seed=4)
    sel = plan.selected[0]
    assert sel.any() and (~sel).any()
    for i, c in enumerate(cands):
        assert c.response_ids == (whole if sel[i] else whole[:4])
        assert c.extra_fields["pair_index"] == i
        assert c.extra_fields["pair_selected"] == bool(sel[i])
        assert c.extra_fields["pair_pi"] == plan.pi[0, i]
        assert c.extra_fields["pair_joint"] == plan.joint[0, i].tolist()
    # the rows rebuild the plan exactly
    rows = {k: [c.extra_fields[k] for c in cands] for k in FIELDS}
    rebuilt = group_rows(["u"] * 6, rows).plan
    assert np.array_equal(rebuilt.joint, plan.joint) and np.array_equal(rebuilt.pi, plan.pi)
    # and the advantage step reads them: pair-HT on the continued candidates only
    rewards = np.array([[len(c.response_ids) % 3 / 2 for c in cands]])
    data = data_proto([{"uid": "u", **c.extra_fields} for c in cands], rewards)
    got = per_row(pair_advantage(data))
    np.testing.assert_allclose(got, pairht.pair_advantages(rewards, plan.selected,
                                                           plan.joint)[0], rtol=0, atol=1e-12)


def test_phase_two_reuses_the_prefix_through_the_sticky_request_id(model):
    server = FakeServerManager(model)
    plan, _ = _run(server, [5, 6, 7], g=6, budget_ratio=0.5, seed=4)
    sel = plan.selected[0]
    prefix_calls = [(r, m) for r, m, kind in server.calls if kind == "prefix"]
    resumed = [r for r, _, kind in server.calls if kind == "resumed"]
    assert prefix_calls == [(f"u-{i}", 4) for i in range(6)]
    assert resumed == [f"u-{i}" for i in range(6) if sel[i]]  # same ids, cache hit each
    assert not any(kind == "full" for _, _, kind in server.calls)
