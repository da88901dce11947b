"""PAIR's advantage step on real verl ``DataProto`` batches.

Compared with :func:`pairht.pair_advantages` on the same plan, with the TRL trainer's
advantages on one stored batch (data/, computed by the real ``PairGRPOTrainer``; kept current
by test_trl_fixture.py in the main environment), and with the complete-pair gradient by
enumerating a design's support (exact unbiasedness of the verl path).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from verl_required import require_verl_for_tests

require_verl_for_tests()

import torch  # noqa: E402
from trl_batch import CASES, load  # noqa: E402
from verl_batch import data_proto, per_row, rows_of  # noqa: E402

import pairht  # noqa: E402
from pairht.designs import ConditionalPoisson  # noqa: E402
from pairht.step import StepPlan, plan_step  # noqa: E402
from pairht.verl.advantage import pair_advantage  # noqa: E402
from pairht.verl.config import PairVerlConfig  # noqa: E402
from pairht.verl.rows import plan_rows  # noqa: E402

pytestmark = pytest.mark.verl
#: float64 sums of at most G = 8 terms
TOL = 1e-12


def _plan(b: int, g: int, seed: int, rule: str = "pair"):
    rng = np.random.default_rng(seed)
    finished = rng.random((b, g)) < 0.15
    return plan_step(rng.random((b, g)), rng.uniform(5, 50, (b, g)), finished,
                     budget_ratio=0.5, allocator=rule, rng=rng)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", ["pair", "pair_dr"])
def test_pair_advantage_equals_the_cores_estimator(seed, rule):
    b, g = 3, 6
    plan = _plan(b, g, seed, rule)
    assert (~plan.selected).any() and (plan.selected.sum(-1) >= 2).any()
    rng = np.random.default_rng(100 + seed)
    rewards = rng.random((b, g))
    order = rng.permutation(b * g)  # verl may hand the rows over in any order
    data = data_proto(rows_of(plan, ["p0", "p1", "p2"]), rewards, order=order)
    out = pair_advantage(data)
    if rule == "pair":
        want = pairht.pair_advantages(rewards, plan.selected, plan.joint)
    else:
        from pairht.estimators.difference import difference_advantages, prediction_baselines

        base = prediction_baselines(plan.p_hat, rewards, plan.finished)
        want = difference_advantages(rewards, plan.selected, plan.joint, base)
    got = per_row(out)[np.argsort(order)].reshape(b, g)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    assert out.batch["advantages"].dtype == torch.float64


def test_advantages_fill_the_response_and_unselected_rows_leave_the_loss():
    plan = _plan(2, 5, seed=7)
    data = data_proto(rows_of(plan, ["a", "b"]), np.random.default_rng(0).random((2, 5)))
    out = pair_advantage(data)
    selected = np.asarray(data.non_tensor_batch["pair_selected"], dtype=bool)
    assert (~selected).any()
    mask_in = data.batch["response_mask"]
    mask_out = out.batch["response_mask"]
    assert torch.equal(mask_out[torch.as_tensor(selected)], mask_in[torch.as_tensor(selected)])
    assert torch.all(mask_out[torch.as_tensor(~selected)] == 0)
    adv = out.batch["advantages"]
    assert torch.all(adv[mask_out == 0] == 0)
    # one value per row on every response token; returns = advantages (outcome reward)
    for k in range(len(adv)):
        vals = adv[k][mask_out[k].bool()]
        assert vals.numel() == 0 or torch.all(vals == vals[0])
    assert torch.equal(out.batch["returns"], adv)
    # pure: the input is unchanged
    assert "advantages" not in data.batch.keys()
    assert torch.equal(data.batch["response_mask"], mask_in)


@pytest.mark.parametrize(("rule", "width"), CASES)
def test_pair_advantage_equals_the_trl_trainers_on_the_same_batch(rule, width):
    """The TRL trainer's plan and rewards (stored: data/), through verl: the advantages it
    handed TRL's loss, to float64 rounding."""
    trl = load(rule, width)
    b, g = trl["advantages"].shape
    plan = StepPlan.from_rows({k[4:]: v for k, v in trl.items() if k.startswith("row_")}, g)
    assert plan.width == width and (~plan.selected).any()
    rows = [{"uid": f"prompt{i}", **row} for i in range(b) for row in plan_rows(plan, i)]
    rewards = np.nan_to_num(trl["rewards"], nan=0.0)  # unselected: never read
    order = np.random.default_rng(5).permutation(b * g)
    got = per_row(pair_advantage(data_proto(rows, rewards, order=order)))
    got = got[np.argsort(order)].reshape(b, g)
    assert np.abs(trl["advantages"]).max() > 0.01  # the claim is exercised
    np.testing.assert_allclose(got, trl["advantages"], rtol=0, atol=TOL)


@pytest.mark.parametrize("pi", [[0.9, 0.5, 0.3, 0.3], [1.0, 0.7, 0.7, 0.6]])
def test_verl_path_is_design_unbiased_by_enumeration(pi):
    """sum_J P(J) sum_i A_i(J) s_i = g_pair = (1/M) sum_{i<j} (r_i - r_j)(s_i - s_j) / 2."""
    design = ConditionalPoisson(np.array(pi))
    joint = design.joint()
    g = len(pi)
    base = plan_step([[0.5] * g], [[10.0] * g], [[False] * g], budget_ratio=1.0, rng=0)
    rng = np.random.default_rng(3)
    rewards, scores = rng.random(g), rng.normal(size=(g, 2))
    masks, probs = design.support()
    expected = np.zeros(2)
    for mask, p in zip(masks, probs):
        plan = base.replace(selected=mask[None], pi=np.array([pi]), joint=joint[None])
        rows = [{"uid": "x", **row} for row in plan_rows(plan)]
        adv = per_row(pair_advantage(data_proto(rows, rewards[None])))
        expected += p * adv @ scores
    m = g * (g - 1) / 2
    target = sum((rewards[i] - rewards[j]) * (scores[i] - scores[j]) / 2
                 for i, j in itertools.combinations(range(g), 2)) / m
    np.testing.assert_allclose(expected, target, rtol=0, atol=TOL)
    np.testing.assert_allclose(target, pairht.pair_gradient(rewards, scores), rtol=0, atol=TOL)


def test_a_batch_without_the_plan_is_refused_naming_the_fields():
    plan = _plan(1, 3, seed=1)
    data = data_proto(rows_of(plan, ["a"]), np.zeros((1, 3)))
    data.non_tensor_batch.pop("pair_joint")
    with pytest.raises(ValueError, match=r"lacks the plan fields \['pair_joint'\]"):
        pair_advantage(data)


def test_clipped_weighting_reaches_the_estimator():
    plan = _plan(2, 6, seed=2)
    rewards = np.random.default_rng(1).random((2, 6))
    data = data_proto(rows_of(plan, ["a", "b"]), rewards)
    cfg = PairVerlConfig(weighting="clipped", w_max=2.0)
    got = per_row(pair_advantage(data, cfg)).reshape(2, 6)
    want = pairht.pair_advantages(rewards, plan.selected, plan.joint, weighting="clipped",
                                  w_max=2.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
