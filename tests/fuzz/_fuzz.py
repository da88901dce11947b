"""Shared pieces of the fuzz suite: example budgets, bad values, and the naming check.

The rule under test (issue 11, "no silent wrong answers"): every public function of the core
answers a bad argument with ``ValueError`` or ``TypeError`` whose message names the argument,
and answers valid arguments with results that pass exact checks.

Example budgets: the short form (CI, ``pytest tests``) keeps the whole directory well under a
minute on two shared cores; ``PAIRHT_FUZZ_LONG=1`` (or ``-m fuzz_long``) multiplies every
budget by :data:`LONG_FACTOR`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: Budget multiplier of the long form.
LONG_FACTOR = 25
LONG = os.environ.get("PAIRHT_FUZZ_LONG", "") not in ("", "0")


def fuzz_settings(examples: int) -> settings:
    """``examples`` hypothesis examples (times :data:`LONG_FACTOR` in the long form).

    Everything else is inherited from the loaded profile (``ci`` derandomizes, see
    ``tests/conftest.py``); there are no deadlines, as numba may compile on a first call.
    """
    return settings(
        max_examples=examples * (LONG_FACTOR if LONG else 1),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


#: Kinds of bad values for an argument that must be an array of real numbers.
REAL_BAD = ("nan", "inf", "complex", "strings", "object", "none", "bool", "ragged")
#: ... and for an array of probabilities.
PROB_BAD = (*REAL_BAD, "negative", "above_one")


def corrupt(kind: str, good: np.ndarray, data: st.DataObject) -> Any:
    """``good`` (a float array with at least 2 entries) spoilt in the way ``kind`` names.

    The spoilt entry is drawn, so that every position is tried.
    """
    arr = np.array(good, dtype=np.float64)
    flat = arr.reshape(-1)
    k = data.draw(st.integers(0, flat.size - 1), label="position")
    if kind == "nan":
        flat[k] = np.nan
    elif kind == "inf":
        flat[k] = data.draw(st.sampled_from([np.inf, -np.inf]), label="sign")
    elif kind == "negative":
        flat[k] = -data.draw(st.floats(1e-9, 10.0), label="magnitude")
    elif kind == "above_one":
        flat[k] = 1.0 + data.draw(st.floats(1e-9, 10.0), label="excess")
    elif kind == "complex":
        # even a zero imaginary part is refused: the dtype, not the value, is wrong
        return arr + 1j * data.draw(st.sampled_from([0.0, 1e-3, 1.0]), label="imaginary part")
    elif kind == "strings":
        return arr.astype(str)
    elif kind == "object":
        return arr.astype(object)
    elif kind == "none":
        return None
    elif kind == "bool":
        return arr > 0.5
    elif kind == "ragged":
        rows = arr.reshape(-1).tolist()
        return [rows, rows[:-1]]
    else:  # pragma: no cover - a typo in a test
        raise AssertionError(kind)
    return arr


def raises_naming(name: str, fn: Callable[[], Any]) -> BaseException:
    """Call ``fn``; assert it raises ValueError or TypeError whose message names ``name``.

    The name must appear as a word (``pi`` in "pi must ..." but not only inside "pi_min").
    """
    with pytest.raises((ValueError, TypeError)) as info:
        fn()
    msg = str(info.value)
    assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", msg), (
        f"the error does not name {name!r}: {type(info.value).__name__}: {msg}"
    )
    return info.value
