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

The one exception is asserted, not skipped: a prompt-level comparator (VIP, HORA, DUET) can
continue no candidate of a prompt (``k_b = 0``). Its group then has ``rho_ij = 0`` with an
unfinished candidate, ``info["all_pairs_positive"]`` is False, and the estimate is biased
(checked to be). ``comparator_plan`` is checked the same way against an enumeration of its
design written out here, and must agree with the step's plan.
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
from pairht.step import ALLOCATORS, StepInputs, allocator_names, plan_continuations

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
    kind = getattr(ALLOCATORS[name], "estimator", "ht")
    if kind == "ht":
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


def _check_group(name, info, b, design, pi, joint, selected, rewards, scores, baselines,
                 unfinished):
    """The step's group ``b`` against its design's support; returns whether it is unbiased."""
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
    if off.min() > 0:
        np.testing.assert_allclose(mean, target, rtol=0, atol=tol)
        if name in PROMPT_LEVEL:
            assert info["all_pairs_positive"][b]
        return True
    # Only a prompt-level comparator leaves a pair unobservable: no continuation at all.
    assert name in PROMPT_LEVEL, (name, b, joint)
    assert info["k"][b] == 0 and unfinished >= 1 and not info["all_pairs_positive"][b]
    assert np.abs(mean - target).max() > 1e-6 * max(float(np.abs(target).max()), 1e-300)
    return False


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
    for seed in (0, 1):
        inputs, rewards, scores = _batch(seed)
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
                         rewards[b], scores[b], baselines[b], int((~fin[b]).sum()))


@pytest.mark.parametrize("name", allocator_names())
def test_an_anchor_pair_makes_every_rule_unbiased_even_without_continuations(name, captured):
    """anchor_pair=True forces a uniformly drawn pair into every draw: every rho_ij > 0, so
    even a comparator's prompt with no continuation (HORA at a budget of 0) is unbiased."""
    inputs, rewards, scores = _batch(2)
    opts = {"rollout_budget": 0} if name == "hora" else {}
    plan = plan_continuations(inputs, allocator=name, rng=2, anchor_pair=True, **opts)
    if name == "hora":
        assert (plan.info["k"] == 0).all()
    baselines = np.where(inputs.finished, rewards, plan.inputs.p_hat)
    for b, d in enumerate(captured):
        assert _check_group(name, {"all_pairs_positive": np.ones(4, bool)}, b, d, plan.pi[b],
                            plan.joint[b], plan.selected[b], rewards[b], scores[b],
                            baselines[b], 0)


@pytest.mark.parametrize("name", allocator_names())
def test_a_size_is_taken_by_the_program_rules_and_refused_by_every_other(name, captured):
    inputs, rewards, scores = _batch(3)
    if getattr(ALLOCATORS[name], "takes_size", False):
        for size in (None, 2):
            del captured[:]
            plan = plan_continuations(inputs, allocator=name, rng=3, size=size)
            for b, d in enumerate(captured):
                assert _check_group(name, plan.info, b, d, plan.pi[b], plan.joint[b],
                                    plan.selected[b], rewards[b], scores[b], rewards[b], 0)
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


@pytest.mark.parametrize(("name", "budget"),
                         [(n, None) for n in sorted(COMPARATORS)]
                         + [(n, k) for n in PROMPT_LEVEL for k in (0, 3, 9)])
def test_comparator_plan_is_the_steps_design_and_exactly_unbiased(name, budget):
    """comparator_plan against its design enumerated here; its joint is the step's; each group
    is unbiased or reported (k_b = 0). Rollout budgets 0 and 3 of the 12 unfinished candidates
    leave prompts at 0 or 1 continuation; 9 (and the token budget's default) give most two."""
    opts = {} if budget is None else {"rollout_budget": budget}
    seen_zero = False
    for seed in (0, 1):
        inputs, rewards, scores = _batch(seed)
        try:
            plan = comparator_plan(inputs, name, rng=seed, **opts)
        except ValueError as err:  # below VIP's / DUET's per-prompt minimums
            assert name in ("vip", "duet") and "budget infeasible" in str(err)
            U = inputs.n_unfinished
            floor = np.minimum(U, np.maximum(0, 2 - inputs.finished.sum(axis=1)))
            assert floor.sum() > budget
            continue
        step = plan_continuations(inputs, allocator=name, rng=seed, **opts)
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

            ok = _check_group(name, plan.info, b, Enumerated, plan.pi[b], plan.joint[b],
                              plan.selected[b], rewards[b], scores[b], rewards[b],
                              int((~fin[b]).sum()))
            seen_zero |= not ok
    if name == "hora" and budget == 0:
        assert seen_zero  # the biased case was met and reported


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
