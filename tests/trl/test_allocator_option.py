"""PairGRPOConfig.allocator / shrink_to_skill: any registered allocation rule runs in the trainer,
and uninformative heads reduce PAIR to the uniform design among unfinished candidates."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("trl")

from pair_helpers import make_config, make_trainer

from pairht.step import StepInputs, allocator_names, plan_continuations


def test_allocator_names_come_from_the_step_registry(tmp_path):
    assert make_config(tmp_path).allocator == "pair"
    for name in ("uniform", "srswor", "pointwise", "vip", "hora", "duet", "pair_joint"):
        assert name in allocator_names()
    with pytest.raises(ValueError, match=r"allocator must be one of .*pairht\.step\.ALLOCATORS"):
        make_config(tmp_path, allocator="nope")


def test_design_defaults_to_the_allocators_own(tmp_path):
    # PAIR's default is fixed size over the unfinished candidates (issue 14, docs/step.md);
    # the anchor pair is defined on the Bernoulli design only.
    assert make_config(tmp_path).design == "conditional_poisson"
    assert make_config(tmp_path, anchor_pair=True).design == "bernoulli"
    assert make_config(tmp_path, allocator="srswor").design is None
    assert make_config(tmp_path, allocator="uniform", design="bernoulli").design == "bernoulli"


def test_design_size_is_refused_for_rules_that_set_their_own_sizes(tmp_path):
    with pytest.raises(ValueError, match="design_size applies to allocator='pair' only, or "
                                         "another rule that solves PAIR's program"):
        make_config(tmp_path, allocator="srswor", design="conditional_poisson", design_size=3)
    # the batch-budget rule solves PAIR's program: PAIR's default design and sizes apply
    cfg = make_config(tmp_path, allocator="pair_batch", design_size=2)
    assert cfg.design == "conditional_poisson" and cfg.design_size == 2


def test_pair_batch_trains_without_shrinkage_and_its_draw_is_the_steps(tmp_path):
    """One budget for the batch: the trainer's draw is pairht.step's pair_batch plan on the
    same inputs (same pi), and the batch's expected suffix cost is its budget."""
    trainer = make_trainer(tmp_path, allocator="pair_batch", max_steps=1, shrink_to_skill=False)
    trainer.train()
    draw = trainer.last_draw
    inputs = StepInputs.from_ratio(draw.p_hat, draw.c_hat, draw.prefix_done,
                                   budget_ratio=trainer.pair_args.budget_ratio)
    plan = plan_continuations(inputs, allocator="pair_batch", rng=0,
                              pi_min=trainer.pair_args.pi_min)
    np.testing.assert_allclose(draw.pi, plan.pi, rtol=0, atol=1e-6)
    logs = [e for e in trainer.state.log_history if "pair/suffix_tokens" in e]
    assert logs and np.isfinite(logs[0]["pair/ess"])


def _trained_and_step_plan(tmp_path, allocator):
    """One training step with ``allocator`` (no shrinkage) and the step's own plan on the
    trainer's logged inputs, with the score-norm prediction the trainer passes (the audit's
    ``m_hat = sqrt(prefix + c_hat)``)."""
    from pairht.torch.heads import score_norm_proxy

    trainer = make_trainer(tmp_path, allocator=allocator, max_steps=1, shrink_to_skill=False)
    trainer.train()
    draw = trainer.last_draw
    inputs = StepInputs.from_ratio(draw.p_hat, draw.c_hat, draw.prefix_done,
                                   budget_ratio=trainer.pair_args.budget_ratio)
    m_hat = score_norm_proxy(draw.prefix_len, draw.c_hat, draw.prefix_done)
    plan = plan_continuations(inputs, allocator=allocator, rng=0,
                              pi_min=trainer.pair_args.pi_min, score_norm=m_hat)
    return trainer, draw, plan


def test_pair_strata_trains_with_its_own_stratified_design(tmp_path):
    """Predicted outcomes as strata: the design defaults to the rule's own (stratified), the
    trainer's draw is the step's plan on the same inputs, and its joints are the design's."""
    from pairht.step import group_design

    cfg = make_config(tmp_path, allocator="pair_strata")
    assert cfg.design is None
    trainer, draw, plan = _trained_and_step_plan(tmp_path, "pair_strata")
    np.testing.assert_allclose(draw.pi, plan.pi, rtol=0, atol=1e-6)
    for b in range(plan.pi.shape[0]):
        d = group_design("stratified", plan.pi[b], draw.prefix_done[b])
        np.testing.assert_allclose(plan.joint[b], d.joint(), rtol=0, atol=1e-12)
    logs = [e for e in trainer.state.log_history if "pair/suffix_tokens" in e]
    assert logs and np.isfinite(logs[0]["pair/ess"])


def test_pair_dr_trains_with_the_difference_estimator(tmp_path):
    """The difference estimator at Neyman's allocation: Bernoulli design by default, the
    trainer's draw is the step's plan on the same inputs, and its advantages are
    pairht.estimators.difference's with the predictions as baselines (finished: rewards)."""
    from pairht.estimators.difference import difference_advantages

    assert make_config(tmp_path, allocator="pair_dr").design is None
    with pytest.raises(ValueError, match="difference estimator"):
        make_config(tmp_path, allocator="pair_dr", design="conditional_poisson")
    with pytest.raises(ValueError, match="difference estimator"):
        make_config(tmp_path, allocator="pair_dr", weighting="clipped", w_max=10.0)
    _, draw, plan = _trained_and_step_plan(tmp_path, "pair_dr")
    np.testing.assert_allclose(draw.pi, plan.pi, rtol=0, atol=1e-6)
    base = np.where(draw.prefix_done, np.nan_to_num(draw.rewards), draw.p_hat)
    adv = difference_advantages(np.where(draw.mask, draw.rewards, 0.0), draw.mask, draw.joint,
                                base)
    # dr_grpo with scale_rewards="none": the logged advantages are the estimator's own
    np.testing.assert_allclose(draw.advantages, adv, rtol=1e-5, atol=1e-6)
    assert np.any(adv != 0)


def test_shrink_to_skill_must_be_a_bool(tmp_path):
    with pytest.raises(TypeError, match="shrink_to_skill must be True or False"):
        make_config(tmp_path, shrink_to_skill="no")


def _unfinished_pi(trainer):
    d = trainer.draw_history[0]
    g = trainer.pair_args.num_generations
    done = trainer.last_draw.prefix_done.reshape(-1, g)
    return d["pi"].reshape(-1, g), done


def test_uniform_allocator_trains_and_gives_equal_pi_among_unfinished(tmp_path):
    trainer = make_trainer(tmp_path, allocator="uniform", max_steps=1)
    trainer.train()
    pi, done = _unfinished_pi(trainer)
    assert np.all(pi[done] == 1.0)
    for b in range(pi.shape[0]):
        open_pi = pi[b][~done[b]]
        if open_pi.size:
            assert np.ptp(open_pi) < 1e-12
    logs = [e for e in trainer.state.log_history if "pair/suffix_tokens" in e]
    assert logs and "pair/head_skill_success" in logs[0]


def test_unmeasured_heads_make_pair_the_uniform_design(tmp_path):
    """Before any label the heads' skill is unknown (NaN) and counts as 0: the first draw of
    "pair" equals the "uniform" rule's pi on the same inputs, exactly."""
    trainer = make_trainer(tmp_path, max_steps=1)
    trainer.train()
    draw = trainer.last_draw
    inputs = StepInputs.from_ratio(draw.p_hat, draw.c_hat, draw.prefix_done,
                                   budget_ratio=trainer.pair_args.budget_ratio)
    uniform = plan_continuations(inputs, allocator="uniform", rng=0).pi
    np.testing.assert_allclose(draw.pi, uniform, rtol=0, atol=1e-9)


def test_without_shrinkage_pair_follows_the_heads(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=1, shrink_to_skill=False)
    trainer.train()
    draw = trainer.last_draw
    inputs = StepInputs.from_ratio(draw.p_hat, draw.c_hat, draw.prefix_done,
                                   budget_ratio=trainer.pair_args.budget_ratio)
    unshrunk = plan_continuations(inputs, allocator="pair", rng=0,
                                  pi_min=trainer.pair_args.pi_min).pi
    np.testing.assert_allclose(draw.pi, unshrunk, rtol=0, atol=1e-6)


def test_shrink_by_names_come_from_the_heads_registry(tmp_path):
    assert make_config(tmp_path).shrink_by == "slope"
    assert make_config(tmp_path, shrink_by="skill").shrink_by == "skill"
    with pytest.raises(ValueError, match=r"shrink_by must be one of \('slope', 'skill'\) "
                                         r"\(from pairht\.torch\.heads\.SHRINK_MEASURES\)"):
        make_config(tmp_path, shrink_by="brier")


class _Measured:
    """A head trainer stand-in whose held-out measures are fixed."""

    def skill(self):
        return {"skill_success": 0.25, "skill_cost": float("nan"),
                "slope_success": 1.3, "slope_cost": 0.6}


@pytest.mark.parametrize(("by", "want"), [("slope", {"skill_success": 1.0, "skill_cost": 0.6}),
                                          ("skill", {"skill_success": 0.25, "skill_cost": 0.0})])
def test_the_step_is_shrunk_by_the_named_measure_clipped_to_the_unit_interval(tmp_path, by,
                                                                               want):
    trainer = make_trainer(tmp_path, max_steps=1, shrink_by=by)
    trainer.head_trainer = _Measured()
    assert trainer._head_skill() == want
