"""The registry maps each name to its class and passes keyword arguments through."""

from __future__ import annotations

import numpy as np

from pairht.designs import (
    DESIGNS,
    Bernoulli,
    ConditionalPoisson,
    DependentRounding,
    MixedSize,
    RandomizedDependentRounding,
    Stratified,
    make_design,
)


def test_every_kind_is_registered_under_its_name():
    assert DESIGNS == {
        "bernoulli": Bernoulli,
        "conditional_poisson": ConditionalPoisson,
        "dependent_rounding": DependentRounding,
        "randomized_dependent_rounding": RandomizedDependentRounding,
        "mixed_size": MixedSize,
        "stratified": Stratified,
    }
    for name, cls in DESIGNS.items():
        assert cls.name == name


def test_make_design_passes_keyword_arguments():
    d = make_design("dependent_rounding", [0.5, 0.5, 0.5, 0.5], order=[0, 2, 1, 3])
    assert isinstance(d, DependentRounding)
    np.testing.assert_array_equal(d.order, [0, 2, 1, 3])
    assert d.joint()[0, 2] == 0.0
    r = make_design("randomized_dependent_rounding", [0.5] * 4, n_orders=3, rng=1)
    assert r.n_orders == 3
    np.testing.assert_array_equal(
        r.orders, RandomizedDependentRounding([0.5] * 4, n_orders=3, rng=1).orders
    )
    assert make_design("conditional_poisson", [0.5, 0.5]).n == 1
    assert isinstance(make_design("bernoulli", [0.5]), Bernoulli)
