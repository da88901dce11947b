"""Issue 11, item 7 (allocation): every public function refuses bad arguments by name.

Each case names the function, the bad argument and the pattern the message must contain: the
argument's name and the rule. Wrong kinds (``None``, strings for flags, bools for counts)
raise ``TypeError``; wrong values raise ``ValueError``.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from pairht.allocation import (
    ProblemOptions,
    allocate,
    auto_size,
    diagnostics,
    disagreement,
    edge_proxy,
    estimate_multipliers,
    kkt_residual,
    largest_affordable_size,
    pointwise_allocation,
    proxy_gradient,
    proxy_value,
    reference_slsqp,
    uniform_allocation,
    water_fill,
)
from pairht.allocation.reference import _ALLOCATE_DEFAULTS
from shared import peak_bytes

P = [0.1, 0.5, 0.9, 0.5]
C = [100.0, 400.0, 200.0, 300.0]
A = [[0.0, 1.0], [1.0, 0.0]]


def test_allocate_without_predictions_raises_naming_p_hat():
    """Old code: p_hat=None silently gave the uniform allocation."""
    with pytest.raises(TypeError, match="p_hat"):
        allocate(None, C, 500.0)


@pytest.mark.parametrize("flag", ["fallback", "covariance_term"])
@pytest.mark.parametrize("value", ["no", "False", 1, None])
def test_bool_settings_must_be_bools(flag, value):
    """Old code: fallback="no" switched the fallback on (a non-empty string is truthy)."""
    with pytest.raises(TypeError, match=f"{flag} must be True or False"):
        allocate(P, C, 500.0, **{flag: value})


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"proxy": "bogus"}, ValueError, r"proxy must be one of \('disagreement'"),
    ({"proxy": None}, ValueError, "proxy must be one of"),
    ({"tol": 0.0}, ValueError, r"tol must be a finite number in \(0, 1\)"),
    ({"tol": float("nan")}, ValueError, "tol must be a finite number"),
    ({"tol": "1e-8"}, TypeError, "tol must be a real number"),
    ({"max_iter": 0}, ValueError, "max_iter must lie in"),
    ({"max_iter": 10.0}, TypeError, "max_iter must be an int"),
    ({"pi_min": "0.08"}, TypeError, "pi_min must be a real number"),
    ({"pi_min": True}, TypeError, "pi_min must be a real number"),
    ({"pi_min": float("inf")}, ValueError, "pi_min must be a finite number"),
    ({"size": True}, TypeError, "size must be None, 'auto' or an int"),
    ({"size": "AUTO"}, ValueError, "size must be None, 'auto' or an int"),
    ({"size": [2, 3]}, ValueError, "size must be an int or have the batch shape"),
    ({"size": 2.5}, ValueError, "size must be None, 'auto', an int"),
    ({"warm_start": [0.5, 0.5, 0.5, 1.5]}, ValueError, "warm_start must lie in"),
])
def test_allocate_argument_errors_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        allocate(P, C, 500.0, **kwargs)


@pytest.mark.parametrize(("budget", "error", "match"), [
    ("500", TypeError, "budget must be numeric"),
    (None, TypeError, "budget must be an array of real numbers"),
    (float("inf"), ValueError, "budget must be finite"),
    (1.0, ValueError, "budget is infeasible"),
])
def test_allocate_budget_errors_name_the_budget(budget, error, match):
    with pytest.raises(error, match=match):
        allocate(P, C, budget)


@pytest.mark.parametrize(("args", "error", "match"), [
    (([[1.0, 2.0]], [[1.0, 1.0]], 0.1, 0.1), ValueError, "budget is infeasible"),
    (([[1.0, -2.0]], [[1.0, 1.0]], 1.5, 0.1), ValueError, "w must be nonnegative"),
    (([[1.0, np.nan]], [[1.0, 1.0]], 1.5, 0.1), ValueError, "w must be finite"),
    (([[1.0, 2.0, 3.0]], [[1.0, 1.0]], 1.5, 0.1), ValueError, "w and c must both have shape"),
    (([[1.0, 2.0]], [[1.0, 0.0]], 1.5, 0.1), ValueError, "c must be positive"),
    (([[1.0, 2.0]], [[1.0, 1.0]], 1.5, 0.0), ValueError, "pi_min must be a finite number"),
    (([[1.0, 2.0]], [[1.0, 1.0]], 1.5, "x"), TypeError, "pi_min must be a real number"),
    ((None, [[1.0, 1.0]], 1.5, 0.1), TypeError, "w must be an array of real numbers"),
])
def test_water_fill_validates_every_argument(args, error, match):
    with pytest.raises(error, match=match):
        water_fill(*args)


def test_water_fill_spends_the_budget_exactly_on_valid_input():
    pi = water_fill([[1.0, 3.0, 0.0]], [[100.0, 100.0, 50.0]], 110.0, 0.1)
    np.testing.assert_allclose(pi @ np.array([100.0, 100.0, 50.0]), 110.0, rtol=1e-14)
    assert pi[0, 2] == 0.1


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    ((None, C, 500.0), {}, TypeError, "p_hat"),
    ((P, C, 500.0), {"size": 3}, TypeError, "do not pass size"),
    ((P, C, 10.0), {}, ValueError, "budget is infeasible"),
    ((P, C, 500.0), {"fallback": "no"}, TypeError, "fallback must be True or False"),
])
def test_auto_size_validates_every_argument(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        auto_size(*args, **kwargs)


@pytest.mark.parametrize(("args", "error", "match"), [
    (([1.0, -1.0], 1.0, 0.1), ValueError, "c_hat must be positive"),
    (([1.0], 1.0, 0.1), ValueError, "G >= 2"),
    (([1.0, 1.0], -1.0, 0.1), ValueError, "budget must be positive"),
    (([1.0, 1.0], [1.0, 2.0, 3.0], 0.1), ValueError, "budget must be a scalar or have"),
    (([1.0, 1.0], 1.0, 2.0), ValueError, "pi_min must be a finite number"),
])
def test_largest_affordable_size_validates_every_argument(args, error, match):
    with pytest.raises(error, match=match):
        largest_affordable_size(*args)


def test_largest_affordable_size_matches_a_direct_count():
    """mincost(n) <= budget iff the n cheapest units fit: counted here by brute force."""
    rng = np.random.default_rng(4)
    for _ in range(50):
        G = int(rng.integers(2, 9))
        c = 10 ** rng.uniform(0, 2, G)
        lo = float(rng.choice([0.05, 0.1, 0.3]))
        budget = lo * c.sum() + rng.uniform(0, 1) * (1 - lo) * c.sum()
        best = -1
        for n in range(G + 1):
            if n < G * lo - 1e-12:
                continue
            pi = np.full(G, lo)
            left = n - lo * G
            for i in np.argsort(c):
                step = min(1 - lo, left)
                pi[i] += step
                left -= step
            if c @ pi <= budget * (1 + 1e-12):
                best = n
        assert int(largest_affordable_size(c, budget, lo)) == best


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"covariance": "yes"}, TypeError, "covariance must be True or False"),
    ({"result": "res"}, TypeError, "result must be an AllocationResult"),
    ({"budget": "300"}, TypeError, "budget must be numeric"),
    ({"budget": -1.0}, ValueError, "budget must be positive"),
    ({"budget": [1.0, 2.0]}, ValueError, "budget must be a scalar or have"),
    ({"a": [[0.0, -1.0], [-1.0, 0.0]]}, ValueError, "a must be nonnegative"),
    ({"joint": np.eye(3)}, ValueError, "joint must have shape"),
])
def test_diagnostics_validates_every_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        diagnostics([0.5, 0.5], [100.0, 100.0], **kwargs)


def test_diagnostics_reports_the_unspent_budget():
    res = allocate([0.1, 0.3, 0.5, 0.7, 0.9], [100.0] * 5, 250.0, size="auto")
    d = diagnostics(res.pi, [100.0] * 5, result=res)
    np.testing.assert_allclose(d.unspent_budget, 50.0, rtol=1e-12)
    d = diagnostics(res.pi, [100.0] * 5, budget=260.0)
    np.testing.assert_allclose(d.unspent_budget, 60.0, rtol=1e-12)
    assert np.isnan(diagnostics(res.pi, [100.0] * 5).unspent_budget)
    with pytest.raises(ValueError, match="result must have the batch shape"):
        diagnostics(np.tile(res.pi, (2, 1)), np.full((2, 5), 100.0), result=res)


_KKT = {"pi": [0.5, 0.5], "a": A, "b": [0.0, 0.0], "c": [1.0, 1.0], "budget": 1.0,
        "pi_min": 0.1, "lam": 8.0}


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"pi": [0.5, 0.0]}, ValueError, "pi must be positive"),
    ({"pi": [0.5 + 1j, 0.5]}, TypeError, "pi must be real"),
    ({"a": [[0.0, 1.0], [2.0, 0.0]]}, ValueError, "a must be symmetric"),
    ({"b": [0.0, -1.0]}, ValueError, "b must be nonnegative"),
    ({"b": [0.0]}, ValueError, "b must have the shape of pi"),
    ({"c": [1.0, 0.0]}, ValueError, "c must be positive"),
    ({"budget": 0.0}, ValueError, "budget must be positive"),
    ({"pi_min": 0.0}, ValueError, "pi_min must be a finite number"),
    ({"lam": np.nan}, ValueError, "lam must be finite"),
    ({"lam": "8"}, TypeError, "lam must be numeric"),
    ({"size": 1}, ValueError, "nu .* is required"),
    ({"size": 5, "nu": 0.0}, ValueError, "size must lie in"),
])
def test_kkt_residual_validates_every_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        kkt_residual(**{**_KKT, **kwargs})


@pytest.mark.parametrize("fn", [proxy_value, proxy_gradient])
def test_proxy_helpers_validate_their_input(fn):
    with pytest.raises(ValueError, match="pi must be positive"):
        fn([0.0, 1.0], A, [0.0, 0.0])
    with pytest.raises(ValueError, match="a must have shape"):
        fn([0.5, 1.0], np.zeros((3, 3)), [0.0, 0.0])


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"budget": 0.0}, ValueError, "budget must be a finite number in"),
    ({"budget": "1"}, TypeError, "budget must be a real number"),
    ({"pi_min": 0.0}, ValueError, "pi_min must be a finite number"),
    ({"size": 3.0}, ValueError, "size must be a finite number in"),
    ({"rtol": 2.0}, ValueError, "rtol must be a finite number"),
    ({"c": [1.0, -1.0]}, ValueError, "c must be positive"),
    ({"pi": [[0.5, 0.5]], "a": [A], "b": [[0.0, 0.0]], "c": [[1.0, 1.0]]}, ValueError,
     "pi must be 1-d"),
])
def test_estimate_multipliers_validates_every_argument(kwargs, error, match):
    base = {"pi": [0.5, 0.5], "a": A, "b": [0.0, 0.0], "c": [1.0, 1.0], "budget": 1.0,
            "pi_min": 0.1}
    with pytest.raises(error, match=match):
        estimate_multipliers(**{**base, **kwargs})


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"fallback": "no"}, TypeError, "fallback must be True or False"),
    ({"relative_ftol": 1}, TypeError, "relative_ftol must be True or False"),
    ({"covariance_term": "no"}, TypeError, "covariance_term must be True or False"),
    ({"ftol": 0.0}, ValueError, "ftol must be a finite number"),
    ({"maxiter": 0}, ValueError, "maxiter must lie in"),
    ({"proxy": "nope"}, ValueError, "proxy must be one of"),
])
def test_reference_slsqp_validates_every_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        reference_slsqp(P, C, 500.0, **kwargs)


def test_reference_slsqp_refuses_a_misspelt_option():
    """Its problem options arrive as **options (ProblemOptions): a typo must not be ignored."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'fallbak'"):
        reference_slsqp(P, C, 500.0, fallbak=False)


def test_problem_options_are_allocates_options_with_its_defaults():
    """ProblemOptions is allocate's parameter list after pi_min, up to its keyword-only
    solver settings, with the same annotations; reference_slsqp poses the same problem by
    default, with the appendix's fallback."""
    params = list(inspect.signature(allocate).parameters.values())
    names = [p.name for p in params]
    named = [p for p in params[names.index("pi_min") + 1:] if p.kind is p.POSITIONAL_OR_KEYWORD]
    declared = {k: getattr(v, "__forward_arg__", v)
                for k, v in ProblemOptions.__annotations__.items()}
    assert declared == {p.name: p.annotation for p in named}
    assert ProblemOptions.__required_keys__ == frozenset()
    assert _ALLOCATE_DEFAULTS == {p.name: p.default for p in named}
    spelled = reference_slsqp(P, C, 500.0, proxy="disagreement", covariance_term=True,
                              fallback=True)
    default = reference_slsqp(P, C, 500.0)
    np.testing.assert_array_equal(default.pi, spelled.pi)
    no_cov = reference_slsqp(P, C, 500.0, covariance_term=False)
    assert np.abs(no_cov.pi - default.pi).max() > 1e-3  # the option is read


def test_baselines_name_their_arguments():
    with pytest.raises(TypeError, match="c_hat"):
        uniform_allocation(None, 1.0)
    with pytest.raises(TypeError, match="p_hat"):
        pointwise_allocation(None, C, 500.0)
    with pytest.raises(TypeError, match="pi_min must be a real number"):
        uniform_allocation(C, 500.0, pi_min="0.1")
    with pytest.raises(ValueError, match="kind must be one of"):
        edge_proxy(P, kind="energies")


# ------------------------------------------------------------------ issue: new user's findings
BIG_G = 100_000  # its G x G float64 table is 74.5 GiB: numpy raised MemoryError deep inside


@pytest.mark.parametrize("call", [
    lambda p, c: allocate(p, c, 0.5 * BIG_G),
    lambda p, c: reference_slsqp(p, c, 0.5 * BIG_G),
    lambda p, c: auto_size(p, c, 0.5 * BIG_G),
    lambda p, c: edge_proxy(p),
    lambda p, c: disagreement(p),
], ids=["allocate", "reference_slsqp", "auto_size", "edge_proxy", "disagreement"])
def test_a_group_too_large_for_memory_is_refused_by_name_before_allocating(call):
    p, c = np.full(BIG_G, 0.5), np.ones(BIG_G)

    def refused():
        with pytest.raises(ValueError, match=r"the G x G pair table of p_hat with shape "
                                             r"\(100000,\) .*G = 100000\) needs 10000000000 "
                                             r"float64 values \(74\.5 GiB\), more than "
                                             r"MAX_TABLE_BYTES \(1\.0 GiB\)"):
            call(p, c)

    # refused up front: a few copies of the (G,) inputs, not a slice of the table
    assert peak_bytes(refused) < 16 * 2**20


def test_the_limit_counts_every_problem_of_a_batch(monkeypatch):
    # a limit of ten 64 x 64 tables: one group fits, a batch of 20 in one call does not
    monkeypatch.setattr("pairht._validation.MAX_TABLE_BYTES", 10 * 8 * 64 * 64)
    p, c = np.full((20, 64), 0.5), np.ones((20, 64))
    assert allocate(p[0], c[0], 32.0).converged
    with pytest.raises(ValueError, match=r"shape \(20, 64\) \(20 problem\(s\) x G x G, "
                                         r"G = 64\) needs 81920 float64 values.*split the "
                                         r"batch"):
        allocate(p, c, 32.0)


def test_p_hat_out_of_range_is_called_a_success_prediction_not_an_inclusion_probability():
    # the old message said "(they are inclusion probabilities)" of p_hat, which they are not
    with pytest.raises(ValueError) as info:
        allocate([0.1, 1.5, 0.9, 0.5], C, 500.0)
    msg = str(info.value)
    assert msg.startswith("p_hat must lie in [0, 1] (p_hat are success predictions); "
                          "p_hat[1] = 1.5"), msg
    assert "inclusion" not in msg
    # a design's pi still is one: the role follows the argument, not a fixed phrase
    with pytest.raises(ValueError, match=r"warm_start are inclusion probabilities"):
        allocate(P, C, 500.0, warm_start=[0.5, 0.5, 0.5, 1.5])


SCALAR_TYPES = {"objective": float, "kkt_residual": float, "iterations": int, "status": str,
                "converged": bool, "fallback_used": bool, "expected_cost": float,
                "unspent_budget": float, "budget_multiplier": float, "size_multiplier": float,
                "size": int}


@pytest.mark.parametrize("solve", [
    lambda: allocate(P, C, 500.0),
    lambda: allocate(P, C, 500.0, size="auto"),
    lambda: allocate([0.5] * 4, C, 2000.0),  # closed form ("full")
    lambda: reference_slsqp(P, C, 500.0),
], ids=["optimal", "auto_size", "closed_form", "reference_slsqp"])
def test_a_single_problems_result_fields_are_python_scalars_not_0d_arrays(solve):
    # they were 0-d arrays: status=array('optimal', dtype='<U7')
    res = solve()
    for name, kind in SCALAR_TYPES.items():
        value = getattr(res, name)
        assert type(value) is kind, f"{name} = {value!r} is a {type(value).__name__}"
    assert isinstance(res.pi, np.ndarray) and res.pi.shape == (4,)
    assert f"status='{res.status}'" in repr(res)


def test_a_batchs_result_fields_stay_arrays_of_the_batch_shape():
    res = allocate([P, P], [C, C], 500.0)
    for name in SCALAR_TYPES:
        assert np.shape(getattr(res, name)) == (2,), name
    assert res.status.tolist() == ["optimal", "optimal"]


def test_single_design_diagnostics_are_python_floats():
    res = allocate(P, C, 500.0)
    d = diagnostics(res.pi, C, result=res)
    for name, value in d.as_dict().items():
        if name != "pi":
            assert type(value) is float, f"{name} = {value!r}"
    assert d.residual == res.kkt_residual
    batched = diagnostics(np.tile(res.pi, (2, 1)), np.tile(C, (2, 1)))
    assert batched.expected_edges.shape == (2,)
