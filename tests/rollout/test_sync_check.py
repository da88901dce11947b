"""pairht.rollout.sync_check: the policy side of the engine-policy comparison, and its rules."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pairht.rollout.sync_check import (
    check_logprob_gap,
    logprob_gap,
    logprob_tolerance,
    policy_token_logprobs,
)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_policy_logprobs_equal_a_token_by_token_softmax(hf_model, temperature):
    prompt, completion = [5, 9, 12], [7, 3, 1]
    lp, scale = policy_token_logprobs(hf_model, prompt, completion, temperature=temperature)
    expected, zmax = [], 0.0
    with torch.no_grad():
        for t, tok in enumerate(completion):  # one forward per prefix, no padding, float64
            ids = torch.tensor([prompt + completion[:t]])
            z = hf_model(input_ids=ids).logits[0, -1].double() / temperature
            expected.append(float(torch.log_softmax(z, -1)[tok]))
            zmax = max(zmax, float(z.abs().max()))
    # float32 forwards of the same positions in different batch shapes: rounding only.
    np.testing.assert_allclose(lp, expected, rtol=0, atol=1e-5)
    assert scale == pytest.approx(zmax, rel=1e-5)


def test_tolerance_is_64_ulps_of_the_coarsest_dtype_times_the_logit_scale():
    assert logprob_tolerance(torch.float32) == 64 * 2.0**-23
    assert logprob_tolerance(torch.float64, "float32", logit_scale=10.0) == 64 * 2.0**-23 * 10
    assert logprob_tolerance(torch.float32, torch.bfloat16, logit_scale=0.5) == 64 * 2.0**-7
    assert logprob_tolerance("torch.float16") == 64 * 2.0**-10


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: logprob_tolerance(), "at least one dtype"),
        (lambda: logprob_tolerance(torch.int64), "floating dtypes"),
        (lambda: logprob_tolerance("float99"), "torch dtype or its name"),
        (lambda: logprob_tolerance(torch.float32, logit_scale=-1.0), "logit_scale must be >= 0"),
        (lambda: logprob_gap([-1.0], [-1.0, -2.0]), "equal-length non-empty"),
        (lambda: logprob_gap([], []), "equal-length non-empty"),
        (lambda: logprob_gap([float("nan")], [-1.0]), "must be finite"),
    ],
)
def test_bad_inputs_name_the_rule(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_policy_logprobs_refuse_empty_sequences_and_bad_temperature(hf_model):
    with pytest.raises(ValueError, match="must be non-empty"):
        policy_token_logprobs(hf_model, [5], [])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        policy_token_logprobs(hf_model, [5], [6], temperature=0.0)


def test_gap_beyond_tolerance_warns_and_within_does_not():
    assert logprob_gap([-1.0, -2.5], [-1.25, -2.0]) == 0.5
    with pytest.warns(RuntimeWarning, match="stale weights"):
        assert not check_logprob_gap(0.5, 0.1, engine="vLLM")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_logprob_gap(0.1, 0.1, engine="vLLM")
