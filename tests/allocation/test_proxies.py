"""Edge proxies a_ij and the shared-vertex term b_i against their definitions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pairht.allocation import covariance_term, disagreement, edge_proxy

from .alloc_helpers import b_ref, disagreement_ref

probs = st.lists(st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0])), min_size=2,
                 max_size=8).map(np.array)


@given(probs)
def test_disagreement_equals_definition(p):
    np.testing.assert_allclose(disagreement(p), disagreement_ref(p), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(edge_proxy(p), disagreement(p))


@given(probs, st.data())
def test_score_norm_proxy_equals_definition(p, data):
    m = np.array(data.draw(st.lists(st.floats(0, 5), min_size=len(p), max_size=len(p))))
    ref = disagreement_ref(p) * (m[:, None] + m[None, :]) ** 2 / 4
    np.testing.assert_allclose(edge_proxy(p, "score_norm", score_norm=m), ref, rtol=1e-14,
                               atol=1e-15)


@given(st.lists(st.lists(st.floats(0, 10), min_size=6, max_size=6), min_size=6, max_size=6))
def test_covariance_term_equals_pairwise_cross_sum(rows):
    e = np.array(rows)
    e = e + e.T
    np.fill_diagonal(e, 0.0)
    np.testing.assert_allclose(covariance_term(e), b_ref(e), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(edge_proxy(np.zeros(6), "energy", energy=e), e)


def test_covariance_term_bounds_shared_vertex_cross_products():
    """Cauchy-Schwarz: 2 sum_{j<k} |<h_ij, h_ik>| <= b_i when a_ij = ||h_ij||^2."""
    rng = np.random.default_rng(3)
    r, s = rng.integers(0, 2, 7).astype(float), rng.normal(size=(7, 3))
    h = 0.5 * (r[:, None, None] - r[None, :, None]) * (s[:, None, :] - s[None, :, :])
    a = np.sum(h * h, axis=-1)
    b = covariance_term(a)
    for i in range(7):
        cross = sum(2 * abs(h[i, j] @ h[i, k]) for j in range(7) for k in range(j + 1, 7)
                    if i not in (j, k))
        assert cross <= b[i] * (1 + 1e-12) + 1e-15


def test_batched_proxy_matches_rows():
    p = np.array([[0.1, 0.9, 0.5], [0.0, 1.0, 1.0]])
    out = edge_proxy(p)
    for k in range(2):
        np.testing.assert_array_equal(out[k], edge_proxy(p[k]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"p_hat": [0.1, 1.2]}, "p_hat must lie in"),
        ({"p_hat": [0.1, np.nan]}, "p_hat must be finite"),
        ({"p_hat": [0.1, 0.2], "kind": "nope"}, "must be one of"),
        ({"p_hat": [0.1, 0.2], "kind": "score_norm"}, "needs score_norm"),
        ({"p_hat": [0.1, 0.2], "kind": "score_norm", "score_norm": [1.0, -1.0]},
         "nonnegative"),
        ({"p_hat": [0.1, 0.2], "kind": "score_norm", "score_norm": [1.0]}, "shape"),
        ({"p_hat": [0.1, 0.2], "kind": "energy"}, "needs energy"),
        ({"p_hat": [0.1, 0.2], "kind": "energy", "energy": [[0, 1.0], [2.0, 0]]}, "symmetric"),
        ({"p_hat": [0.1, 0.2], "kind": "energy", "energy": [[0, -1.0], [-1.0, 0]]},
         "nonnegative"),
        ({"p_hat": [0.1, 0.2], "kind": "energy", "energy": [[0, np.inf], [np.inf, 0]]},
         "finite"),
        ({"p_hat": [0.1, 0.2], "kind": "energy", "energy": np.zeros((3, 3))}, "shape"),
        ({"p_hat": [0.1, 0.2], "energy": np.zeros((2, 2))}, "only used with"),
    ],
)
def test_bad_proxy_input_raises_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        edge_proxy(**kwargs)
