"""Why ``pair`` and ``vip`` ran identically in the comparator experiment (docs/comparators.md).

The experiment's setting: ``G = 8`` candidates, none finished at the checkpoint, budget ratio
0.5, the success head without held-out skill (``skill_success = 0``: the step shrinks ``p_hat``
to the group mean). Then

* PAIR's default (fixed size at the budget's uniform size ``S = 4``) has equal edge proxies and
  shared-vertex terms within a group; its objective is symmetric and convex, so on
  ``sum pi = 4`` it is minimised by ``pi = 1/2``, which spends exactly the budget whatever the
  cost predictions are: PAIR is SRSWOR of 4 of the 8, whatever the cost head's skill;
* VIP gives every prompt ``k = 4`` as long as its GP's success rates keep ``p (1 - p)`` within a
  factor 5/3 across prompts (with ``k = 4`` everywhere, moving one rollout trades
  ``p(1-p)/20`` for ``p'(1-p')/12``), e.g. with no history at all;
* the step draws both with the same conditional Poisson sampler and generator, so the draws
  coincide.
"""

from __future__ import annotations

import numpy as np
import pytest

from pairht.step import StepInputs, plan_continuations

B, G = 8, 8


def _inputs(seed, history):
    rng = np.random.default_rng(seed)
    return StepInputs.from_ratio(rng.random((B, G)), rng.uniform(20.0, 60.0, (B, G)),
                                 np.zeros((B, G), dtype=bool), budget_ratio=0.5,
                                 history=history)


def _plans(inputs, seed, skill_success, skill_cost):
    common = dict(skill_success=skill_success, skill_cost=skill_cost)
    pair = plan_continuations(inputs, allocator="pair", rng=np.random.default_rng(seed),
                              **common)
    vip = plan_continuations(inputs, allocator="vip", rng=np.random.default_rng(seed), **common)
    return pair, vip


@pytest.mark.parametrize("seed", range(5))
def test_without_history_and_without_head_skill_vip_and_pair_plan_the_same_draw(seed):
    # What the trainer passes for prompts it has not seen: zero successes and trials.
    empty = {"successes": np.zeros(B), "trials": np.zeros(B)}
    pair, vip = _plans(_inputs(seed, empty), seed, 0.0, 0.0)
    np.testing.assert_array_equal(vip.info["k"], np.full(B, G // 2))
    np.testing.assert_allclose(pair.pi, 0.5, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(pair.pi, vip.pi)
    np.testing.assert_array_equal(pair.joint, vip.joint)
    np.testing.assert_array_equal(pair.selected, vip.selected)
    # the joint is SRSWOR's: k (k - 1) / (U (U - 1)) = 4 * 3 / (8 * 7)
    off = ~np.eye(G, dtype=bool)
    np.testing.assert_allclose(pair.joint[:, off], 12.0 / 56.0, rtol=1e-12)


@pytest.mark.parametrize("skill_cost", [0.1, 0.25, 1.0])
def test_cost_skill_alone_leaves_pairs_plan_uniform(skill_cost):
    # With equal success predictions in a group PAIR's fixed-size optimum is pi = 1/2 for any
    # cost predictions (the uniform point of sum pi = 4 meets the budget exactly), so PAIR
    # stays SRSWOR up to the solver's tolerance, as in steps 9-12 of the experiment.
    inputs = _inputs(7, {"successes": np.zeros(B), "trials": np.zeros(B)})
    pair, vip = _plans(inputs, 7, 0.0, skill_cost)
    np.testing.assert_allclose(pair.pi, 0.5, rtol=0, atol=1e-4)
    np.testing.assert_allclose(pair.pi, vip.pi, rtol=0, atol=1e-4)


def test_moderate_histories_keep_vip_at_four_each_and_skewed_ones_do_not():
    moderate = {"successes": np.array([3, 5, 8, 12, 2, 4, 6, 10.0]),
                "trials": np.array([8, 8, 16, 20, 8, 8, 8, 16.0])}
    pair, vip = _plans(_inputs(3, moderate), 3, 0.0, 0.0)
    np.testing.assert_array_equal(vip.info["k"], np.full(B, 4))
    np.testing.assert_array_equal(pair.selected, vip.selected)
    # A prompt solved 40 times of 40 has p (1 - p) far below the others: VIP moves rollouts.
    skewed = {"successes": np.array([40, 5, 8, 12, 2, 4, 6, 10.0]),
              "trials": np.array([40, 8, 16, 20, 8, 8, 8, 16.0])}
    _, vip = _plans(_inputs(3, skewed), 3, 0.0, 0.0)
    assert vip.info["k"][0] < 4 and vip.info["k"].sum() == 4 * B


def test_with_success_skill_the_two_rules_differ():
    # The identity is the uninformed case, not an allocator that is ignored: with informative
    # success predictions PAIR's pi is no longer uniform while VIP's still is.
    empty = {"successes": np.zeros(B), "trials": np.zeros(B)}
    pair, vip = _plans(_inputs(11, empty), 11, 1.0, 1.0)
    np.testing.assert_allclose(vip.pi, 0.5, rtol=0, atol=1e-12)
    assert np.abs(pair.pi - 0.5).max() > 0.05
