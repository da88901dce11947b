"""Strategies, design builders and brute-force references shared by the estimator tests.

The references are written from the paper's definitions with the dense ``(G, G, d)`` kernel
and explicit edge lists, independently of the vectorised library code they check.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pairht.designs import (
    Bernoulli,
    ConditionalPoisson,
    PositivityWarning,
    RandomizedDependentRounding,
    Stratified,
)
from pairht.designs.anchored import AnchoredPair
from pairht.testing.strategies import (
    fixed_size_inclusion_probabilities,
    inclusion_probabilities,
)

# ------------------------------------------------------------------ populations
_unit = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)
_score = st.floats(-3.0, 3.0, allow_nan=False, allow_subnormal=False)


@st.composite
def rewards_for(draw: st.DrawFn, g: int) -> np.ndarray:
    """``(G,)`` rewards: binary (as in RLVR, with many ties) or anywhere in [0, 1]."""
    if draw(st.booleans()):
        return draw(hnp.arrays(np.int64, g, elements=st.integers(0, 1))).astype(np.float64)
    return draw(hnp.arrays(np.float64, g, elements=_unit))


@st.composite
def scores_for(draw: st.DrawFn, g: int, max_dim: int = 8) -> np.ndarray:
    """``(G, d)`` scores with ``1 <= d <= max_dim``."""
    d = draw(st.integers(1, max_dim))
    return draw(hnp.arrays(np.float64, (g, d), elements=_score))


# ------------------------------------------------------------------ designs
def _rdr(pi: np.ndarray) -> RandomizedDependentRounding:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PositivityWarning)
        return RandomizedDependentRounding(pi, n_orders=16, rng=0)


def _stratified_on_quarters(pi: np.ndarray) -> Stratified:
    """Stratified SRSWOR at ``pi`` rounded to quarters, lifted until every pair is positive.

    Rounding makes ties (strata of several units), but a stratum can then draw fewer than two
    units (two units at 1/2 draw exactly one) or a unit can round to 0: its pairs are never
    observed. Rather than filter such draws (most of them, at small ``G``), the lowest level is
    raised by a quarter until every pair is positive (at the latest when all levels are 1).
    """
    q = np.maximum(np.round(pi * 4.0) / 4.0, 0.25)
    design = Stratified(q)
    while not design.all_pairs_positive():
        q = np.where(q == q.min(), q + 0.25, q)
        design = Stratified(q)
    return design


#: name -> (builder, whether pi must have an integer sum, largest N enumerated in tests)
DESIGN_KINDS = {
    "bernoulli": (Bernoulli, False, 8),
    "conditional_poisson": (ConditionalPoisson, True, 9),
    "randomized_dependent_rounding": (_rdr, True, 9),
    # pi on a grid of quarters: ties make strata of several units (sizes mixed within each)
    "stratified": (lambda pi: _stratified_on_quarters(pi), False, 8),
    "anchored_bernoulli": (lambda pi: AnchoredPair(Bernoulli(pi)), False, 7),
    "anchored_conditional_poisson": (lambda pi: AnchoredPair(ConditionalPoisson(pi)), True, 7),
}


@st.composite
def positive_pair_designs(draw: st.DrawFn, kind: str, max_size: int | None = None):
    """A design of ``kind`` with every pair ``rho_ij > 0`` (Theorem 2's condition)."""
    build, integer_sum, largest = DESIGN_KINDS[kind]
    top = min(largest, max_size or largest)
    anchored = kind.startswith("anchored")
    if integer_sum:
        pi = draw(fixed_size_inclusion_probabilities(2, top, allow_zero=anchored))
    else:
        pi = draw(inclusion_probabilities(2, top, allow_zero=anchored))
    design = build(pi)
    assume(design.all_pairs_positive())
    return design


def designs_and_population(kind: str, max_size: int | None = None, max_dim: int = 8):
    """Strategy of ``(design, rewards, scores)`` with positive pairs."""

    @st.composite
    def build(draw: st.DrawFn):
        design = draw(positive_pair_designs(kind, max_size))
        g = design.n_units
        return design, draw(rewards_for(g)), draw(scores_for(g, max_dim))

    return build()


# ------------------------------------------------------------------ brute-force references
def dense_kernel(r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``h[i, j] = (r_i - r_j)(s_i - s_j) / 2`` by an explicit double loop."""
    g = r.shape[0]
    h = np.zeros((g, g, s.shape[1]))
    for i in range(g):
        for j in range(g):
            h[i, j] = 0.5 * (r[i] - r[j]) * (s[i] - s[j])
    return h


def edges(g: int) -> list[tuple[int, int]]:
    return list(itertools.combinations(range(g), 2))


def ht_by_edges(r, s, mask, rho) -> np.ndarray:
    """``(1/M) sum_{i<j} J_i J_j h_ij / rho_ij`` over an explicit edge list."""
    g = r.shape[0]
    h = dense_kernel(r, s)
    out = np.zeros(s.shape[1])
    for i, j in edges(g):
        if mask[i] and mask[j]:
            out += h[i, j] / rho[i, j]
    return out / len(edges(g))


def ht_term_scale(r, s, mask, rho) -> float:
    """``(1/M) sum_{observed i<j} |h_ij|_inf / rho_ij``: the size of the terms summed."""
    g = r.shape[0]
    h = np.abs(dense_kernel(r, s)).max(axis=-1)
    total = sum(h[i, j] / rho[i, j] for i, j in edges(g) if mask[i] and mask[j])
    return float(total) / len(edges(g))


def support_moments(values: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of ``values`` (K, d) under the support probabilities."""
    mean = probs @ values
    centred = values - mean
    return mean, np.einsum("k,ki,kj->ij", probs, centred, centred)


def covariance_scale(r, s, design) -> float:
    """Absolute size of the terms of any evaluation of the design covariance.

    With ``a_ij = (r_i - r_j) / (2 M rho_ij)`` and ``n_i = |s_i|``, this is
    ``sum_{ijkl} |a_ij| |a_kl| (P(J = 1 on {i,j,k,l}) + rho_ij rho_kl) n_i n_k``: it bounds
    the vertex form ``S^T Sigma^A S``, the edge form of Eq. general-covariance and the
    second moment of ``sum_i A_i s_i`` over the support, whichever the code evaluates.
    """
    masks, probs = design.support()
    g = design.n_units
    m = g * (g - 1) / 2
    x = masks.astype(float)
    p4 = np.einsum("k,ki,kj,kl,kn->ijln", probs, x, x, x, x)
    rho = design.joint()
    inv = np.divide(1.0, rho, out=np.zeros_like(rho), where=rho > 0)
    np.fill_diagonal(inv, 0.0)
    a = np.abs(r[:, None] - r[None, :]) * inv / (2 * m)
    n = np.linalg.norm(s, axis=1)
    both = p4 + np.einsum("ij,kl->ijkl", rho, rho)
    return float(np.einsum("ij,kl,ijkl,i,k->", a, a, both, n, n))


def general_covariance_terms(r, s, design):
    """Eq. general-covariance over explicit edge pairs, with P(I_e I_f) from the support.

    Returns the covariance matrix and its absolute scale
    ``sum_{e,f} (P(I_e I_f) + rho_e rho_f) |h_e| |h_f| / (rho_e rho_f M^2)``, which bounds
    the round-off of any evaluation of the formula (every term is a difference of two such
    magnitudes, and ``|Delta_ef| <= P(I_e I_f) + rho_e rho_f``).
    """
    masks, probs = design.support()
    g = design.n_units
    e_list = edges(g)
    h = dense_kernel(r, s)
    he = np.stack([h[i, j] for i, j in e_list])  # (M, d)
    ind = np.stack([masks[:, i] & masks[:, j] for i, j in e_list], axis=1).astype(float)
    both = ind.T @ (probs[:, None] * ind)  # P(I_e I_f = 1), (M, M)
    rho = np.diag(both).copy()
    delta = both - np.outer(rho, rho)
    coef = delta / np.outer(rho, rho) / len(e_list) ** 2
    cov = np.einsum("ef,ea,fb->ab", coef, he, he)
    norms = np.linalg.norm(he, axis=1)
    bound = (both + np.outer(rho, rho)) / np.outer(rho, rho)
    scale = np.sum(bound * np.outer(norms, norms)) / len(e_list) ** 2
    return cov, scale


def independent_joint(pi: np.ndarray) -> np.ndarray:
    """Joint inclusion matrix of independent units, ``(..., G, G)``: ``pi_i pi_j`` off the
    diagonal and ``pi_i`` on it (``rho_ii = P(J_i = 1)``, as ``Design.joint()`` returns)."""
    pi = np.asarray(pi, dtype=np.float64)
    out = pi[..., :, None] * pi[..., None, :]
    idx = np.arange(pi.shape[-1])
    out[..., idx, idx] = pi
    return out
