"""Every rule on design inputs raises a ValueError naming the argument, value and rule."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.designs import (
    DESIGNS,
    Bernoulli,
    ConditionalPoisson,
    DependentRounding,
    RandomizedDependentRounding,
    make_design,
)
from shared import peak_bytes

KINDS = sorted(DESIGNS)
GOOD = [0.5, 0.5, 0.25, 0.75]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("pi", "match"),
    [
        ([0.5, np.nan, 0.5], r"pi must be finite.*pi\[1\] = .*nan"),
        ([0.5, np.inf, 0.5], r"pi must be finite"),
        ([0.5, 1.5, 0.5], r"pi must lie in \[0, 1\].*pi\[1\] = .*1\.5"),
        ([-0.1, 0.6, 0.5], r"pi must lie in \[0, 1\].*pi\[0\]"),
        ([[0.5, 0.5], [0.5, 0.5]], r"pi must be a 1-d array.*\(2, 2\)"),
        (0.5, r"pi must be an array with at least one axis"),
        ([], r"pi must have at least one unit"),
    ],
)
def test_bad_pi(kind, pi, match):
    with pytest.raises(ValueError, match=match):
        make_design(kind, pi)


def test_cps_non_integer_sum():
    with pytest.raises(ValueError, match=r"pi must sum to an integer.*7\.5.*Bernoulli"):
        ConditionalPoisson(np.full(15, 0.5))
    with pytest.raises(ValueError, match=r"sum\(pi\) = 1\.000001"):
        ConditionalPoisson([0.5, 0.500001])


@pytest.mark.parametrize("kind", KINDS)
def test_bad_rng_and_size(kind):
    d = make_design(kind, GOOD)
    with pytest.raises(ValueError, match=r"rng must be an int seed.*got str"):
        d.sample(rng="seed")
    with pytest.raises(ValueError, match=r"rng must be an int seed.*got float"):
        d.sample(rng=1.5)
    for size in (-1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="size must be a non-negative int or None"):
            d.sample(rng=0, size=size)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("idx", "match"),
    [
        ([0, 4], r"idx entries must lie in \[0, 3\] \(N = 4 units\)"),
        ([-1, 2], r"idx entries must lie in \[0, 3\]"),
        ([1, 1], r"idx must hold distinct units"),
        ([[0, 1], [2, 2]], r"idx must hold distinct units"),
        ([0.0, 1.0], r"idx must hold integer unit indices; got dtype float64"),
        (np.zeros((2, 0), dtype=int), r"idx must have shape \(k,\) or \(m, k\) with k >= 1"),
        (np.zeros((1, 1, 2), dtype=int), r"idx must have shape"),
    ],
)
def test_bad_idx(kind, idx, match):
    with pytest.raises(ValueError, match=match):
        make_design(kind, GOOD).inclusion(idx)


@pytest.mark.parametrize("kind", KINDS)
def test_support_too_large(kind):
    pi = np.full(22, 0.5)
    d = (
        make_design(kind, pi)
        if kind != "randomized_dependent_rounding"
        else make_design(kind, pi, n_orders=16, rng=0)
    )
    with pytest.raises(ValueError, match=r"limited to N <= 20 units; this design has N = 22"):
        d.support()


@pytest.mark.parametrize(
    ("order", "match"),
    [
        (
            [0, 1, 2],
            r"order must be a permutation of range\(4\) with shape \(4,\); got shape \(3,\)",
        ),
        ([0, 1, 1, 2], r"order must be a permutation of range\(4\).*\[0, 1, 1, 2\]"),
        ([0, 1, 2, 4], r"order must be a permutation"),
        ([0.0, 1.0, 2.0, 3.0], r"order must hold integer unit indices"),
        ([[0, 1, 2, 3]], r"order must be a permutation.*got shape \(1, 4\)"),
    ],
)
def test_bad_order(order, match):
    with pytest.raises(ValueError, match=match):
        DependentRounding(GOOD, order=order)


@pytest.mark.parametrize(
    ("n_orders", "error", "match"),
    [
        (0, ValueError, r"n_orders must lie in \[1, 4096\].*got 0"),
        (-2, ValueError, r"n_orders must lie in \[1, 4096\].*got -2"),
        (1.5, TypeError, r"n_orders must be an int; got 1.5"),
        (True, TypeError, r"n_orders must be an int; got True"),
        ("4", TypeError, r"n_orders must be an int; got '4'"),
    ],
)
def test_bad_n_orders(n_orders, error, match):
    with pytest.raises(error, match=match):
        RandomizedDependentRounding(GOOD, n_orders=n_orders)


def test_n_orders_beyond_max_orders_is_refused_before_any_work():
    # issue 11: n_orders=10**12 ran unbounded (a permutation drawn per order)
    from pairht.designs.dependent_rounding import MAX_ORDERS

    with pytest.raises(ValueError, match=r"n_orders must lie in \[1, 4096\].*MAX_ORDERS.*got "
                                         r"1000000000000"):
        RandomizedDependentRounding(GOOD, n_orders=10**12)
    with pytest.raises(ValueError, match=r"orders must have shape \(K, 4\) with 1 <= K <= "
                                         r"MAX_ORDERS = 4096"):
        RandomizedDependentRounding(GOOD, orders=np.tile(np.arange(4), (MAX_ORDERS + 1, 1)))
    assert RandomizedDependentRounding(GOOD, n_orders=MAX_ORDERS, rng=0).n_orders == MAX_ORDERS


def test_bad_orders_matrix():
    with pytest.raises(ValueError, match=r"orders must have shape \(K, 4\)"):
        RandomizedDependentRounding(GOOD, orders=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="order must be a permutation"):
        RandomizedDependentRounding(GOOD, orders=[[0, 1, 2, 2]])


def test_bad_rng_for_orders():
    with pytest.raises(ValueError, match="rng must be an int seed"):
        RandomizedDependentRounding(GOOD, n_orders=2, rng="x")


def test_unknown_kind_lists_valid_kinds():
    with pytest.raises(ValueError, match=r"kind must be one of \['bernoulli', 'conditional_po"):
        make_design("poisson", GOOD)
    with pytest.raises(ValueError, match="kind must be one of"):
        make_design(None, GOOD)


# ------------------------------------------------------------------ issue 11 regressions
@pytest.mark.parametrize(
    ("pi", "match"),
    [
        (np.array([0.25, 0.75]) + 0.5j, r"pi must be real \(a complex dtype would silently"),
        (np.array([0.25, 0.75]) + 0j, r"pi must be real"),
        (["0.25", "0.75"], r"pi must be numeric, not strings"),
        (np.array([0.25, 0.75], dtype=object), r"pi must be numeric; an object array"),
        ([0.25, None], r"pi must be numeric; an object array"),
        ([True, False], r"pi must be numeric, not boolean"),
        (None, r"pi must be an array of real numbers; got None"),
        ([[0.5, 0.5], [0.5]], r"pi must be a rectangular array"),
    ],
    ids=["complex", "complex-zero-imag", "strings", "object", "with-None", "bool", "None",
         "ragged"],
)
@pytest.mark.parametrize("kind", ["bernoulli", "conditional_poisson", "dependent_rounding"])
def test_non_real_pi_is_refused_not_converted(kind, pi, match):
    # the old coercion np.asarray(pi, float) dropped imaginary parts and parsed strings
    with pytest.raises((TypeError, ValueError), match=match):
        make_design(kind, pi)


@pytest.mark.parametrize(
    ("rng", "match"),
    [(-5, r"rng must be a non-negative int seed.*got -5"), (True, r"rng must be .*bool True")],
)
def test_negative_and_boolean_seeds_are_refused_by_name(rng, match):
    with pytest.raises(ValueError, match=match):
        Bernoulli(GOOD).sample(rng=rng)


def test_support_limit_and_ragged_index_sets_are_refused_by_name():
    d = Bernoulli(GOOD)
    with pytest.raises(TypeError, match=r"max_units must be an int; got '8'"):
        d.support(max_units="8")
    with pytest.raises(ValueError, match=r"max_units must lie in \[1, inf\]; got 0"):
        d.support(max_units=0)
    with pytest.raises(ValueError, match=r"idx must be a \(k,\) or \(m, k\) array.*ragged"):
        d.inclusion([[0, 1], [2]])


# ------------------------------------------------------------------ tables beyond memory
BIG_N = 100_000  # N x N float64 is 74.5 GiB; CPS's (N + 1) x (n + 1) tables 37 GiB


@pytest.mark.parametrize(("call", "match"), [
    (lambda pi: Bernoulli(pi).joint(),
     r"Bernoulli\.joint\(\) with N = 100000 units \(an N x N table\) needs 10000000000 "
     r"float64 values \(74\.5 GiB\), more than MAX_TABLE_BYTES \(1\.0 GiB\)"),
    (lambda pi: DependentRounding(pi).joint(), r"DependentRounding\.joint\(\) with N = 100000"),
    (lambda pi: ConditionalPoisson(pi),
     r"ConditionalPoisson with N = 100000 free units and sample size n = 50000 .* needs "
     r"5000150001 float64 values \(37\.3 GiB\), more than MAX_TABLE_BYTES"),
    (lambda pi: make_design("mixed_size", pi), r"ConditionalPoisson with N = 100000"),
], ids=["bernoulli_joint", "dependent_rounding_joint", "conditional_poisson",
        "mixed_size"])
def test_tables_beyond_the_memory_limit_are_refused_by_name_before_allocating(call, match):
    pi = np.full(BIG_N, 0.5)

    def refused():
        with pytest.raises(ValueError, match=match):
            call(pi)

    assert peak_bytes(refused) < 64 * 2**20  # the (N,) vectors, not a table


def test_a_sample_size_beyond_the_memory_limit_is_refused_by_name(monkeypatch):
    monkeypatch.setattr("pairht._validation.MAX_TABLE_BYTES", 8 * 5 * 1000)
    d = Bernoulli(GOOD)
    assert d.sample(rng=0, size=1000).shape == (1000, 4)  # 1000 x 5 uniforms: at the limit
    with pytest.raises(ValueError, match=r"Bernoulli\.sample\(size=1001\) with N = 4 units "
                                         r"\(a size x \(N \+ 1\) table of uniforms\) needs "
                                         r"5005 float64 values.*draw in smaller batches"):
        d.sample(rng=0, size=1001)


def test_the_randomized_mixture_sums_its_joints_without_stacking_them():
    # np.mean over K stacked N x N joints held K + 1 tables; the sum holds two
    d = RandomizedDependentRounding(np.tile([0.3, 0.7], 200), n_orders=16, rng=0)
    want = np.mean([p.joint() for p in d.parts], axis=0)
    got = d.joint()
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    peak = peak_bytes(d.joint)
    assert peak < 6 * 8 * 400**2, peak  # a few tables, not K = 16 of them


def test_a_design_probability_out_of_range_is_called_an_inclusion_probability():
    with pytest.raises(ValueError, match=r"pi must lie in \[0, 1\] \(pi are inclusion "
                                         r"probabilities\); pi\[1\] = 1\.5"):
        Bernoulli([0.5, 1.5])
