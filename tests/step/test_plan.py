"""pairht.step: realised accounting, exact embedded designs, allocators, errors, reproducibility.

Exact claims are checked against enumeration of the design's support (float64 sums of at most
2**7 terms: 1e-12). Budget claims use 1e-9 relative: the solver's KKT tolerance is 1e-8 on a
normalised problem and finished candidates enter it at 1e-9 of a mean suffix.
"""

from __future__ import annotations

import numpy as np
import pytest

from pairht.estimators import pair_ht_gradient
from pairht.step import (
    ALLOCATORS,
    StepInputs,
    allocator_names,
    group_design,
    plan_continuations,
    register_allocator,
)
from pairht.testing import assert_design_unbiased

BUILTINS = ("full", "pair", "pointwise", "srswor", "uniform")
KINDS = ("bernoulli", "conditional_poisson", "dependent_rounding", "mixed_size")


def _batch(seed: int = 0, B: int = 4, G: int = 6, frac_finished: float = 0.3,
           ratio: float = 0.5) -> StepInputs:
    rng = np.random.default_rng(seed)
    fin = rng.random((B, G)) < frac_finished
    fin[0] = False  # one group with nothing finished
    fin[-1, :2] = True  # and one with finished candidates for sure
    fin[-1, 2:] = False
    return StepInputs.from_ratio(rng.uniform(0.05, 0.95, (B, G)),
                                 rng.uniform(20.0, 400.0, (B, G)), fin, budget_ratio=ratio,
                                 prefix_tokens=np.full((B, G), 8.0))


def _enumerated_joint(design):
    masks, probs = design.support()
    m = masks.astype(float)
    return np.einsum("k,ki,kj->ij", probs, m, m), masks


@pytest.mark.parametrize("kind", KINDS)
def test_embedded_joint_equals_sum_over_support(kind):
    pi_u = np.array([0.3, 0.55, 0.8, 0.45])  # sum 2.1: fixed-size kinds mix sizes 2 and 3
    fin = np.array([False, True, False, False, True, False])
    pi = np.ones(6)
    pi[~fin] = pi_u
    d = group_design(kind, pi, fin, rng=3)
    joint, masks = _enumerated_joint(d)
    np.testing.assert_allclose(d.joint(), joint, rtol=0, atol=1e-12)
    np.testing.assert_allclose(d.pi, pi, rtol=0, atol=1e-12)
    assert masks[:, fin].all()  # finished candidates are in every sample
    # rho_ij = pi_j for a finished i (a certain event is independent of everything)
    np.testing.assert_allclose(d.joint()[1], pi, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ("conditional_poisson", "dependent_rounding"))
def test_fixed_size_takes_its_size_over_unfinished(kind):
    pi_u = np.array([0.3, 0.55, 0.8, 0.45])
    fin = np.array([True, False, True, False, False, False])
    pi = np.ones(6)
    pi[~fin] = pi_u
    masks, probs = group_design(kind, pi, fin, rng=1).support()
    n_unf = masks[:, ~fin].sum(axis=1)
    assert set(n_unf.tolist()) == {2, 3}  # floor and ceil of sum(pi_u) = 2.1
    np.testing.assert_allclose(probs[n_unf == 3].sum(), 0.1, rtol=0, atol=1e-12)


def test_pair_size_counts_unfinished_candidates_only():
    inputs = _batch(1, B=3, G=7, ratio=0.6)
    plan = plan_continuations(inputs, design="conditional_poisson", size=2, rng=0)
    unf = inputs.unfinished
    np.testing.assert_array_equal((plan.selected & unf).sum(axis=1),
                                  np.minimum(2, inputs.n_unfinished))
    assert plan.selected[inputs.finished].all()
    np.testing.assert_allclose(np.where(unf, plan.pi, 0).sum(axis=1),
                               np.minimum(2, inputs.n_unfinished), rtol=0, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_pair_ht_is_design_unbiased_with_finished_candidates(kind):
    rng = np.random.default_rng(7)
    fin = np.array([[False, True, False, False, True, False]])
    inputs = StepInputs.from_ratio(rng.uniform(0.1, 0.9, (1, 6)),
                                   np.where(fin, 0.0, rng.uniform(50, 150, (1, 6))), fin,
                                   budget_ratio=0.5)
    plan = plan_continuations(inputs, design=kind, rng=5)
    d = group_design(plan.design, plan.pi_alloc[0], inputs.finished[0], rng=5)
    assert_design_unbiased(pair_ht_gradient, d, rng.random(6), rng.normal(size=(6, 3)))


@pytest.mark.parametrize("allocator", BUILTINS)
def test_finished_candidates_are_kept_and_free(allocator):
    inputs = _batch(3)
    plan = plan_continuations(inputs, allocator=allocator, rng=0)
    fin = inputs.finished
    assert np.all(plan.pi[fin] == 1.0) and plan.selected[fin].all()
    np.testing.assert_array_equal(plan.joint[np.broadcast_to(fin[:, :, None], plan.joint.shape)
                                             & np.broadcast_to(fin[:, None, :],
                                                               plan.joint.shape)], 1.0)
    # finished candidates add nothing to the cost, whatever c_hat they were given
    c2 = np.where(fin, 1e6, inputs.c_hat)
    again = plan_continuations(StepInputs(inputs.p_hat, c2, fin, inputs.budget), rng=0,
                               allocator=allocator)
    np.testing.assert_array_equal(again.pi, plan.pi)


@pytest.mark.parametrize("allocator", ("pair", "pair_bernoulli", "pointwise", "srswor",
                                       "uniform"))
@pytest.mark.parametrize("ratio", (0.2, 0.5, 0.9))
def test_expected_realised_cost_spends_the_budget(allocator, ratio):
    inputs = _batch(4, B=6, G=8, ratio=ratio)
    opts = {"allocator": "pair", "size": None} if allocator == "pair_bernoulli" else \
        {"allocator": allocator}
    plan = plan_continuations(inputs, rng=0, **opts)
    cost = np.where(inputs.finished, 0.0, inputs.c_hat * plan.pi).sum(axis=1)
    live = inputs.n_unfinished > 0
    assert np.all(cost <= inputs.budget * (1 + 1e-9))
    if allocator == "pair":
        # Fixed size: each size's program may leave budget unspent (the size row binds
        # first); the rest is reported, per group.
        np.testing.assert_allclose(plan.info["unspent_budget"], inputs.budget - cost,
                                   rtol=0, atol=1e-9 * inputs.budget.max())
        # S = ratio * k >= 2 in some group at ratio >= 0.5 (G = 8): a fixed size is drawn
        assert plan.info["fixed_size"][live].any() == (ratio >= 0.5)
    else:
        # Floor not binding (ratio > pi_min) and budget below the full cost: spent exactly.
        np.testing.assert_allclose(cost[live], inputs.budget[live], rtol=1e-9, atol=0)
    np.testing.assert_allclose(plan.metrics["expected_suffix_cost"], cost.sum(), rtol=1e-12)
    np.testing.assert_allclose(plan.metrics["unspent_budget"], (inputs.budget - cost).sum(),
                               rtol=0, atol=1e-6 * inputs.budget.sum())


def test_budget_above_full_cost_completes_everything_and_reports_unspent():
    inputs = _batch(5)
    big = StepInputs(inputs.p_hat, inputs.c_hat, inputs.finished, 2.0 * inputs.full_cost)
    plan = plan_continuations(big, rng=0)
    assert np.all(plan.pi == 1.0) and plan.selected.all()
    np.testing.assert_allclose(plan.metrics["unspent_budget"], inputs.full_cost.sum(),
                               rtol=1e-12)


def test_skill_zero_reduces_pair_to_uniform_among_unfinished():
    inputs = _batch(6, B=5, G=8)
    zero = {"skill_success": 0.0, "skill_cost": 0.0}
    bern = plan_continuations(inputs, allocator="pair", size=None, rng=0, **zero)
    uniform = plan_continuations(inputs, allocator="uniform", rng=0)
    # Same value by different arithmetic: skill 0 rescales the budget to the shrunk costs'
    # sum (budget / full * full') and PAIR's closed form divides by a sum of k equal costs
    # taken in another order than uniform's: a few ulps apart on about half of all inputs.
    np.testing.assert_allclose(bern.pi, uniform.pi, rtol=1e-12, atol=0)
    # Fixed size (the default): exactly SRSWOR of the two neighbouring sizes, n/k and (n+1)/k.
    pair = plan_continuations(inputs, allocator="pair", rng=0, **zero)
    srswor = plan_continuations(inputs, allocator="srswor", rng=0)
    k, f = inputs.n_unfinished, pair.info["weight_hi"]
    n = pair.info["size"]
    fixed = pair.info["fixed_size"]
    assert fixed.sum() >= 3
    unf = inputs.unfinished
    lo, hi = pair.info["pi_lo"], pair.info["pi_hi"]
    np.testing.assert_array_equal(np.where(unf, lo, 0)[fixed],
                                  np.where(unf, (n / k)[:, None], 0)[fixed])
    np.testing.assert_array_equal(np.where(unf, hi, 0)[fixed & (f > 0)],
                                  np.where(unf, ((n + 1) / k)[:, None], 0)[fixed & (f > 0)])
    np.testing.assert_allclose(pair.pi, srswor.pi, rtol=0, atol=1e-15)
    np.testing.assert_allclose(pair.joint, srswor.joint, rtol=0, atol=1e-12)
    # and the skilled allocations are not uniform on these inputs (the claims can fail)
    skilled = plan_continuations(inputs, allocator="pair", size=None, rng=0)
    assert np.abs(skilled.pi - uniform.pi).max() > 0.05
    skilled = plan_continuations(inputs, allocator="pair", rng=0)
    assert np.abs(skilled.pi - srswor.pi).max() > 0.01


@pytest.mark.parametrize("size", [None, 3])
def test_solver_agrees_with_the_symmetric_closed_form(size):
    from pairht.allocation import solve_program
    from pairht.step.pair_program import fold_finished, program_terms

    fin = np.array([[True, False, False, True, False, False]])
    p = np.where(fin, [[0.9, 0, 0, 0.2, 0, 0]], 0.4)
    budget = 200.0 if size is None else 300.0  # Bernoulli pi = 0.5; size 3 affordable
    inputs = StepInputs(p, np.full((1, 6), 100.0), fin, [budget])
    a, b = program_terms(inputs)
    a_u, b_u = fold_finished(a, b, ~fin, 4)
    res = solve_program(np.full((1, 4), 0.4), np.full((1, 4), 100.0), [budget], a_u, b_u,
                        size=None if size is None else [size])
    want = 0.5 if size is None else 0.75
    np.testing.assert_allclose(res.pi, want, rtol=0, atol=1e-7)
    plan = plan_continuations(inputs, size=size, rng=0)
    assert plan.status[0] == "symmetric"
    np.testing.assert_array_equal(plan.pi_alloc[~fin], want)


def test_partial_skill_shrinks_toward_the_group_mean():
    from pairht.step import shrink_predictions

    inputs = _batch(7)
    half = shrink_predictions(inputs, 0.5, 0.25)
    pm = inputs.p_hat.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(half.p_hat, pm + 0.5 * (inputs.p_hat - pm), rtol=0, atol=1e-15)
    unf = inputs.unfinished
    cm = (inputs.c_hat.sum(axis=1) / inputs.n_unfinished)[:, None]
    np.testing.assert_allclose(half.c_hat[unf], (cm + 0.25 * (inputs.c_hat - cm))[unf],
                               rtol=1e-15)


def test_srswor_draws_floor_or_ceil_of_the_uniform_size():
    inputs = _batch(8, B=3, G=8, ratio=0.45)
    t = inputs.budget / inputs.full_cost
    s = t * inputs.n_unfinished
    fixed = s >= 2  # below an expected size of 2 the draw is Bernoulli (pairs observable)
    assert fixed.any() and (~fixed).any(), s  # the batch exercises both rules
    for seed in range(20):
        plan = plan_continuations(inputs, allocator="srswor", rng=seed)
        k = (plan.selected & inputs.unfinished).sum(axis=1)
        assert np.all(((k == np.floor(s)) | (k == np.ceil(s)))[fixed])
        assert np.all(plan.joint > 0)  # every pair observable: pair-HT unbiased


def test_srswor_below_size_two_is_bernoulli_and_unbiased():
    from pairht.step import unfinished_design

    d = unfinished_design("conditional_poisson", [0.3, 0.3, 0.3])  # S = 0.9: sizes 0/1 never
    assert d.name == "bernoulli"  # observe a pair; Bernoulli keeps rho_ij = pi_i pi_j > 0
    np.testing.assert_allclose(d.joint()[0, 1], 0.09, rtol=0, atol=1e-15)
    d2 = unfinished_design("conditional_poisson", [0.7, 0.7, 0.6])  # S = 2.0: fixed size 2
    assert d2.name != "bernoulli" and set(d2.support()[0].sum(axis=1).tolist()) == {2}


def test_dependent_rounding_resolves_to_the_pair_positive_mixture():
    plan = plan_continuations(_batch(9), design="dependent_rounding", size="auto", rng=0)
    assert plan.design == "randomized_dependent_rounding"
    assert np.all(plan.joint > 0)


def test_registry_names_and_duplicates():
    assert set(BUILTINS) <= set(ALLOCATORS)
    assert set(BUILTINS) <= set(allocator_names())
    with pytest.raises(ValueError, match="already registered"):
        register_allocator("pair")(type("Other", (), {"name": "pair", "pi": lambda s, i: 0}))
    with pytest.raises(ValueError, match="allocator must be one of"):
        plan_continuations(_batch(), allocator="nope", rng=0)


@pytest.mark.parametrize(("change", "name"), [
    (dict(p_hat=np.full((2, 3), 1.5)), "p_hat"),
    (dict(c_hat=np.array([[1.0, 0.0, 2.0], [1.0, 1.0, 1.0]])), "c_hat"),
    (dict(finished=np.zeros((2, 4), bool)), "finished"),
    (dict(budget=np.array([1.0, 2.0, 3.0])), "budget"),
    (dict(budget=np.array([-1.0, 2.0])), "budget"),
])
def test_bad_inputs_name_the_argument(change, name):
    args = dict(p_hat=np.full((2, 3), 0.5), c_hat=np.ones((2, 3)),
                finished=np.zeros((2, 3), bool), budget=np.array([1.5, 1.5]))
    args.update(change)
    with pytest.raises((ValueError, TypeError), match=name):
        StepInputs(**args)


@pytest.mark.parametrize(("kwargs", "name"), [
    (dict(skill_success=1.5), "skill_success"),
    (dict(skill_cost=-0.1), "skill_cost"),
    (dict(pi_min=0.0), "pi_min"),
    (dict(design="poisson"), "design"),
    (dict(pi_min=0.9), "budget"),
])
def test_bad_options_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        plan_continuations(_batch(), rng=0, **kwargs)


def test_same_rng_same_plan_and_a_new_seed_draws_differently():
    inputs = _batch(10, B=8, G=8)
    a = plan_continuations(inputs, design="dependent_rounding", size="auto", rng=11)
    b = plan_continuations(inputs, design="dependent_rounding", size="auto",
                           rng=np.random.default_rng(11))
    np.testing.assert_array_equal(a.selected, b.selected)
    np.testing.assert_array_equal(a.joint, b.joint)
    c = plan_continuations(inputs, design="dependent_rounding", size="auto", rng=12)
    assert not np.array_equal(a.selected, c.selected)


def test_metrics_match_their_definitions():
    inputs = _batch(11, B=3, G=5)
    plan = plan_continuations(inputs, rng=0)
    m = plan.metrics
    iu = np.triu_indices(5, 1)
    assert m["budget"] == inputs.budget.sum()
    assert m["finished_free"] == inputs.finished.mean()
    np.testing.assert_allclose(m["expected_edges"], plan.joint[:, iu[0], iu[1]].sum(1).mean())
    np.testing.assert_allclose(m["min_joint"], plan.joint[:, iu[0], iu[1]].min())
    np.testing.assert_allclose(m["completed_vertices"], plan.pi.sum(1).mean())
    k = plan.selected.sum(1)
    np.testing.assert_allclose(m["observed_edges"], (k * (k - 1) / 2).mean())
    assert m["prefix_tokens"] == 8.0 * 15


def test_anchor_pair_matches_the_anchored_embedded_design():
    from pairht.designs.anchored import AnchoredPair
    from pairht.step import WithFinished, unfinished_design

    inputs = _batch(12, B=2, G=6, ratio=0.15)
    plan = plan_continuations(inputs, anchor_pair=True, pi_min=0.1, rng=0)
    for b in range(2):
        fin = inputs.finished[b]
        d = AnchoredPair(WithFinished(unfinished_design("bernoulli", plan.pi_alloc[b][~fin]),
                                      fin))
        np.testing.assert_allclose(plan.joint[b], d.joint(), rtol=0, atol=1e-15)
    assert np.all(plan.selected.sum(1) >= 2)


def test_unaffordable_size_is_clipped_and_every_pair_stays_positive():
    # 4 unfinished at cost 1 (sum pi = n costs exactly n): budget 2 affords size 2 of the 3
    # asked; budget 1.5 affords no size >= 2, so that group takes the Bernoulli program and
    # the fixed-size mixture of sizes 1 and 2 (every pair still positive).
    fin = np.array([[True, True, False, False, False, False],
                    [True, True, False, False, False, False],
                    [False, False, False, False, False, False]])
    p = np.array([[0.3, 0.8, 0.2, 0.6, 0.7, 0.4]] * 3)
    inputs = StepInputs(p, np.where(fin, 0.0, 1.0), fin, np.array([2.0, 1.5, 4.5]))
    plan = plan_continuations(inputs, design="conditional_poisson", size=3, pi_min=0.1, rng=0)
    assert plan.info["size_clipped"].tolist() == [True, True, False]
    assert plan.info["size"].tolist() == [2, -1, 3]
    assert plan.metrics["sizes_clipped"] == 2.0
    assert np.all(plan.joint > 0)
    cost = np.where(fin, 0.0, inputs.c_hat * plan.pi).sum(axis=1)
    assert np.all(cost <= inputs.budget * (1 + 1e-9))
    np.testing.assert_allclose(np.where(fin, 0, plan.pi).sum(axis=1), [2.0, 1.5, 3.0],
                               atol=1e-9)


@pytest.mark.parametrize("allocator", ("full", "uniform", "srswor", "pointwise"))
def test_a_size_or_an_unknown_option_is_refused_not_ignored(allocator):
    with pytest.raises(ValueError, match=f"size must be None for allocator '{allocator}'"):
        plan_continuations(_batch(), allocator=allocator, size=2, rng=0)
    with pytest.raises(TypeError, match="warm_strat"):
        plan_continuations(_batch(), allocator=allocator, warm_strat=None, rng=0)


def test_pair_refuses_an_unknown_option():
    with pytest.raises(TypeError, match="warm_strat"):
        plan_continuations(_batch(), allocator="pair", warm_strat=None, rng=0)


@pytest.mark.parametrize("skill", [0.0, 0.3, 1.0])
def test_a_full_budget_gives_exactly_one_with_finished_candidates_and_shrinkage(skill):
    """budget_ratio = 1 must complete everything with pi and rho exactly 1 (the RLOO
    identity), whatever rounding the finished-candidate embedding and the shrinkage add."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        p, c = rng.uniform(size=(3, 6)), rng.uniform(1, 10, size=(3, 6))
        inputs = StepInputs.from_ratio(p, c, rng.random((3, 6)) < 0.3, budget_ratio=1.0)
        plan = plan_continuations(inputs, rng=0, pi_min=0.1, skill_success=skill,
                                  skill_cost=skill)
        assert np.all(plan.joint == 1.0) and plan.selected.all()
