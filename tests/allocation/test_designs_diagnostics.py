"""design_for (fixed-size route) and the appendix diagnostics against enumeration."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation import (
    allocate,
    covariance_term,
    design_for,
    diagnostics,
    edge_proxy,
    proxy_value,
)
from pairht.designs import DESIGNS


def _solved(G=7, size=None, seed=0):
    rng = np.random.default_rng(seed)
    p, c = rng.beta(0.7, 0.7, G), 400 * np.exp(rng.normal(0, 0.7, G))
    return p, c, allocate(p, c, 0.5 * c.sum(), size=size)


@pytest.mark.parametrize("kind", sorted(DESIGNS))
def test_design_for_every_kind_reproduces_pi(kind):
    _, _, res = _solved(size=3)
    assert abs(res.pi.sum() - 3) <= 1e-12
    d = design_for(res.pi, kind)
    np.testing.assert_allclose(np.diag(d.joint()), res.pi, atol=1e-12)
    masks, probs = d.support()
    np.testing.assert_allclose(probs @ masks, res.pi, atol=1e-9)
    if DESIGNS[kind].fixed_size:
        assert np.all(masks.sum(1) == 3)


@pytest.mark.parametrize("kind", ["conditional_poisson", "dependent_rounding",
                                  "randomized_dependent_rounding"])
def test_fixed_size_design_needs_integral_sum(kind):
    _, _, res = _solved()
    assert abs(res.pi.sum() - round(res.pi.sum())) > 1e-6
    with pytest.raises(ValueError, match=r"size=n"):
        design_for(res.pi, kind)


def test_design_for_rejects_bad_input():
    with pytest.raises(ValueError, match="kind must be one of"):
        design_for([0.5, 0.5], "poisson")
    with pytest.raises(ValueError, match="1-d"):
        design_for([[0.5, 0.5]])
    with pytest.raises(ValueError, match="pi must lie in"):
        design_for([0.5, 1.5])


@pytest.mark.parametrize("kind", ["bernoulli", "conditional_poisson"])
def test_diagnostics_match_enumeration_over_the_support(kind):
    p, c, res = _solved(G=6, size=3, seed=4)
    d = design_for(res.pi, kind)
    masks, probs = d.support()
    joint = d.joint()
    a = edge_proxy(p)
    diag = diagnostics(res.pi, c, joint=joint, a=a, result=res)
    iu = np.triu_indices(6, 1)
    # expected observed edges and completed vertices, summed over every sample
    edges = np.array([np.sum(np.outer(m, m)[iu]) for m in masks])
    np.testing.assert_allclose(diag.expected_edges, probs @ edges, rtol=1e-12)
    np.testing.assert_allclose(diag.expected_completed, probs @ masks.sum(1), rtol=1e-12)
    np.testing.assert_allclose(diag.expected_cost, probs @ (masks @ c), rtol=1e-12)
    rho = joint[iu]
    np.testing.assert_allclose(diag.max_weight, np.max(1 / rho), rtol=1e-14)
    # ESS definition: (sum_e rho_e w_e)^2 / sum_e rho_e w_e^2 with w_e = 1/rho_e
    w = 1 / rho
    np.testing.assert_allclose(diag.expected_ess, (rho @ w) ** 2 / (rho @ w**2), rtol=1e-12)
    assert diag.expected_ess <= diag.expected_edges * (1 + 1e-12)
    np.testing.assert_allclose(diag.variance_proxy, res.objective, rtol=1e-12)
    np.testing.assert_allclose(diag.residual, res.kkt_residual)
    assert set(diag.as_dict()) >= {"pi", "expected_cost", "residual", "expected_edges",
                                   "expected_completed", "max_weight", "expected_ess",
                                   "variance_proxy"}


def test_diagnostics_batched_and_defaults():
    rng = np.random.default_rng(1)
    p, c = rng.uniform(size=(4, 5)), rng.uniform(1, 9, (4, 5))
    res = allocate(p, c, 0.5 * c.sum(1))
    d = diagnostics(res.pi, c, a=edge_proxy(p), result=res)
    assert d.expected_edges.shape == (4,)
    for k in range(4):
        one = diagnostics(res.pi[k], c[k])
        np.testing.assert_allclose(d.expected_edges[k], one.expected_edges, rtol=1e-14)
        assert np.isnan(one.residual) and np.isnan(one.variance_proxy)
        a = edge_proxy(p[k])
        np.testing.assert_allclose(d.variance_proxy[k], proxy_value(res.pi[k], a,
                                                                    covariance_term(a)))


def test_diagnostics_bad_input():
    with pytest.raises(ValueError, match="joint must have shape"):
        diagnostics([0.5, 0.5], [1.0, 1.0], joint=np.eye(3))
    with pytest.raises(ValueError, match="c_hat must have the shape"):
        diagnostics([0.5, 0.5], [1.0])
