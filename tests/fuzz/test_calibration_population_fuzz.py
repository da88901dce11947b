"""Fuzz calibration and the audit's population loader: bad values refused by name; valid
values give exact results (Brier and IPW losses against their formulas, a population file
round trip bit for bit).

Tolerances: the Brier score of n <= 20 terms in [0, 1] is a sum of n float64 products, exact
to n * 2**-53 ~ 2.2e-15 relative; we allow 1e-14 absolute (values are at most 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pairht.audit.population import (
    Population,
    load_population,
    save_population,
    synthetic_population,
)
from pairht.calibration import (
    brier,
    cost_mape,
    ece,
    fit_temperature,
    ipw_brier_loss,
    ipw_log_cost_loss,
)

from ._fuzz import PROB_BAD, REAL_BAD, corrupt, fuzz_settings, raises_naming

pytestmark = pytest.mark.fuzz_long

P = np.array([0.2, 0.9, 0.5, 0.7])
Y = np.array([0.0, 1.0, 1.0, 0.0])
PI = np.array([0.5, 0.25, 1.0, 0.8])
MASK = np.ones(4, dtype=bool)
C = np.array([10.0, 20.0, 5.0, 40.0])

CAL_CASES = [
    ("brier", "p", PROB_BAD, lambda v: brier(v, Y)),
    ("brier", "y", PROB_BAD, lambda v: brier(P, v)),
    ("brier", "weights", (*(k for k in REAL_BAD if k != "none"), "negative"),  # None: equal
     lambda v: brier(P, Y, weights=v)),
    ("ece", "p", PROB_BAD, lambda v: ece(v, Y)),
    ("ece", "y", PROB_BAD, lambda v: ece(P, v)),
    ("fit_temperature", "logits", REAL_BAD, lambda v: fit_temperature(v, Y)),
    ("ipw_brier_loss", "p", PROB_BAD, lambda v: ipw_brier_loss(v, Y, PI, MASK)),
    ("ipw_brier_loss", "y", PROB_BAD, lambda v: ipw_brier_loss(P, v, PI, MASK)),
    ("ipw_brier_loss", "pi", PROB_BAD, lambda v: ipw_brier_loss(P, Y, v, MASK)),
    ("ipw_log_cost_loss", "c_hat", (*REAL_BAD, "negative"),
     lambda v: ipw_log_cost_loss(v, C, PI, MASK)),
    ("ipw_log_cost_loss", "c", (*REAL_BAD, "negative"),
     lambda v: ipw_log_cost_loss(C, v, PI, MASK)),
    ("cost_mape", "c_hat", REAL_BAD, lambda v: cost_mape(v, C)),
    ("cost_mape", "c", (*REAL_BAD, "negative"), lambda v: cost_mape(C, v)),
]
GOOD = {"p": P, "y": Y, "weights": PI, "logits": P, "pi": PI, "c_hat": C, "c": C}


@pytest.mark.parametrize(("case", "arg", "kinds", "call"), CAL_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CAL_CASES])
@fuzz_settings(8)
@given(data=st.data())
def test_calibration_refuses_bad_arrays_by_name(case, arg, kinds, call, data):
    kind = data.draw(st.sampled_from(kinds), label="kind")
    raises_naming(arg, lambda: call(corrupt(kind, GOOD[arg], data)))


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "15", None], ids=repr)
def test_ece_refuses_bad_bin_counts_by_name(value):
    raises_naming("n_bins", lambda: ece(P, Y, n_bins=value))


@pytest.mark.parametrize("value", ["none", "MEAN", None, 1], ids=repr)
def test_ipw_losses_refuse_bad_reductions_by_name(value):
    raises_naming("reduction", lambda: ipw_brier_loss(P, Y, PI, MASK, reduction=value))


_unit = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)


@fuzz_settings(30)
@given(data=st.data())
def test_brier_and_ipw_brier_equal_their_formulas(data):
    n = data.draw(st.integers(1, 20))
    p = data.draw(hnp.arrays(np.float64, n, elements=_unit))
    y = data.draw(hnp.arrays(np.float64, n, elements=_unit))
    pi = data.draw(hnp.arrays(np.float64, n, elements=st.floats(0.01, 1.0)))
    mask = data.draw(hnp.arrays(np.bool_, n))
    want = sum((a - b) ** 2 for a, b in zip(p.tolist(), y.tolist())) / n
    assert abs(brier(p, y) - want) <= 1e-14
    ipw = sum((a - b) ** 2 / q for a, b, q, m in zip(p.tolist(), y.tolist(), pi.tolist(),
                                                       mask.tolist()) if m) / n
    assert abs(ipw_brier_loss(p, y, pi, mask) - ipw) <= 1e-14 * max(1.0, ipw * n)


# ------------------------------------------------------------------ populations
FIELDS = ("p_hat", "c_hat", "rewards", "costs", "prefix_len", "scores")
POP_KINDS = {"p_hat": PROB_BAD, "c_hat": (*REAL_BAD, "negative"), "rewards": REAL_BAD,
             "costs": (*REAL_BAD, "negative"), "prefix_len": (*REAL_BAD, "negative"),
             "scores": REAL_BAD}


def _fields():
    pop = synthetic_population(2, 4, rng=0)
    return {k: np.array(getattr(pop, k), dtype=np.float64) for k in FIELDS}


@pytest.mark.parametrize("field", FIELDS)
@fuzz_settings(8)
@given(data=st.data())
def test_population_refuses_bad_fields_by_name(field, data):
    arrays = _fields()
    kind = data.draw(st.sampled_from(POP_KINDS[field]), label="kind")
    if kind == "none" and field == "scores":
        kind = "nan"  # scores=None is valid when gram is given; that case is tested below
    arrays[field] = corrupt(kind, arrays[field], data)
    raises_naming(field, lambda: Population(**arrays))


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("dtype", [object, str, complex])
def test_population_files_with_non_numeric_arrays_are_refused_by_name(tmp_path, field, dtype):
    arrays = _fields()
    arrays[field] = arrays[field].astype(dtype)
    arrays["format_version"] = np.array(1)
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)  # object arrays are pickled: the loader must refuse, by name
    err = raises_naming(field, lambda: load_population(path))
    assert str(path) in str(err)


@fuzz_settings(10)
@given(prompts=st.integers(1, 3), g=st.integers(2, 5), seed=st.integers(0, 2**32 - 1),
       as_gram=st.booleans())
def test_population_round_trips_bit_for_bit(tmp_path_factory, prompts, g, seed, as_gram):
    pop = synthetic_population(prompts, g, as_gram=as_gram, rng=seed)
    path = tmp_path_factory.mktemp("pop") / "pop.npz"
    save_population(path, pop)
    back = load_population(path)
    for key in (*FIELDS[:-1], "gram" if as_gram else "scores"):
        assert np.array_equal(getattr(back, key), getattr(pop, key)), key
