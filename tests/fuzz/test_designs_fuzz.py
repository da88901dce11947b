"""Fuzz the designs: bad arguments are refused by name; valid designs are exact.

Exact checks, against the design's own enumerated support (``support()`` sums path
probabilities, an independent computation from ``joint()``/``inclusion()`` for every design
here): marginals, joints and 3- and 4-unit inclusions. Tolerance 1e-12: each reference is a
sum of at most 2**7 = 128 products of probabilities (round-off below 128 * 2**-53 ~ 1.4e-14),
and the designs document their inclusions to a few ulps times N.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pairht.designs import (
    AnchoredPair,
    Bernoulli,
    ConditionalPoisson,
    DependentRounding,
    PositivityWarning,
    RandomizedDependentRounding,
    make_design,
)
from pairht.designs.base import inclusion_from_support
from pairht.testing.strategies import (
    fixed_size_inclusion_probabilities,
    inclusion_probabilities,
)

from ._fuzz import PROB_BAD, corrupt, fuzz_settings, raises_naming

pytestmark = pytest.mark.fuzz_long

EXACT = 1e-12


def _rdr(pi, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PositivityWarning)
        return RandomizedDependentRounding(pi, **kw)


#: constructor name -> (build(pi), needs an integer sum)
BUILDERS = {
    "bernoulli": (Bernoulli, False),
    "conditional_poisson": (ConditionalPoisson, True),
    "dependent_rounding": (DependentRounding, False),
    "randomized_dependent_rounding": (lambda pi: _rdr(pi, n_orders=4, rng=0), False),
    "anchored_bernoulli": (lambda pi: AnchoredPair(Bernoulli(pi)), False),
    "make_design": (lambda pi: make_design("conditional_poisson", pi), True),
}


# ------------------------------------------------------------------ bad arguments
@pytest.mark.parametrize("kind", PROB_BAD)
@pytest.mark.parametrize("builder", sorted(BUILDERS))
@fuzz_settings(3)
@given(data=st.data())
def test_constructors_refuse_bad_pi_by_name(builder, kind, data):
    build, _ = BUILDERS[builder]
    good = np.array([0.25, 0.75, 0.5, 0.5])
    raises_naming("pi", lambda: build(corrupt(kind, good, data)))


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("pi", [0.5, [], [[0.5, 0.5]], np.ones((2, 2)) / 2], ids=str)
def test_constructors_refuse_bad_pi_shapes_by_name(builder, pi):
    raises_naming("pi", lambda: BUILDERS[builder][0](pi))


def test_fixed_size_design_refuses_a_fractional_size_by_name():
    raises_naming("pi", lambda: ConditionalPoisson([0.5, 0.7]))


BAD_INTS = [-1, 1.5, True, "3", None, 2.0 + 0j, np.nan]


@pytest.mark.parametrize("value", BAD_INTS, ids=repr)
def test_method_arguments_are_refused_by_name(value):
    d = ConditionalPoisson([0.25, 0.75, 0.5, 0.5])
    if value is not None:  # size=None means one draw
        raises_naming("size", lambda: d.sample(rng=0, size=value))
    if value is not None:  # rng=None means fresh entropy
        raises_naming("rng", lambda: d.sample(rng=value))
    raises_naming("max_units", lambda: d.support(max_units=value))
    raises_naming("idx", lambda: d.inclusion(value if value is not None else [None, None]))
    raises_naming("n_orders", lambda: RandomizedDependentRounding(d.pi, n_orders=value))
    raises_naming("order", lambda: DependentRounding(d.pi, order=[value, 0, 1, 2]))


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda d: d.inclusion([0, 0]), "idx"),
        (lambda d: d.inclusion([0, 9]), "idx"),
        (lambda d: d.inclusion([[0, 1], [2]]), "idx"),
        (lambda d: d.inclusion([0.0, 1.0]), "idx"),
        (lambda d: RandomizedDependentRounding(d.pi, n_orders=10**12), "n_orders"),
        (lambda d: RandomizedDependentRounding(d.pi, orders=[[0, 1, 2, 2]]), "order"),
        (lambda d: AnchoredPair("not a design"), "base"),
        (lambda d: make_design("nope", d.pi), "kind"),
    ],
)
def test_other_bad_arguments_are_refused_by_name(call, name):
    raises_naming(name, lambda: call(ConditionalPoisson([0.25, 0.75, 0.5, 0.5])))


# ------------------------------------------------------------------ valid designs are exact
@st.composite
def designs(draw):
    """A design of a drawn kind on at most 7 units, with its requested ``pi``."""
    kind = draw(st.sampled_from([*sorted(BUILDERS), "dependent_rounding_ordered"]))
    if kind in ("conditional_poisson", "make_design", "randomized_dependent_rounding"):
        pi = draw(fixed_size_inclusion_probabilities(2, 7))
    else:
        pi = draw(inclusion_probabilities(2, 7))
    if kind == "dependent_rounding_ordered":
        order = draw(st.permutations(range(pi.size)))
        return DependentRounding(pi, order=order), pi, kind
    if kind == "randomized_dependent_rounding":
        k = draw(st.integers(1, 6))
        return _rdr(pi, n_orders=k, rng=draw(st.integers(0, 2**32 - 1))), pi, kind
    return BUILDERS[kind][0](pi), pi, kind


@fuzz_settings(60)
@given(drawn=designs(), data=st.data())
def test_valid_designs_match_their_enumerated_support(drawn, data):
    design, requested, kind = drawn
    n = design.n_units
    masks, probs = design.support()
    assert np.all(probs > 0)
    assert abs(probs.sum() - 1.0) <= EXACT
    # first order: the design achieves the requested pi (fixed-size designs may move a sum
    # off an integer by <= 1e-9, dependent rounding rounds crossings within 1e-12 / 1e-9)
    if kind.startswith("anchored"):
        m = n * (n - 1) / 2
        requested = ((n - 1) * (n - 2) / 2 * requested + n - 1) / m
    assert np.max(np.abs(design.pi - requested)) <= 1e-9 + EXACT
    np.testing.assert_allclose(probs @ masks, design.pi, rtol=0, atol=EXACT)
    # second order: joint() against the support, symmetric with pi on its diagonal
    joint = design.joint()
    expected = (masks.T * probs) @ masks
    np.testing.assert_allclose(joint, expected, rtol=0, atol=EXACT)
    assert np.array_equal(joint, joint.T) and np.array_equal(np.diag(joint), design.pi)
    # third and fourth order on drawn sets
    for k in (3, 4):
        if n >= k:
            sets = data.draw(st.lists(st.permutations(range(n)), min_size=1, max_size=4))
            rows = np.array([sorted(s[:k]) for s in sets])
            want = [inclusion_from_support(masks, probs, r) for r in rows]
            np.testing.assert_allclose(design.inclusion(rows), want, rtol=0, atol=EXACT)
    # draws lie in the support, with the design's fixed size when it has one
    draws = design.sample(rng=data.draw(st.integers(0, 2**32 - 1)), size=32)
    codes = {m.tobytes() for m in masks}
    assert all(d.tobytes() in codes for d in draws)
    if design.fixed_size:
        assert np.all(draws.sum(axis=1) == round(design.pi.sum()))


@fuzz_settings(20)
@given(pi=inclusion_probabilities(2, 6), data=st.data())
def test_all_subsets_of_a_bernoulli_design_factorise(pi, data):
    d = Bernoulli(pi)
    n = pi.size
    k = data.draw(st.integers(1, n))
    rows = np.array(list(itertools.combinations(range(n), k)))
    np.testing.assert_allclose(d.inclusion(rows), np.prod(pi[rows], axis=1), rtol=1e-15, atol=0)
