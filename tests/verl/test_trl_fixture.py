"""The stored TRL batch (data/trl_batch_*.npz) is what the TRL trainer computes today.

Runs in the main environment (TRL installed); the verl suite compares the verl adapter with the
stored advantages (test_advantage.py), so together they check TRL == verl on one batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")
sys.path.insert(0, str(Path(__file__).parents[1] / "trl"))

from trl_batch import CASES, load, trl_batch


@pytest.mark.parametrize(("rule", "width"), CASES)
def test_stored_trl_batch_is_what_the_trl_trainer_computes(tmp_path, rule, width):
    fresh = trl_batch(tmp_path, rule, width)
    stored = load(rule, width)
    # the fixture exercises the claim: unselected rows and observed pairs in it
    selected = stored["row_selected"].reshape(3, 6)
    assert (~selected).any() and (selected.sum(-1) >= 2).any()
    assert sorted(fresh) == sorted(stored)
    for key, value in stored.items():
        if value.dtype.kind in "US":
            np.testing.assert_array_equal(fresh[key], value, err_msg=key)
        else:
            np.testing.assert_allclose(fresh[key], value, rtol=1e-12, atol=1e-12,
                                       equal_nan=True, err_msg=key)
