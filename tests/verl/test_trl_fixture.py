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

from trl_batch import KEYS, RULES, load, trl_batch  # noqa: E402


@pytest.mark.parametrize("rule", RULES)
def test_stored_trl_batch_is_what_the_trl_trainer_computes(tmp_path, rule):
    fresh = trl_batch(tmp_path, rule)
    stored = load(rule)
    # the fixture exercises the claim: unselected rows and observed pairs in it
    assert (~stored["mask"]).any() and (stored["mask"].sum(-1) >= 2).any()
    for key in KEYS:
        np.testing.assert_allclose(fresh[key], stored[key], rtol=1e-12, atol=1e-12,
                                   equal_nan=True, err_msg=key)
