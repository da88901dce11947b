"""AnchoredPair: exact inclusions of orders 1-4 against enumeration of its support."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pairht.designs import Bernoulli, ConditionalPoisson, DependentRounding
from pairht.designs.anchored import AnchoredPair
from pairht.testing.strategies import (
    fixed_size_inclusion_probabilities,
    inclusion_probabilities,
)

from ._support import _rdr

BASES = {
    "bernoulli": (Bernoulli, inclusion_probabilities(2, 7)),
    "conditional_poisson": (ConditionalPoisson, fixed_size_inclusion_probabilities(2, 7)),
    "dependent_rounding": (DependentRounding, fixed_size_inclusion_probabilities(2, 7)),
    "randomized_dependent_rounding": (_rdr, fixed_size_inclusion_probabilities(2, 7)),
}


def support_inclusion(masks, probs, rows):
    return probs @ np.all(masks[:, rows], axis=2)


@pytest.mark.parametrize("base_kind", sorted(BASES))
@settings(max_examples=15)
@given(data=st.data())
def test_anchored_inclusions_equal_sums_over_support(base_kind, data):
    build, pis = BASES[base_kind]
    design = AnchoredPair(build(data.draw(pis)))
    masks, probs = design.support()
    n = design.n_units
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=0, atol=1e-14)
    assert np.all(masks.sum(axis=1) >= 2)  # every draw observes at least one edge
    np.testing.assert_allclose(design.pi, probs @ masks, rtol=0, atol=1e-14)
    x = masks.astype(float)
    np.testing.assert_allclose(design.joint(), (x * probs[:, None]).T @ x, rtol=0, atol=1e-14)
    for k in range(1, min(4, n) + 1):
        rows = np.array(list(itertools.combinations(range(n), k)))
        np.testing.assert_allclose(design.inclusion(rows), support_inclusion(masks, probs, rows),
                                   rtol=0, atol=1e-14)
    assert design.all_pairs_positive()
    off = ~np.eye(n, dtype=bool)
    assert np.all(design.joint()[off] >= 1.0 / (n * (n - 1) / 2) - 1e-15)


def test_anchored_pi_by_hand():
    # N = 3, M = 3: pi_i = (C(2, 2) * 0.5 + 2) / 3
    design = AnchoredPair(Bernoulli([0.5, 0.5, 0.5]))
    np.testing.assert_allclose(design.pi, np.full(3, 2.5 / 3), rtol=1e-15)
    # joint: (C(1, 2) * rho + 1 * (pi_i + pi_j) + 1) / 3 = (0 + 1 + 1) / 3
    np.testing.assert_allclose(design.joint()[0, 1], 2.0 / 3, rtol=1e-15)


def test_anchored_sampler_matches_support_probabilities():
    # 200k draws; each of the support probabilities is matched within 5 binomial sd
    design = AnchoredPair(ConditionalPoisson([0.2, 0.5, 0.7, 0.6]))
    masks, probs = design.support()
    draws = design.sample(rng=0, size=200_000)
    codes = draws @ (1 << np.arange(4))
    freq = np.array([(codes == c).mean() for c in masks @ (1 << np.arange(4))])
    assert draws.sum(axis=1).min() >= 2
    assert np.all(np.abs(freq - probs) <= 5 * np.sqrt(probs * (1 - probs) / 200_000))
    assert design.sample(rng=1).shape == (4,)


def test_anchored_rejects_bad_base():
    with pytest.raises(ValueError, match=r"base must be a pairht\.designs\.Design"):
        AnchoredPair([0.5, 0.5])
    with pytest.raises(ValueError, match="at least 2 units"):
        AnchoredPair(Bernoulli([0.5]))
