"""Generated-token accounting of a draw (pairht.estimators.token_counts)."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.designs import Bernoulli, ConditionalPoisson
from pairht.estimators import token_counts


def test_counts_by_hand():
    t = token_counts([[3, 5], [2, 2]], [[10, 7], [4, 40]], [[True, False], [True, True]],
                     [[0.5, 0.25], [1.0, 0.8]])
    assert (t.prefix, t.suffix) == (12.0, 54.0)
    assert t.full_suffix_ht == 10 / 0.5 + 4 / 1.0 + 40 / 0.8
    assert t.generated == 66.0


@pytest.mark.parametrize("design", [Bernoulli([0.3, 0.9, 0.5, 0.6]),
                                    ConditionalPoisson([0.3, 0.9, 0.5, 0.3])])
def test_full_suffix_estimate_is_design_unbiased_by_enumeration(design):
    """``E[sum_i J_i C_i / pi_i] = sum_i C_i`` exactly, over every sample of the design."""
    costs = np.array([11.0, 3.0, 25.0, 7.0])
    masks, probs = design.support()
    est = [token_counts(np.zeros(4), costs, m, design.pi).full_suffix_ht for m in masks]
    assert float(probs @ np.array(est)) == pytest.approx(costs.sum(), rel=1e-12)
    spent = [token_counts(np.zeros(4), costs, m, design.pi).suffix for m in masks]
    assert float(probs @ np.array(spent)) == pytest.approx(design.pi @ costs, rel=1e-12)


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match="mask must be a bool array"):
        token_counts([1, 1], [2, 2], [1, 0], [0.5, 0.5])
    with pytest.raises(ValueError, match=r"pi must have the shape of mask \(2,\)"):
        token_counts([1, 1], [2, 2], [True, False], [0.5])
    with pytest.raises(ValueError, match=r"pi must be > 0 .*pi\[1\] = 0.0"):
        token_counts([1, 1], [2, 2], [True, True], [0.5, 0.0])
