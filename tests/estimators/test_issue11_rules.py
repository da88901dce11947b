"""Issue 11 ("no silent wrong answers") in the estimators: each test fails on the old code.

- the exact covariance of fixed-size designs asked for an O(G^4) index table with no guard
  (2 GiB at G = 200): now bounded memory, a closed form for exchangeable designs, and a clear
  ValueError naming MAX_INCLUSION_TABLE beyond the limit;
- a joint matrix breaking the Frechet bounds was accepted;
- complex, string and object arrays were silently converted; ``full="no"`` meant True.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pairht.designs import Bernoulli, ConditionalPoisson
from pairht.estimators import (
    conditional_bias,
    design_covariance,
    edge_weights,
    pair_advantages,
    pair_ht_gradient,
)
from pairht.estimators import covariance as cov_mod
from shared import peak_bytes

from ._support import independent_joint

EPS = 2.0**-53


# ------------------------------------------------------------------ covariance memory
def test_covariance_beyond_the_table_limit_is_refused_before_allocating():
    from pairht.estimators.covariance import MAX_INCLUSION_TABLE

    g = 200  # C(200,3) + C(200,4) = 65998350 > 2**25: the old code asked for 2 GiB of rows
    assert math.comb(g, 3) + math.comb(g, 4) > MAX_INCLUSION_TABLE
    design = ConditionalPoisson(np.repeat([0.4, 0.6], g // 2))
    rng = np.random.default_rng(0)
    r, s = rng.random(g), rng.normal(size=(g, 2))

    def call():
        with pytest.raises(ValueError, match=r"G = 200 .*C\(G,3\) \+ C\(G,4\) = 65998350.*"
                                             r"MAX_INCLUSION_TABLE = 33554432"):
            design_covariance(r, s, design)

    # refused up front: the joint and scores only, not the 0.5 GiB table nor its rows
    assert peak_bytes(call) < 16 * 2**20


def test_srswor_covariance_at_large_G_needs_no_table():
    g = 200
    design = ConditionalPoisson(np.full(g, 0.5))  # equal pi: simple random sampling
    rng = np.random.default_rng(1)
    r, s = rng.random(g), rng.normal(size=(g, 2))
    out = {}
    peak = peak_bytes(lambda: out.setdefault("cov", design_covariance(r, s, design)))
    assert peak < 64 * 2**20, peak  # a few (G, G) matrices, not C(G, 4) values
    sigma = out["cov"].advantage_covariance  # a covariance matrix: symmetric, PSD
    assert np.array_equal(sigma, sigma.T)
    assert np.linalg.eigvalsh(sigma).min() >= -1e-12 * np.abs(sigma).max()


@pytest.mark.parametrize("ht", [False, True])
@pytest.mark.parametrize(
    "design",
    [ConditionalPoisson(np.full(7, 4 / 7)), ConditionalPoisson(np.full(9, 5 / 9)),
     Bernoulli(np.full(6, 0.3))],
    ids=["cps-7-of-4", "cps-9-of-5", "bernoulli-6"],
)
def test_exchangeable_closed_form_equals_the_general_kernel(design, ht, monkeypatch):
    g = design.n_units
    rho = design.joint()
    rng = np.random.default_rng(2)
    r = rng.random((3, g))
    r[0, :3] = r[0, 3]  # ties: a_ij = 0 on some pairs
    a = cov_mod._pair_coefficients(r, rho)
    assert all(design._exchangeable_inclusion(k) is not None for k in (2, 3, 4))  # fast path
    fast = cov_mod._general_sigma(a, design, rho, ht=ht)
    # force the O(G^4) table kernel (monkeypatch restores the shared instance afterwards)
    monkeypatch.setattr(design, "_exchangeable_inclusion", lambda k: None)
    slow = cov_mod._general_sigma(a, design, rho, ht=ht)
    # each entry sums at most G^2 products a_ij a_kl Delta (Delta / P <= 1 / P_min for ht)
    bound = (np.abs(a).sum(axis=(1, 2)) ** 2).max() / (rho.min() ** 2 if ht else 1.0)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=4 * g**4 * EPS * bound)
    assert 4 * g**4 * EPS * bound < 1e-6 * np.abs(slow).max()  # the tolerance is tight


def test_chunked_inclusion_tables_equal_one_batch_in_colex_order(monkeypatch):
    g = 9
    design = ConditionalPoisson(np.linspace(0.2, 0.8, g) * (4 / np.linspace(0.2, 0.8, g).sum()))
    monkeypatch.setattr(cov_mod, "INCLUSION_CHUNK", 7)  # many chunks, a ragged last one
    incl3, incl4, uniform = cov_mod._inclusion_tables(design)
    assert not uniform
    for k, table in ((3, incl3), (4, incl4)):
        colex = sorted(itertools.combinations(range(g), k), key=lambda c: c[::-1])
        assert np.array_equal(table, design.inclusion(np.array(colex)))
        for rank in (0, 1, len(colex) // 2, len(colex) - 1):
            assert tuple(cov_mod._colex_unrank(rank, k)) == colex[rank]


# ------------------------------------------------------------------ Frechet bounds of joint
PI = np.array([0.25, 0.75, 0.5, 0.5])
R = np.array([1.0, 0.0, 0.5, 1.0])
S = np.array([[1.0], [0.5], [-1.0], [2.0]])
MASK = np.ones(4, dtype=bool)


def test_a_joint_above_a_marginal_is_refused_naming_the_pair_and_rule():
    joint = ConditionalPoisson(PI).joint()
    joint[0, 1] = joint[1, 0] = 0.3  # > min(pi_0, pi_1) = 0.25: no design has this
    for call in (lambda: pair_ht_gradient(R, S, MASK, joint),
                 lambda: pair_advantages(R, MASK, joint),
                 lambda: edge_weights(MASK, joint)):
        with pytest.raises(ValueError, match=r"joint breaks the Frechet bounds.*pair \(0, 1\) "
                                             r"has joint\[0, 1\] = 0.3.*rho_ij <= min\(pi_i, "
                                             r"pi_j\) = 0.2[45]"):
            call()


def test_a_joint_below_the_lower_frechet_bound_is_refused():
    joint = ConditionalPoisson(PI).joint()
    joint[1, 2] = joint[2, 1] = 0.2  # < pi_1 + pi_2 - 1 = 0.25
    with pytest.raises(ValueError, match=r"pair \(1, 2\).*rho_ij >= pi_i \+ pi_j - 1 = 0.25"):
        pair_advantages(R, MASK, joint)


def test_frechet_allows_rounding_and_a_filled_outer_product():
    joint = ConditionalPoisson(PI).joint()
    joint[0, 1] = joint[1, 0] = 0.25 + 1e-10  # rounding, not a wrong matrix
    pair_advantages(R, MASK, joint)
    pair_advantages(R, MASK, independent_joint(PI))
    with pytest.raises(ValueError, match=r"np.fill_diagonal"):  # the bare outer product
        pair_advantages(R, MASK, np.outer(PI, PI))


def test_estimated_propensities_breaking_frechet_are_refused_by_name():
    design = ConditionalPoisson(PI)
    rho_hat = design.joint() * 2.0
    np.fill_diagonal(rho_hat, design.pi)
    with pytest.raises(ValueError, match=r"rho_hat breaks the Frechet bounds"):
        conditional_bias(R, S, design, weighting="exact", rho_hat=rho_hat)


# ------------------------------------------------------------------ non-real arrays, options
@pytest.mark.parametrize(
    ("value", "match"),
    [
        (R + 1j, r"rewards must be real"),
        (R.astype(str), r"rewards must be numeric, not strings"),
        (R.astype(object), r"rewards must be numeric; an object array"),
        (R > 0.5, r"rewards must be numeric, not boolean"),
        ([[1.0, 0.0], [1.0]], r"rewards must be a rectangular array"),
    ],
    ids=["complex", "strings", "object", "bool", "ragged"],
)
def test_non_real_rewards_are_refused_not_converted(value, match):
    joint = ConditionalPoisson(PI).joint()
    with pytest.raises((TypeError, ValueError), match=match):
        pair_ht_gradient(value, S, MASK, joint)
    with pytest.raises((TypeError, ValueError), match=match):
        design_covariance(value, S, ConditionalPoisson(PI))


def test_options_that_are_not_what_they_look_like_are_refused():
    design = ConditionalPoisson(PI)
    with pytest.raises(TypeError, match=r"full must be True, False or None; got 'no'"):
        design_covariance(R, S, design, full="no")  # was truthy: the matrix was computed
    with pytest.raises(TypeError, match=r"w_max must be a positive finite number; got True"):
        pair_advantages(R, MASK, design.joint(), weighting="clipped", w_max=True)
    with pytest.raises(TypeError, match=r"max_units must be an int; got 'x'"):
        conditional_bias(R, S, design, weighting="exact", max_units="x")
