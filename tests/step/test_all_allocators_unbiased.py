"""Every registered allocator with every design, with finished candidates: exact unbiasedness.

For each name of ``allocator_names()`` and each design ``plan_continuations`` can be asked for
(``None``: the rule's own, and every name of the registry and its step aliases), the plan of
a batch whose prompts have 0, 1, ``G - 2`` and ``G - 1`` finished candidates (``G = 5``) is
checked group by group against the design it was drawn from (captured as
``plan_continuations`` builds it): the support's moments are ``plan.pi`` and ``plan.joint``,
the draw is in the support, and the rule's estimator (pair-HT, or the difference estimator
for a rule with ``estimator = "difference"``) has an exact design expectation, summed over
the whole support, equal to the ``G``-candidate complete pair target. Tolerance: 1e-10
relative to the largest estimate over the support (float64 sums of at most 2**5 terms).

There is no exception: every group of every plan has every ``rho_ij > 0``. A prompt-level
comparator (VIP, HORA, DUET) runs with ``min_rollouts=1`` by default; with ``min_rollouts=0``
(the rule as read from the paper) it can continue no candidate of a prompt (``k_b = 0``),
whose group would then have ``rho_ij = 0`` with an unfinished candidate and a biased estimate
(checked to be): the step and ``comparator_plan`` refuse that plan (``ValueError`` naming the
allocator, ``b``, ``k_b``, ``U_b`` and the fix), and ``anchor_pair=True`` repairs it.
``comparator_plan`` is checked against an enumeration of its design written out here, and
must agree with the step's plan.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pairht.step.plan as plan_module
from pairht.comparators import COMPARATORS, comparator_plan
from pairht.comparators._inputs import srswor_joint
from pairht.designs import DESIGNS
from pairht.designs.registry import STEP_ALIASES, step_design_kind
from pairht.estimators import pair_gradient, pair_ht_gradient
from pairht.estimators.difference import difference_advantages
from pairht.step import (
    ALLOCATORS,
    ESTIMATORS,
    StepInputs,
    allocator_names,
    default_estimator,
    plan_continuations,
)

G = 5
FINISHED_COUNTS = (0, 1, G - 2, G - 1)
DESIGN_NAMES = (None, *sorted(set(DESIGNS) | set(STEP_ALIASES)))
PROMPT_LEVEL = ("vip", "hora", "duet")
RTOL = 1e-10


def _batch(seed: int, ratio: float = 0.4, **history_override) -> tuple[StepInputs, np.ndarray,
                                                                        np.ndarray]:
    """One prompt per finished count (finished positions random), random predictions, a
    history for the prompt-level rules; rewards in (0, 1) and scores for the estimator."""
    rng = np.random.default_rng(seed)
    B = len(FINISHED_COUNTS)
    fin = np.zeros((B, G), dtype=bool)
    for b, n in enumerate(FINISHED_COUNTS):
        fin[b, rng.choice(G, size=n, replace=False)] = True
    history = {"successes": rng.integers(0, 9, B).astype(float), "trials": np.full(B, 8.0)}
    history.update(history_override)
    inputs = StepInputs.from_ratio(rng.uniform(0.05, 0.95, (B, G)), rng.uniform(10, 60, (B, G)),
                                   fin, ratio, history=history)
    return inputs, rng.uniform(0.0, 1.0, (B, G)), rng.normal(size=(B, G, 3))


def _expectation(estimate, masks, probs):
    """Exact design expectation of ``estimate(masks) -> (K, d)`` and the largest |estimate|."""
    est = estimate(masks)
    return probs @ est, float(np.abs(est).max(initial=0.0))


def _estimator(name: str, rewards, scores, joint, baselines):
    """The rule's estimator of the complete pair gradient, vectorised over masks (K, G)."""
    kind = default_estimator(name)
    if kind == "ht" or ESTIMATORS.capabilities(kind).post_reward_design:
        # a post-reward design (DPPO's pruning) is a second stage, unbiased given the plan's
        # draw (tests/step/test_step_estimate.py): the plan's own estimate is pair-HT
        return lambda m: pair_ht_gradient(np.broadcast_to(rewards, m.shape),
                                          np.broadcast_to(scores, m.shape + scores.shape[-1:]),
                                          m, np.broadcast_to(joint, (*m.shape, G)))
    if kind == "difference":
        def diff(m):
            r = np.where(m, rewards, np.nan)
            a = difference_advantages(r, m, np.broadcast_to(joint, (*m.shape, G)), baselines)
            return a @ scores
        return diff
    raise AssertionError(f"allocator {name!r} names an estimator this test does not know: "
                         f"{kind!r}")


def _check_group(name, info, b, design, pi, joint, selected, rewards, scores, baselines):
    """The step's group ``b`` against its design's support: every pair positive, unbiased."""
    masks, probs = design.support()
    m = masks.astype(float)
    assert probs.sum() == pytest.approx(1.0, abs=1e-13)
    np.testing.assert_allclose(probs @ m, pi, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.einsum("k,ki,kj->ij", probs, m, m), joint, rtol=0, atol=1e-12)
    assert (masks == selected).all(axis=1)[probs > 0].any()  # the draw is a sample of it
    mean, scale = _expectation(_estimator(name, rewards, scores, joint, baselines), masks, probs)
    target = pair_gradient(rewards, scores)
    tol = RTOL * max(scale, float(np.abs(target).max()), 1.0)
    off = joint[~np.eye(G, dtype=bool)]
    assert off.min() > 0, (name, b, joint)  # the step refuses a plan with a zero joint
    np.testing.assert_allclose(mean, target, rtol=0, atol=tol)
    if name in PROMPT_LEVEL:
        assert info["all_pairs_positive"][b] and info["k"][b] >= 1


@pytest.fixture
def captured(monkeypatch):
    """The designs plan_continuations builds, one per group, in order."""
    seen = []
    build = plan_module.group_design

    def spy(*args, **kwargs):
        seen.append(build(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(plan_module, "group_design", spy)
    return seen


@pytest.mark.parametrize("design", DESIGN_NAMES, ids=lambda d: d or "own")
@pytest.mark.parametrize("name", allocator_names())
def test_every_allocator_and_design_is_exactly_unbiased_with_finished_candidates(
        name, design, captured):
    """Every rule at its defaults (the comparators' ``min_rollouts=1``). The prompt-level rules
    get a budget ratio of 0.5 (6 rollouts of the 12 unfinished candidates): 0.4 converts to 4
    rollouts, below VIP's and DUET's minimums of 5, which they refuse
    (:func:`test_the_default_comparators_refuse_a_rollout_budget_below_one_per_prompt`)."""
    ratio = 0.5 if name in PROMPT_LEVEL else 0.4
    for seed in (0, 1):
        inputs, rewards, scores = _batch(seed, ratio)
        del captured[:]
        plan = plan_continuations(inputs, allocator=name, design=design, rng=seed)
        assert len(captured) == inputs.shape[0]
        want = step_design_kind(design if design is not None else plan.info.get("design",
                                                                                  "bernoulli"))
        assert plan.design == want
        fin = inputs.finished
        np.testing.assert_array_equal(plan.pi[fin], 1.0)
        assert plan.selected[fin].all()
        baselines = np.where(fin, rewards, plan.inputs.p_hat)
        for b, d in enumerate(captured):
            _check_group(name, plan.info, b, d, plan.pi[b], plan.joint[b], plan.selected[b],
                         rewards[b], scores[b], baselines[b])


@pytest.mark.parametrize("name", allocator_names())
def test_an_anchor_pair_makes_every_rule_unbiased_even_without_continuations(name, captured):
    """anchor_pair=True forces a uniformly drawn pair into every draw: every rho_ij > 0, so
    even a comparator's prompt with no continuation (HORA at a budget of 0 with
    ``min_rollouts=0``, refused without the anchor) is unbiased."""
    inputs, rewards, scores = _batch(2, 0.5 if name in PROMPT_LEVEL else 0.4)
    opts = {"rollout_budget": 0, "min_rollouts": 0} if name == "hora" else {}
    plan = plan_continuations(inputs, allocator=name, rng=2, anchor_pair=True, **opts)
    info = plan.info
    if name == "hora":
        assert (info["k"] == 0).all() and not info["all_pairs_positive"].any()
        info = {"all_pairs_positive": np.ones(4, bool), "k": np.ones(4, int)}  # anchor-repaired
    baselines = np.where(inputs.finished, rewards, plan.inputs.p_hat)
    for b, d in enumerate(captured):
        _check_group(name, info, b, d, plan.pi[b], plan.joint[b], plan.selected[b],
                     rewards[b], scores[b], baselines[b])


@pytest.mark.parametrize("name", allocator_names())
def test_a_size_is_taken_by_the_program_rules_and_refused_by_every_other(name, captured):
    inputs, rewards, scores = _batch(3)
    if getattr(ALLOCATORS[name], "takes_size", False):
        for size in (None, 2):
            del captured[:]
            plan = plan_continuations(inputs, allocator=name, rng=3, size=size)
            for b, d in enumerate(captured):
                _check_group(name, plan.info, b, d, plan.pi[b], plan.joint[b],
                             plan.selected[b], rewards[b], scores[b], rewards[b])
    else:
        with pytest.raises(ValueError, match=f"size must be None for allocator '{name}'"):
            plan_continuations(inputs, allocator=name, rng=3, size=2)


# ----------------------------------------------------------------- the prompt-level comparators
def _comparator_support(name, info, pi, fin):
    """Every sample of comparator ``name``'s design of one group, written out here."""
    if name == "dppo":
        return np.ones((1, G), dtype=bool), np.ones(1)
    unf = np.flatnonzero(~fin)
    k = int(info["k"]) if name in PROMPT_LEVEL else None
    if name == "pair_joint" or (k is not None and k < 2):  # Bernoulli at pi (k/U below two)
        masks = np.array(list(itertools.product([False, True], repeat=G)))
        probs = np.prod(np.where(masks, pi, 1.0 - pi), axis=1)
        return masks[probs > 0], probs[probs > 0]
    masks = []
    for chosen in itertools.combinations(unf, k):
        m = fin.copy()
        m[list(chosen)] = True
        masks.append(m)
    return np.array(masks), np.full(len(masks), 1.0 / len(masks))


def _floor(name, inputs, min_rollouts):
    """The per-prompt minimum of a prompt-level comparator (HORA: ``min(m, U_b)``; VIP, DUET:
    also ``min(U_b, max(0, 2 - F_b))``, ``min_group = 2`` counting the finished)."""
    U, F = inputs.n_unfinished, inputs.finished.sum(axis=1)
    low = np.minimum(U, min_rollouts)
    return low if name == "hora" else np.maximum(low, np.minimum(U, np.maximum(0, 2 - F)))


def _assert_refused_as_biased(name, inputs, err, rewards, scores, **opts):
    """``err`` refuses a plan with a prompt of no continuation: it names the allocator, the
    first such prompt ``b``, ``k_b = 0``, ``U_b`` and the fix, and that group's estimate under
    the comparator's design (enumerated) would indeed be biased."""
    _, info = COMPARATORS[name].pi(inputs, **opts)
    U = inputs.n_unfinished
    bad = np.flatnonzero((info["k"] == 0) & (U >= 1))
    assert bad.size and not info["all_pairs_positive"][bad].any()
    b = int(bad[0])
    msg = str(err)
    assert msg.startswith(f"allocator {name!r} continues k_b = 0 of the U_b = {U[b]} "
                          f"unfinished candidates of prompt b = {b}: "), msg
    assert "rho_ij = 0.0" in msg and "min_rollouts >= 1" in msg and "anchor_pair=True" in msg
    fin = inputs.finished[b]
    masks, probs = _comparator_support(name, {"k": 0}, info["joint"][b].diagonal(), fin)
    est = pair_ht_gradient(np.broadcast_to(rewards[b], masks.shape),
                           np.broadcast_to(scores[b], masks.shape + scores.shape[-1:]), masks,
                           np.broadcast_to(info["joint"][b], (*masks.shape, G)))
    target = pair_gradient(rewards[b], scores[b])
    assert np.abs(probs @ est - target).max() > 1e-6 * max(float(np.abs(target).max()), 1e-300)


@pytest.mark.parametrize(("name", "budget", "min_rollouts"),
                         [(n, None, None) for n in sorted(COMPARATORS)]
                         + [(n, k, m) for n in PROMPT_LEVEL for k in (0, 3, 6, 9)
                            for m in (0, None)])
def test_comparator_plan_is_the_steps_design_and_exactly_unbiased(name, budget, min_rollouts):
    """comparator_plan against its design enumerated here; its joint is the step's; every
    group is exactly unbiased. Otherwise both refuse: a rollout budget below the per-prompt
    minimums ("budget infeasible"), or, with ``min_rollouts=0`` passed, a plan with a prompt of
    no continuation (its group's estimate checked to be biased). Of the 12 unfinished
    candidates, rollout budgets 0 and 3 are below the default minimums (``min_rollouts=1``: 4
    for HORA, 5 for VIP and DUET) and leave prompts with no continuation at 0; 6 and 9 (and
    the token budget's default, 6) give every prompt one or more by default."""
    opts = {} if budget is None else {"rollout_budget": budget}
    if min_rollouts is not None:
        opts["min_rollouts"] = min_rollouts
    seen = set()
    for seed in (0, 1):
        inputs, rewards, scores = _batch(seed, 0.5)
        try:
            plan = comparator_plan(inputs, name, rng=seed, **opts)
        except ValueError as err:
            with pytest.raises(ValueError) as in_step:
                plan_continuations(inputs, allocator=name, rng=seed, **opts)
            if "budget infeasible" in str(err):
                assert name in PROMPT_LEVEL and str(in_step.value) == str(err)
                m = 1 if min_rollouts is None else min_rollouts
                assert _floor(name, inputs, m).sum() > budget
                seen.add("infeasible")
            else:  # the one other refusal: a prompt with no continuation
                assert name in PROMPT_LEVEL and min_rollouts == 0
                _assert_refused_as_biased(name, inputs, err, rewards, scores, **opts)
                _assert_refused_as_biased(name, inputs, in_step.value, rewards, scores, **opts)
                assert "plan_continuations(..., anchor_pair=True)" in str(err)
                seen.add("no continuation")
            continue
        # pair_joint without a size is its Bernoulli design; the step passes PAIR's rules
        # size "auto" (PAIR's fixed-size design: the grid above), so it is asked for None here
        step = plan_continuations(inputs, allocator=name, rng=seed,
                                  **({**opts, "size": None} if name == "pair_joint" else opts))
        np.testing.assert_allclose(plan.pi, step.pi, rtol=0, atol=1e-12)
        np.testing.assert_allclose(plan.joint, step.joint, rtol=0, atol=1e-12)
        fin = inputs.finished
        for b in range(fin.shape[0]):
            info_b = {key: (v[b] if key == "k" else v) for key, v in plan.info.items()}
            masks, probs = _comparator_support(name, info_b, plan.pi[b], fin[b])

            class Enumerated:  # the written-out design, for _check_group
                @staticmethod
                def support(masks=masks, probs=probs):
                    return masks, probs

            _check_group(name, plan.info, b, Enumerated, plan.pi[b], plan.joint[b],
                         plan.selected[b], rewards[b], scores[b], rewards[b])
        seen.add("planned")
    if min_rollouts is None:  # the default: every prompt continues one or more, or refused
        assert seen == ({"planned"} if budget is None or budget >= 6 else {"infeasible"})
    elif name == "hora" and budget == 0:
        assert seen == {"no continuation"}  # the biased case was met and refused


@pytest.mark.parametrize("name", PROMPT_LEVEL)
def test_a_comparator_plan_with_a_prompt_of_no_continuation_is_refused(name):
    """``min_rollouts=0`` (the rule as read from the paper) at a rollout budget that buys only
    the ``min_group`` floor (VIP, DUET: 2 + 1 + 0 + 0 = 3) or nothing (HORA: 0) leaves a prompt
    with ``k_b = 0 < U_b``: refused by the step and by ``comparator_plan``; the default
    (``min_rollouts=1``) refuses that budget as infeasible, and ``anchor_pair=True`` plans it."""
    inputs, rewards, scores = _batch(0)
    budget = 0 if name == "hora" else int(_floor(name, inputs, 0).sum())
    with pytest.raises(ValueError, match=rf"allocator '{name}' continues k_b = 0 of the U_b = "
                       r"\d+ unfinished candidates of prompt b = \d+: .*min_rollouts >= 1 .*"
                       r"or anchor_pair=True$") as err:
        plan_continuations(inputs, allocator=name, rng=0, rollout_budget=budget,
                           min_rollouts=0)
    _assert_refused_as_biased(name, inputs, err.value, rewards, scores, rollout_budget=budget,
                              min_rollouts=0)
    with pytest.raises(ValueError, match=rf"allocator '{name}' continues k_b = 0 .* or plan "
                       r"with pairht\.step\.plan_continuations\(\.\.\., anchor_pair=True\)"):
        comparator_plan(inputs, name, rng=0, rollout_budget=budget, min_rollouts=0)
    with pytest.raises(ValueError, match=r"budget infeasible.*min_rollouts"):
        plan_continuations(inputs, allocator=name, rng=0, rollout_budget=budget)
    plan = plan_continuations(inputs, allocator=name, rng=0, rollout_budget=budget,
                              min_rollouts=0, anchor_pair=True)
    assert (plan.info["k"] == 0).any() and plan.metrics["min_joint"] > 0


@pytest.mark.parametrize("name", PROMPT_LEVEL)
def test_the_default_comparators_refuse_a_rollout_budget_below_one_per_prompt(name):
    """At a budget ratio of 0.4 the token budget buys 4 rollouts of the 12 unfinished
    candidates: HORA's default minimum (one per prompt, 4) fits and every group is positive;
    VIP's and DUET's (``min_group`` and ``min_rollouts=1``: 2 + 1 + 1 + 1 = 5) does not, and
    the step refuses the budget rather than plan a prompt with no continuation."""
    inputs, _, _ = _batch(0, 0.4)
    if name == "hora":
        plan = plan_continuations(inputs, allocator=name, rng=0)
        assert plan.info["rollout_budget"] == 4 and (plan.info["k"] == 1).all()
        assert plan.info["all_pairs_positive"].all() and plan.metrics["min_joint"] > 0
        return
    assert _floor(name, inputs, 1).sum() == 5
    with pytest.raises(ValueError, match=r"budget infeasible: the per-prompt minimums need "
                       r"(sum\(lower\) = )?5 rollouts but the budget is 4"):
        plan_continuations(inputs, allocator=name, rng=0)


@pytest.mark.parametrize("name", ["vip", "duet"])
def test_one_finished_candidate_gives_one_continuation_drawn_bernoulli_not_srswor(name):
    """VIP's and DUET's min_group counts a finished candidate, so a prompt with one gets
    k_b = 1. SRSWOR of one would never observe a pair of unfinished candidates (its pair-HT
    estimate is biased: checked); the comparators and the step draw Bernoulli(1/U_b)."""
    fin = np.zeros((2, G), dtype=bool)
    fin[0, 2] = True
    inputs = StepInputs.from_ratio(np.full((2, G), 0.5), np.full((2, G), 20.0), fin, 0.5,
                                   history={"successes": np.array([4.0, 4.0]),
                                            "trials": np.array([8.0, 8.0])})
    plan = comparator_plan(inputs, name, rng=0, rollout_budget=3)
    assert plan.info["k"].tolist() == [1, 2] and plan.info["all_pairs_positive"].all()
    U = G - 1
    unf = np.flatnonzero(~fin[0])
    np.testing.assert_allclose(plan.joint[0][np.ix_(unf, unf)],
                               np.where(np.eye(U, dtype=bool), 1 / U, 1 / U**2), rtol=0,
                               atol=1e-15)
    step = plan_continuations(inputs, allocator=name, rng=0, rollout_budget=3)
    np.testing.assert_allclose(step.joint, plan.joint, rtol=0, atol=1e-15)
    assert step.metrics["min_joint"] == pytest.approx(1 / U**2, abs=1e-15)
    rng = np.random.default_rng(0)
    r, s = rng.uniform(size=G), rng.normal(size=(G, 3))
    srs = srswor_joint(np.array([1]), fin[:1])[0]  # SRSWOR of one of the U unfinished
    sup = np.array([fin[0] | (np.arange(G) == u) for u in unf])  # its U samples, equally likely
    est = pair_ht_gradient(np.broadcast_to(r, sup.shape), np.broadcast_to(s, (U, G, 3)), sup,
                           np.broadcast_to(srs, (U, G, G)))
    assert np.abs(est.mean(axis=0) - pair_gradient(r, s)).max() > 1e-3


@pytest.mark.parametrize("name", ["srswor", "hora"])
def test_two_of_six_is_drawn_srswor_though_its_float_sum_is_below_two(name):
    """pi = 1/3 on six unfinished candidates sums to 2 - 2.2e-16 in float64: the fixed size is
    2 (the fixed-size designs' integer tolerance), drawn as SRSWOR of two with
    rho_ij = 2 / 30, the comparators' own joint; not Bernoulli(1/3)."""
    x = StepInputs.from_ratio(np.full((1, 6), 0.5), np.full((1, 6), 30.0),
                              np.zeros((1, 6), bool), 1.0 / 3.0,
                              history={"successes": np.array([4.0]), "trials": np.array([8.0])})
    assert float(np.sum(np.full(6, 1.0 / 3.0))) < 2.0
    opts = {"rollout_budget": 2} if name == "hora" else {}
    plan = plan_continuations(x, allocator=name, rng=0, **opts)
    np.testing.assert_allclose(plan.pi, 1.0 / 3.0, rtol=0, atol=1e-15)
    off = plan.joint[0][~np.eye(6, dtype=bool)]
    np.testing.assert_allclose(off, 2.0 / 30.0, rtol=0, atol=1e-15)
    assert plan.selected.sum() == 2
    if name == "hora":
        np.testing.assert_allclose(plan.joint, plan.info["joint"], rtol=0, atol=1e-15)
