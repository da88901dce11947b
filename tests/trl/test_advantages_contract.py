"""``pair_advantages_torch`` keeps the contract of the numpy core ``pairht.pair_advantages``.

Issue 11, item 4: it used to validate nothing (an integer dtype truncated the weights, a NaN
reward at a completed candidate was read as 0, inf rewards and asymmetric or NaN weights
passed, float16 overflowed, a list raised AttributeError). Each test below failed on that code.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import pairht
from pairht.designs import make_design
from pairht.testing.strategies import inclusion_probabilities
from pairht.torch.advantages import design_edge_weights, pair_advantages_torch

# One group of the reproducer, with Bernoulli joints rho_ij = pi_i pi_j.
PI = np.array([0.9, 0.6, 0.5, 0.7])
MASK = np.array([[True, True, False, True]])
JOINT = make_design("bernoulli", PI).joint()[None]
REWARDS = [[1, 0, 1, 1]]


def _core(rewards, weighting="exact", w_max=None):
    return pairht.pair_advantages(rewards, MASK, JOINT, weighting=weighting, w_max=w_max)


@st.composite
def _groups(draw):
    """(rewards with NaN at unselected candidates, mask, joint, weighting, w_max), B groups."""
    b = draw(st.integers(1, 3))
    g = draw(st.integers(2, 7))
    kind = draw(st.sampled_from(["bernoulli", "conditional_poisson"]))
    pis = [draw(inclusion_probabilities(g, g, integer_sum=kind != "bernoulli",
                                        allow_zero=False)) for _ in range(b)]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    designs = [make_design(kind, p) for p in pis]
    joint = np.stack([d.joint() for d in designs])
    mask = np.stack([d.sample(rng) for d in designs])
    rewards = draw(st.sampled_from(["binary", "real"]))
    r = (rng.integers(0, 2, (b, g)).astype(float) if rewards == "binary"
         else rng.normal(scale=draw(st.sampled_from([1e-3, 1.0, 1e3])), size=(b, g)))
    r = np.where(mask, r, np.nan)
    weighting, w_max = draw(st.sampled_from(
        [("exact", None), ("clipped", 5.0), ("hajek", None), ("unweighted", None)]))
    return r, mask, joint, weighting, w_max


@given(_groups())
def test_torch_advantages_equal_numpy_core_to_1e12_in_float64(case):
    r, mask, joint, weighting, w_max = case
    want = pairht.pair_advantages(r, mask, joint, weighting=weighting, w_max=w_max)
    W = design_edge_weights(mask, joint, weighting=weighting, w_max=w_max)
    for m in (None, mask):
        got = pair_advantages_torch(torch.as_tensor(r), W, mask=m, dtype=torch.float64)
        assert got.dtype == torch.float64
        # float64 sums of at most G = 7 terms: rounding is ~1e-16 relative
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12,
                                   atol=1e-12 * max(1.0, float(np.abs(want).max())))


def test_integer_rewards_are_read_exactly():
    W = design_edge_weights(MASK, JOINT)
    want = _core(np.asarray(REWARDS, float))
    got = pair_advantages_torch(torch.tensor(REWARDS), W, dtype=torch.float64)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float16, torch.bfloat16])
def test_integer_or_half_accumulation_dtype_is_refused(dtype):
    # int64 truncated every weight to 0 before; float16 overflowed to inf
    W = design_edge_weights(MASK, JOINT)
    with pytest.raises(TypeError, match=r"dtype must be torch.float32 or torch.float64"):
        pair_advantages_torch(torch.tensor(REWARDS), W, dtype=dtype)


def test_list_inputs_are_accepted_like_the_core():
    W = design_edge_weights(MASK, JOINT)
    got = pair_advantages_torch(REWARDS, W.tolist(), dtype=torch.float64)
    np.testing.assert_allclose(got.numpy(), _core(REWARDS), rtol=0, atol=1e-15)


def test_nan_reward_at_completed_candidate_raises_with_the_core_message():
    r = np.array([[np.nan, 0.0, 1.0, 1.0]])  # candidate 0 was completed
    with pytest.raises(ValueError) as core:
        _core(r)
    W = design_edge_weights(MASK, JOINT)
    for m in (None, MASK):
        with pytest.raises(ValueError) as ours:
            pair_advantages_torch(torch.as_tensor(r), W, mask=m)
        assert str(ours.value) == str(core.value)
    # ... while NaN at the candidate that was not completed is ignored, as in the core
    r_ok = np.array([[1.0, 0.0, np.nan, 1.0]])
    got = pair_advantages_torch(torch.as_tensor(r_ok), W, dtype=torch.float64)
    np.testing.assert_allclose(got.numpy(), _core(r_ok), rtol=0, atol=1e-15)


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_infinite_reward_at_completed_candidate_raises(bad):
    W = design_edge_weights(MASK, JOINT)
    with pytest.raises(ValueError, match=r"rewards must be finite .* rewards\[0, 1\] = -?inf"):
        pair_advantages_torch(torch.tensor([[1.0, bad, 0.0, 1.0]]), W)


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda W: W * np.array([1.0, 1.0, 1.0, 1.01]), r"weights must be symmetric"),
        (lambda W: np.where(W > 0, np.nan, 0.0), r"weights must be finite .* = nan"),
        (lambda W: np.where(W > 0, np.inf, 0.0), r"weights must be finite .* = inf"),
        (lambda W: -W, r"weights must be >= 0"),
        (lambda W: W + np.eye(4), r"weights must have a zero diagonal"),
        (lambda W: W[:, :3, :3], r"weights must have shape \(\.\.\., G, G\) with G = 4"),
    ],
)
def test_bad_weights_raise(edit, match):
    W = design_edge_weights(MASK, JOINT)
    with pytest.raises(ValueError, match=match):
        pair_advantages_torch(torch.tensor(REWARDS), edit(W))


def test_weights_on_unobserved_edges_are_refused_when_mask_is_given():
    W = design_edge_weights(np.ones((1, 4), bool), JOINT)  # every edge weighted
    with pytest.raises(ValueError, match="weights must be zero on every edge that was not"):
        pair_advantages_torch(torch.tensor(REWARDS), W, mask=MASK)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_accumulated_in_the_requested_dtype(dtype):
    # 6e4 * W overflows float16 (max 65504) when accumulated in the input dtype
    r = torch.tensor([[60000.0, 0.0, 30000.0, 60000.0]], dtype=dtype)
    W = torch.as_tensor(design_edge_weights(MASK, JOINT), dtype=dtype)
    # the weights were rounded to `dtype` by the caller: compare with the core on those weights
    want = 0.5 * np.einsum("bij,bij->bi", W.double().numpy(),
                           r.double().numpy()[:, :, None] - r.double().numpy()[:, None, :])
    for out in (torch.float32, torch.float64):
        got = pair_advantages_torch(r, W, dtype=out)
        assert got.dtype == out and torch.isfinite(got).all()
        np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-6 if out == torch.float32
                                   else 1e-15)


def test_overflow_of_the_accumulation_dtype_raises():
    W = design_edge_weights(MASK, JOINT)
    r = [[3e38, -3e38, 0.0, 0.0]]  # finite in float32, their difference is not
    with pytest.raises(ValueError, match=r"advantages overflow torch.float32.*dtype=torch.float64"):
        pair_advantages_torch(r, W, dtype=torch.float32)
    assert torch.isfinite(pair_advantages_torch(r, W, dtype=torch.float64)).all()


@pytest.mark.parametrize(
    "rewards,exc,match",
    [
        (torch.tensor([[1 + 0j, 0, 1, 1]]), TypeError, "rewards must be a real"),
        ([["1", "0", "1", "1"]], TypeError, "rewards must be a real numeric array"),
        ([1.0, 0.0, 1.0, 1.0], ValueError, r"rewards must have shape \(B, G\)"),
        ([[1.0]], ValueError, "G >= 2 candidates"),
    ],
)
def test_bad_rewards_raise_naming_rewards(rewards, exc, match):
    W = design_edge_weights(MASK, JOINT)
    with pytest.raises(exc, match=match):
        pair_advantages_torch(rewards, W)


def test_result_lives_on_the_rewards_device_with_the_documented_dtype():
    W = design_edge_weights(MASK, JOINT)
    got = pair_advantages_torch(torch.tensor(REWARDS, dtype=torch.float64), W)
    assert got.dtype == torch.float32 and got.device == torch.device("cpu")
    assert float(got.sum()) == pytest.approx(0.0, abs=1e-6)  # centred over the endpoints
    assert float(got[0, 2]) == 0.0  # not completed
