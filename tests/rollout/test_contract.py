"""The generation contract (pairht.rollout.contract), checked the same way on every backend.

Each backend decodes greedily from the same float32 checkpoint; its two phases must reproduce
its own single-phase output token for token, its prefixes must end where the snap rule says on
that output, and its features must be the policy's. A new backend joins ``BACKENDS`` and passes.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pairht.rollout.contract import TwoPhaseBackend
from pairht.rollout.features import CONFIDENCE_FEATURES, prefix_features
from pairht.rollout.sync_check import logprob_tolerance, policy_token_logprobs

TAU, WINDOW, MAX_LEN = 6, 5, 24
NL = 3  # the toy vocabulary's "\n", the one snap token
BACKENDS = ["transformers", "vllm"]


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 9, (16,), generator=g)
    return [torch.randint(4, 31, (int(n),), generator=g).tolist() for n in lengths]


@pytest.fixture(params=BACKENDS)
def make_backend(request, tokenizer):
    kind = request.param
    common = dict(tau=TAU, snap_window=WINDOW, eos_token_ids=[tokenizer.eos_token_id],
                  pad_token_id=tokenizer.pad_token_id, snap_token_ids=[NL],
                  max_completion_length=MAX_LEN)
    if kind == "transformers":
        from pairht.rollout.transformers_backend import TransformersTwoPhase

        return lambda: TransformersTwoPhase(**common)  # generation_config=None: greedy
    engine = request.getfixturevalue("vllm_engine")
    from pairht.vllm import VLLMTwoPhase

    return lambda: VLLMTwoPhase(engine, temperature=0.0, **common)


def _snap_reference(row, eos):
    """The snap rule (pairht.rollout.snapping.snap_cut) as a plain scan of one output."""
    for t, tok in enumerate(row):
        if tok in eos:
            return t + 1
        if t >= TAU - 1 and tok == NL:
            return t + 1
        if t + 1 == TAU + WINDOW:
            return t + 1
    return len(row)


def test_backend_implements_the_protocol(make_backend):
    backend = make_backend()
    assert isinstance(backend, TwoPhaseBackend)
    assert (backend.tau, backend.max_completion_length) == (TAU, MAX_LEN)


@pytest.mark.parametrize(
    "selection", ["all", "indices", "none"], ids=["mask-all", "indices-reversed", "nothing"]
)
def test_greedy_two_phase_equals_single_phase(make_backend, hf_model, prompts, selection):
    backend = make_backend()
    full = backend.generate_full(hf_model, prompts)
    prefix = backend.generate_prefixes(hf_model, prompts)
    rows = len(prompts)
    if selection == "all":
        selected, order = np.ones(rows, dtype=bool), list(range(rows))
    elif selection == "indices":
        order = list(range(rows - 1, -1, -3))
        selected = order
    else:
        selected, order = np.zeros(rows, dtype=bool), []
    out = backend.continue_selected(hf_model, prefix, selected)
    assert out == [full[i] for i in order]


def test_prefix_ends_where_the_snap_rule_cuts_the_single_phase_output(
    make_backend, hf_model, prompts, tokenizer
):
    backend = make_backend()
    eos = {tokenizer.eos_token_id}
    full = backend.generate_full(hf_model, prompts)
    prefix = backend.generate_prefixes(hf_model, prompts)
    cuts = [_snap_reference(row, eos) for row in full]
    assert prefix.prefix_ids == [row[:n] for row, n in zip(full, cuts)]
    done = prefix.prefix_done.numpy()
    expected_done = [bool(p) and (p[-1] in eos or len(p) >= MAX_LEN) for p in prefix.prefix_ids]
    assert done.tolist() == expected_done
    np.testing.assert_array_equal(prefix.prefix_lengths, cuts)
    # The fixture exercises every branch of the rule: a finished prefix, a snap at a newline
    # after tau, and a cut at tau + window with no newline in the window.
    assert any(expected_done)
    assert any(n < TAU + WINDOW and row[n - 1] == NL for row, n in zip(full, cuts))
    assert any(n == TAU + WINDOW and row[n - 1] != NL for row, n in zip(full, cuts))


def test_features_are_the_policy_forward_on_prompt_plus_prefix(make_backend, hf_model, prompts):
    backend = make_backend()
    prefix = backend.generate_prefixes(hf_model, prompts)
    expected = prefix_features(hf_model, prompts, prefix.prefix_ids, window=16, pad_token_id=0)
    assert prefix.features.dtype == torch.float32
    # float32 forward passes of the same positions, batched differently: rounding only.
    torch.testing.assert_close(prefix.features, expected, rtol=1e-5, atol=1e-5)


def test_features_of_groups_sharing_a_prompt_are_the_full_forward(
    make_backend, hf_model, prompts
):
    # GRPO rows: each prompt repeated G times (the vLLM backend's features then compute each
    # prompt once; the transformers backend reads its own cache): both must equal the full
    # forward on prompt + prefix of every row.
    backend = make_backend()
    grouped = [p for p in prompts[:4] for _ in range(4)]
    prefix = backend.generate_prefixes(hf_model, grouped)
    expected = prefix_features(hf_model, grouped, prefix.prefix_ids, window=16, pad_token_id=0,
                               share_prompts=False)
    torch.testing.assert_close(prefix.features, expected, rtol=1e-5, atol=1e-5)


def test_confidence_is_the_sampled_prefix_tokens_log_probabilities(
    make_backend, hf_model, prompts
):
    # Greedy decoding: the sampler's distribution is the policy's (temperature 1, no other
    # processor), so the confidence features are min and mean of the policy's log-probabilities
    # of the prefix tokens, recomputed here by one forward per row.
    backend = make_backend()
    prefix = backend.generate_prefixes(hf_model, prompts)
    conf = prefix.confidence
    assert conf is not None and conf.dtype == torch.float32
    assert conf.shape == (len(prompts), len(CONFIDENCE_FEATURES))
    expected = torch.zeros_like(conf)
    scale = 0.0
    for i, (p, ids) in enumerate(zip(prompts, prefix.prefix_ids)):
        lp, s = policy_token_logprobs(hf_model, p, ids)
        expected[i] = torch.tensor([lp.min(), lp.mean()], dtype=torch.float32)
        scale = max(scale, s)
    assert (conf <= 0).all() and (conf[:, 0] <= conf[:, 1] + 1e-6).all()
    # float32 on both sides (the engine's kernels differ from transformers'): rounding only
    tol = logprob_tolerance(torch.float32, logit_scale=scale)
    torch.testing.assert_close(conf, expected, rtol=0.0, atol=tol)
    assert float(conf[:, 0].min()) < -1e-3  # the check is not vacuous: some token was uncertain
    hidden = prefix.features.shape[1]
    torch.testing.assert_close(prefix.head_inputs()[:, :hidden], prefix.features)
    torch.testing.assert_close(prefix.head_inputs()[:, hidden:], conf)


def test_a_prefix_result_is_continued_once(make_backend, hf_model, prompts):
    backend = make_backend()
    prefix = backend.generate_prefixes(hf_model, prompts[:3])
    backend.continue_selected(hf_model, prefix, [0])
    with pytest.raises(ValueError, match="already consumed"):
        backend.continue_selected(hf_model, prefix, [1])


@pytest.mark.parametrize(
    ("selected", "match"),
    [
        ([True, False], r"mask must have shape \(3,\)"),
        ([0, 3], r"must lie in \[0, 3\)"),
        ([1, 1], "must be distinct"),
        ([0.5], "bool mask of shape"),
    ],
)
def test_a_bad_selection_is_refused_by_name(make_backend, hf_model, prompts, selected, match):
    backend = make_backend()
    prefix = backend.generate_prefixes(hf_model, prompts[:3])
    with pytest.raises(ValueError, match=match):
        backend.continue_selected(hf_model, prefix, selected)


def test_empty_prompts_are_refused(make_backend, hf_model):
    backend = make_backend()
    with pytest.raises(ValueError, match="at least one prompt"):
        backend.generate_prefixes(hf_model, [])
    # generate_full of no prompts is no completions (the trainer's width="whole" asks each
    # process for the rows it drew, possibly none)
    assert backend.generate_full(hf_model, []) == []
    with pytest.raises(ValueError, match=r"prompt_ids\[1\] is empty"):
        backend.generate_prefixes(hf_model, [[5], []])


def test_sync_check_reports_the_engine_policy_gap_after_phase_one(
    make_backend, hf_model, prompts
):
    backend = make_backend()
    assert backend.last_logprob_gap is None  # no phase 1 yet, no check
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the backend's own check must pass
        backend.generate_prefixes(hf_model, prompts)
    gap = backend.last_logprob_gap
    assert isinstance(gap, float)
    # Both sides float32 here: the gap is float32 rounding (zero for the policy itself), within
    # the tolerance at the probed logits' scale (the toy logits stay below 30).
    assert 0.0 <= gap <= logprob_tolerance(torch.float32, logit_scale=30.0)


def test_transformers_backend_without_confidence_samples_the_same_prefixes(
    tokenizer, hf_model, prompts
):
    """record_confidence=False (the trainer's head_confidence=False) drops the recorder, which
    only reads the scores: the same sampled prefixes and features, and no confidence."""
    from transformers import GenerationConfig

    from pairht.rollout.transformers_backend import TransformersTwoPhase

    common = dict(tau=TAU, snap_window=WINDOW, eos_token_ids=[tokenizer.eos_token_id],
                  pad_token_id=tokenizer.pad_token_id, snap_token_ids=[NL],
                  max_completion_length=MAX_LEN,
                  generation_config=GenerationConfig(do_sample=True, temperature=1.0))
    out = {}
    for record in (True, False):
        torch.manual_seed(7)
        out[record] = TransformersTwoPhase(**common, record_confidence=record).generate_prefixes(
            hf_model, prompts)
    assert out[True].confidence is not None and out[False].confidence is None
    assert out[True].prefix_ids == out[False].prefix_ids
    assert len({tuple(r) for r in out[True].prefix_ids}) > 1  # sampled, not all the same
    torch.testing.assert_close(out[True].features, out[False].features)


class _State:
    def __init__(self, consumed: bool = False) -> None:
        self.consumed = consumed


def _prefix(state, done):
    from pairht.rollout.contract import PrefixResult

    return PrefixResult(prefix_ids=[[5]] * len(done), prefix_done=torch.tensor(done),
                        features=torch.zeros(len(done), 2), state=state)


@pytest.mark.parametrize("selected, rows, go", [
    ([True, False, True, True], [0, 2, 3], [0, 3]),
    ([3, 1, 2], [3, 1, 2], [3, 1]),
    (np.array([], dtype=np.int64), [], []),
])
def test_resume_rows_splits_the_selection_into_done_and_to_decode(selected, rows, go):
    from pairht.rollout.contract import resume_rows

    done = [False, False, True, False]
    state = _State()
    got_state, got_rows, got_done, got_go = resume_rows(_prefix(state, done), selected,
                                                        _State, "ToyBackend")
    assert got_state is state and got_rows == rows and got_go == go
    assert got_done.dtype == bool and got_done.tolist() == done


def test_resume_rows_refuses_another_backends_or_a_consumed_state():
    from pairht.rollout.contract import resume_rows

    with pytest.raises(ValueError, match=r"ToyBackend\.generate_prefixes; its state is a dict"):
        resume_rows(_prefix({}, [False, False]), [0], _State, "ToyBackend")
    with pytest.raises(ValueError, match="already consumed"):
        resume_rows(_prefix(_State(consumed=True), [False, False]), [0], _State, "ToyBackend")
