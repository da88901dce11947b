"""Forwarded option groups: declared once, equal to the documenting signature, typos refused.

``pair_advantages`` and ``pair_estimate`` forward :class:`WeightingOptions` to
``edge_weights``; ``conditional_bias`` forwards :class:`BiasOptions` to
``expected_edge_weights``. A ``TypedDict`` is only checked statically, so each test here
checks what would otherwise pass at run time: a key the documenting function lacks, and a
misspelt option, which must raise instead of being ignored.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from pairht.designs import Bernoulli
from pairht.estimators import (
    BiasOptions,
    WeightingOptions,
    conditional_bias,
    edge_weights,
    expected_edge_weights,
    pair_advantages,
    pair_estimate,
)

R = np.array([1.0, 0.0, 2.0])
S = np.array([[3.0], [1.0], [0.0]])
MASK = [True, True, False]


def _keyword_only(func, skip=()):
    """``{name: annotation text}`` of ``func``'s keyword-only parameters (``skip`` left out)."""
    return {name: param.annotation for name, param in inspect.signature(func).parameters.items()
            if param.kind is param.KEYWORD_ONLY and name not in skip}


def _declared(group):
    """``{key: annotation text}`` of a ``TypedDict`` (its annotations are strings here)."""
    return {key: getattr(ref, "__forward_arg__", ref) for key, ref in group.__annotations__.items()}


def test_weighting_options_are_edge_weights_keyword_parameters():
    assert _declared(WeightingOptions) == _keyword_only(edge_weights)
    assert WeightingOptions.__required_keys__ == frozenset()


def test_bias_options_are_expected_edge_weights_parameters_besides_weighting():
    assert _declared(BiasOptions) == _keyword_only(expected_edge_weights, skip=("weighting",))
    assert BiasOptions.__required_keys__ == frozenset()


def test_forwarded_weighting_options_reach_edge_weights():
    """Clipped weights with w_max: the forwarders agree with sum_i A_i s_i built from W."""
    joint = Bernoulli([0.3, 0.6, 0.9]).joint()
    opts = {"weighting": "clipped", "w_max": 2.0}
    w = edge_weights(MASK, joint, **opts)  # one observed edge: every sum has one term, exact
    want = 0.5 * (w * (R[:, None] - R[None, :])).sum(axis=1)
    np.testing.assert_array_equal(pair_advantages(R, MASK, joint, **opts), want)
    np.testing.assert_allclose(pair_estimate(R, S, MASK, joint, **opts), want @ S,
                               rtol=1e-15, atol=0)
    # and w_max is read: without the clip the exact weights differ on the observed edge
    assert pair_advantages(R, MASK, joint)[0] != want[0]


def test_forwarded_max_units_reaches_the_support_enumeration():
    design = Bernoulli([0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="limited to N <= 2"):
        conditional_bias(R, S, design, weighting="hajek", max_units=2)
    with pytest.raises(ValueError, match="limited to N <= 2"):
        expected_edge_weights(design, weighting="hajek", max_units=2)
    # a linear variant has a closed form and enumerates nothing, but still checks the value
    with pytest.raises(ValueError, match=r"max_units must lie in \[1, inf\]"):
        conditional_bias(R, S, design, weighting="unweighted", max_units=0)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: pair_advantages(R, MASK, wmax=2.0, weighting="clipped"), "wmax"),
    (lambda: pair_estimate(R, S, MASK, weigthing="unweighted"), "weigthing"),
    # a linear variant never reaches expected_edge_weights: the typo must still raise
    (lambda: conditional_bias(R, S, Bernoulli([0.5] * 3), weighting="unweighted", rhohat=None),
     "rhohat"),
    (lambda: conditional_bias(R, S, Bernoulli([0.5] * 3), weighting="hajek", maxunits=8),
     "maxunits"),
], ids=["pair_advantages", "pair_estimate", "conditional_bias_linear", "conditional_bias_ratio"])
def test_a_misspelt_option_is_refused_by_name(call, name):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        call()
