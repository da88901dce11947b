"""Every extension point is one pairht.registry.Registry whose entries declare their
capabilities, and the names the rest of the package reads are derived from them."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from pairht.allocation.proxies import PROXIES, PROXY_KINDS, edge_proxy
from pairht.designs import DESIGNS, make_design
from pairht.estimators import VARIANTS
from pairht.registry import Registry
from pairht.step import ALLOCATORS, program_allocators, register_allocator
from pairht.step.allocators import AllocatorCapabilities


def test_each_extension_point_is_the_one_registry_type():
    from pairht.audit.rows import ROWS

    for reg in (DESIGNS, ALLOCATORS, VARIANTS, PROXIES, ROWS):
        assert isinstance(reg, Registry)


def test_design_capabilities_are_read_from_the_class_and_its_constructor():
    for name, cls in DESIGNS.items():
        caps = DESIGNS.capabilities(name)
        assert caps.fixed_size == cls.fixed_size
        assert caps.takes_rng == ("rng" in inspect.signature(cls).parameters)
    assert DESIGNS.names(takes_rng=True) == ("randomized_dependent_rounding",)
    with pytest.raises(ValueError, match=r"kind must be one of \["):
        make_design("poisson", [0.5, 0.5])


def test_allocator_capabilities_replace_the_flags_the_step_read_by_getattr():
    assert program_allocators() == ("pair", "pair_batch", "pair_joint")  # comparators loaded
    assert ALLOCATORS.capabilities("pair_dr") == AllocatorCapabilities(
        takes_score_norm=True, takes_known_rewards=True, estimator="difference")
    assert ALLOCATORS.names(takes_score_norm=True) == ("pair_strata", "pair_dr")
    for name in ALLOCATORS:  # no allocator object carries a flag the registry does not declare
        for flag in ("takes_size", "takes_score_norm", "takes_known_rewards", "estimator"):
            assert not hasattr(ALLOCATORS[name], flag), (name, flag)
    with pytest.raises(ValueError, match="already registered"):
        register_allocator("uniform")(ALLOCATORS["uniform"])
    with pytest.raises(ValueError, match=r"unknown capabilities \['needs_magic'\]"):
        register_allocator("magic_example", needs_magic=True)(
            type("Magic", (), {"name": "magic_example", "pi": lambda self, inputs: None}))
    assert "magic_example" not in ALLOCATORS


def test_proxies_and_variants_are_registered_with_what_they_need():
    assert PROXY_KINDS == tuple(PROXIES) == ("disagreement", "score_norm", "energy")
    assert PROXIES.capabilities("score_norm").needs == "score_norm"
    p = np.array([[0.2, 0.7, 0.5]])
    np.testing.assert_array_equal(edge_proxy(p, "score_norm", score_norm=np.ones((1, 3))),
                                  edge_proxy(p))  # m = 1: (1 + 1)^2 / 4 = 1
    assert VARIANTS.capabilities("clipped").needs_w_max
    assert not VARIANTS.capabilities("hajek").linear
    assert VARIANTS.names(unbiased=True) == ("exact",)
