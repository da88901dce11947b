r"""Exact design covariance of the pair Horvitz-Thompson estimator, and its unbiased estimate.

The estimator is linear in the scores, ``hat g = sum_i A_i s_i`` with random advantages
``A_i = sum_{j != i} I_ij a_ij``, ``a_ij = (r_i - r_j) / (2 M rho_ij)``. Hence

.. math:: Cov_{design}(\hat g) = S^\top \Sigma^A S, \qquad
          tr\,Cov = \langle \Sigma^A, S S^\top \rangle, \qquad
          \Sigma^A_{ik} = \sum_{j \ne i} \sum_{l \ne k} a_{ij} a_{kl} \Delta_{(ij),(kl)},

with ``Delta_ef = P(I_e I_f = 1) - rho_e rho_f``, where ``P(I_e I_f = 1)`` is the inclusion
probability of the union of the two edges (2, 3 or 4 units). This is the general
Horvitz-Thompson covariance (PAIR paper, Eq. general-covariance) regrouped by vertex, so
only the ``G x G`` matrix ``Sigma^A`` and the ``G x G`` Gram matrix of the scores are
needed: never the ``M x M`` edge-pair matrix nor the ``(G, G, d)`` kernel, and the cost in
``d`` is one Gram product. ``Sigma^A`` costs ``O(G^4)`` in a numba loop (less with tied
rewards, whose pairs have ``a_ij = 0``), plus ``design.inclusion`` calls for all triples and
quadruples, made in chunks of :data:`INCLUSION_CHUNK` sets; for the Bernoulli design the
closed form of Proposition 1 gives it in ``O(G^3)``.

Memory: the inclusion table holds ``C(G, 3) + C(G, 4)`` float64 values (the sets themselves
are generated chunk by chunk, never all at once), refused above
:data:`MAX_INCLUSION_TABLE` ``= 2**25`` values (256 MiB, ``G <= 168``) with a ``ValueError``
naming the limit. Designs whose inclusions depend only on the set size (equal ``pi`` under
:class:`~pairht.designs.ConditionalPoisson`, i.e. simple random sampling without replacement,
or :class:`~pairht.designs.Bernoulli`) need no table: one value per order, at any ``G``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import (
    check_finite,
    check_probabilities,
    check_symmetric,
    check_table_size,
)
from pairht.designs.base import Design
from pairht.designs.bernoulli import Bernoulli
from pairht.estimators._inputs import (
    any_over_broadcast,
    broadcast_batch,
    check_mask,
    check_observed_finite,
    check_rewards,
    check_scores,
    n_pairs,
    zero_unobserved,
)
from pairht.estimators.bias import _check_design
from pairht.estimators.horvitz_thompson import check_w_max, resolve_variant
from pairht.estimators.variants import VARIANTS, Variant

#: ``full=None`` computes the ``(d, d)`` matrix when ``d`` is at most this.
FULL_MATRIX_MAX_DIM = 512

#: Relative tolerance on the symmetry of a user-supplied Gram matrix.
GRAM_SYMMETRY_RTOL = 1e-10

#: Largest inclusion table ``C(G, 3) + C(G, 4)`` (float64 values) the exact covariance builds:
#: 2**25 values are 256 MiB, reached at ``G = 169``. Beyond it a ValueError names the limit
#: instead of a MemoryError (or swapping) deep inside numpy.
MAX_INCLUSION_TABLE = 2**25

#: Sets passed to one ``design.inclusion`` call while the table is built: bounds the memory of
#: the ``(chunk, k)`` index rows (8 MiB for quadruples) whatever ``G``.
INCLUSION_CHUNK = 2**18


@dataclass(frozen=True)
class DesignCovariance:
    """Exact design covariance of the pair-HT gradient estimate.

    Attributes
    ----------
    trace : float or (...) ndarray
        ``tr Cov(hat g)``, the design MSE of the (unbiased) estimate.
    matrix : (..., d, d) ndarray or None
        The full covariance ``S^T Sigma^A S``, when requested.
    advantage_covariance : (..., G, G) ndarray
        ``Sigma^A = Cov(A)``, the covariance of the random advantages; the covariance of the
        estimate for any scores ``S`` is ``S^T Sigma^A S``.
    """

    trace: float | np.ndarray
    matrix: np.ndarray | None
    advantage_covariance: np.ndarray


# ---------------------------------------------------------------------- inclusion tables
def _colex_rows(g: int, k: int, start: int = 0, count: int | None = None) -> np.ndarray:
    """Sorted ``k``-subsets of ``range(g)`` of colex ranks ``start .. start + count - 1``.

    ``itertools.combinations`` yields lexicographic order, whose rank has no closed form as
    cheap as the colex rank ``C(a,1) + C(b,2) + C(c,3) + C(d,4)`` the numba kernel uses to
    find a set's inclusion probability; hence this small generator. ``count=None`` runs to
    the last set.
    """
    total = math.comb(g, k)
    count = total - start if count is None else min(count, total - start)
    return np.array(_colex_rows_kernel(g, k, _colex_unrank(start, k), max(count, 0)))


def _colex_unrank(rank: int, k: int) -> np.ndarray:
    """The sorted ``k``-set of colex rank ``rank``: greedily the largest ``c`` with
    ``C(c, t + 1) <= rank`` for ``t = k - 1, ..., 0``."""
    out = np.empty(k, dtype=np.int64)
    for t in range(k - 1, -1, -1):
        c = t
        while math.comb(c + 1, t + 1) <= rank:
            c += 1
        out[t] = c
        rank -= math.comb(c, t + 1)
    return out


@numba.njit(cache=True)
def _colex_rows_kernel(  # pragma: no cover - numba
    g: int, k: int, first: np.ndarray, count: int
) -> np.ndarray:
    out = np.empty((count, k), dtype=np.int64)
    idx = first.copy()
    for row in range(count):
        for t in range(k):
            out[row, t] = idx[t]
        # next in colex order: increment the first element that can move, reset the others
        t = 0
        while t < k - 1 and idx[t] + 1 == idx[t + 1]:
            t += 1
        idx[t] += 1
        for u in range(t):
            idx[u] = u
    return out


def _binomials(g: int) -> np.ndarray:
    """``binom[n, k] = C(n, k)`` for ``n <= g``, ``k <= 4`` (the colex rank table)."""
    out = np.zeros((g + 1, 5), dtype=np.int64)
    out[:, 0] = 1
    for n in range(1, g + 1):
        for k in range(1, 5):
            out[n, k] = out[n - 1, k - 1] + out[n - 1, k]
    return out


def _inclusion_tables(design: Design) -> tuple[np.ndarray, np.ndarray, bool]:
    """Inclusion probabilities of every triple and quadruple, indexed by colex rank.

    ``C(G, 3) + C(G, 4)`` values (about 6.8e5 at ``G = 64`` instead of a dense ``G**4``
    tensor), computed :data:`INCLUSION_CHUNK` sets per ``design.inclusion`` call. For a
    design whose inclusions depend only on the set size the tables hold one value each and
    the flag is True. Raises ``ValueError`` above :data:`MAX_INCLUSION_TABLE` values.
    """
    g = design.n_units
    if design.max_inclusion_order < 4 and g >= 4:
        raise ValueError(
            f"design covariance needs inclusion probabilities up to order 4; "
            f"{type(design).__name__}.max_inclusion_order = {design.max_inclusion_order}"
        )
    uniform = [design._exchangeable_inclusion(k) if g >= k else None for k in (3, 4)]
    if g >= 4 and uniform[0] is not None and uniform[1] is not None:
        return np.array([uniform[0]]), np.array([uniform[1]]), True
    check_inclusion_table_size(g, type(design).__name__)
    tables = []
    for k in (3, 4):
        total = math.comb(g, k) if g >= k else 0
        vals = np.empty(total, dtype=np.float64)
        for start in range(0, total, INCLUSION_CHUNK):
            chunk = design.inclusion(_colex_rows(g, k, start, INCLUSION_CHUNK))
            vals[start : start + INCLUSION_CHUNK] = chunk
        tables.append(vals)
    return tables[0], tables[1], False


def check_inclusion_table_size(g: int, what: str = "the design") -> None:
    """Raise ``ValueError`` when the order-3 and 4 inclusion table exceeds its memory limit.

    :data:`MAX_INCLUSION_TABLE` values, checked by the package's one memory guard
    (:func:`pairht._validation.check_table_size`); the ``pairht`` command's check of
    ``--group-size`` calls this too.
    """
    entries = math.comb(g, 3) + math.comb(g, 4)
    check_table_size(
        f"the exact design covariance of {what} with G = {g} units (the inclusion "
        f"probabilities of all C(G,3) + C(G,4) = {entries} triples and quadruples)",
        entries,
        "use fewer candidates per group, a Bernoulli design (closed form at any G), or "
        "estimate the variance by Monte Carlo draws",
        limit=8 * MAX_INCLUSION_TABLE,
        limit_name=f"MAX_INCLUSION_TABLE = {MAX_INCLUSION_TABLE} values, G <= 168",
    )


@numba.njit(cache=True, inline="always")
def _colex_rank3(a, b, c, binom):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Colex rank ``sum_t C(u_(t), t)`` of three distinct units (``u_(t)`` the ``t``-th
    smallest, ``t`` from 1), the index of :func:`_inclusion_tables`. A unit's place ``t`` is one
    plus the number of smaller units: no sorting, and no branch to mispredict."""
    return (binom[a, 1 + (b < a) + (c < a)] + binom[b, 1 + (a < b) + (c < b)]
            + binom[c, 1 + (a < c) + (b < c)])


@numba.njit(cache=True, inline="always")
def _colex_rank4(a, b, c, d, binom):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """:func:`_colex_rank3` of four distinct units."""
    return (binom[a, 1 + (b < a) + (c < a) + (d < a)] + binom[b, 1 + (a < b) + (c < b) + (d < b)]
            + binom[c, 1 + (a < c) + (b < c) + (d < c)]
            + binom[d, 1 + (a < d) + (b < d) + (c < d)])


@numba.njit(cache=True, inline="always")
def _union_inclusion(i, j, k, l, rho, incl3, incl4, binom, uniform):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``P(J = 1 on {i, j} u {k, l})`` for ``i != j``, ``k != l``.

    With ``uniform`` the tables hold one value per order (an exchangeable design).
    """
    if (i == k and j == l) or (i == l and j == k):
        return rho[i, j]
    if k == i or k == j:
        x = l
    elif l == i or l == j:
        x = k
    else:
        x = -1
    if uniform:
        return incl3[0] if x >= 0 else incl4[0]
    if x >= 0:  # the edges share one vertex: a triple {i, j, x}
        return incl3[_colex_rank3(i, j, x, binom)]
    return incl4[_colex_rank4(i, j, k, l, binom)]


@numba.njit(cache=True)
def _advantage_covariance_kernel(a, rho, incl3, incl4, binom, ht, uniform):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``out[b, i, k] = sum_{j != i, l != k} a[b,i,j] a[b,k,l] Delta_{(ij),(kl)} [/ P]``.

    ``a`` is ``(G, G, B)`` (batch innermost, contiguous). With ``ht`` each term is divided by
    the union inclusion ``P(I_e I_f = 1)`` (the Horvitz-Thompson variance estimator).
    """
    g = a.shape[0]
    nb = a.shape[2]
    nonzero = np.zeros((g, g), dtype=np.bool_)
    for i in range(g):
        for j in range(g):
            for b in range(nb):
                if a[i, j, b] != 0.0:
                    nonzero[i, j] = True
                    break
    out = np.zeros((g, g, nb))
    for i in range(g):
        for k in range(i, g):
            for j in range(g):
                if j == i or not nonzero[i, j]:
                    continue
                for l in range(g):
                    if l == k or not nonzero[k, l]:
                        continue
                    p = _union_inclusion(i, j, k, l, rho, incl3, incl4, binom, uniform)
                    delta = p - rho[i, j] * rho[k, l]
                    if ht:
                        delta = delta / p
                    for b in range(nb):
                        out[i, k, b] += a[i, j, b] * a[k, l, b] * delta
            if k != i:
                for b in range(nb):
                    out[k, i, b] = out[i, k, b]
    return out


# ---------------------------------------------------------------------- Sigma^A
def _pair_coefficients(r: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """``a_ij = (r_i - r_j) / (2 M rho_ij)``, 0 where ``rho_ij = 0`` (never observed)."""
    return _linear_coefficients(r, rho, VARIANTS["exact"], None, None)


def _linear_coefficients(
    r: np.ndarray,
    rho: np.ndarray,
    variant: Variant,
    w_max: float | None,
    pi: np.ndarray | None,
) -> np.ndarray:
    """``a_ij = (r_i - r_j) w_ij / 2`` for a linear variant with edge weights ``w_ij``.

    ``w`` is the variant's own weight on every edge that can be observed (``rho_ij > 0``);
    edges that are never observed contribute nothing.
    """
    observed = rho > 0.0
    np.fill_diagonal(observed, False)
    w = variant.weights(observed, rho, w_max=w_max, pi=pi)
    diff = r[..., :, None] - r[..., None, :]
    return diff * np.where(observed, w, 0.0) / 2.0


def _exchangeable_sigma(
    a: np.ndarray, p2: float, p3: float, p4: float, *, ht: bool
) -> np.ndarray:
    r"""``Sigma^A`` (or its HT estimate) when ``P(I_e I_f = 1)`` depends only on the overlap.

    For a design whose inclusions depend only on the set size (``p_k`` for ``k`` units),
    ``Delta_{(ij),(kl)} = c_s`` with ``s = |{i,j} cap {k,l}|``: ``c_2 = p_2 - p_2^2``,
    ``c_1 = p_3 - p_2^2``, ``c_0 = p_4 - p_2^2`` (each divided by ``p_{4-s}`` for the HT
    estimate). Writing ``c_s = c_0 + (c_1 - c_0) s + (c_2 - 2 c_1 + c_0) [s = 2]`` and
    ``s = [k in {i,j}] + [l in {i,j}]``, the ``O(G^4)`` double sum collapses, with
    ``R_i = sum_j a_ij``, to

    .. math:: \Sigma^A_{ik} = c_0 R_i R_k + (c_1 - c_0) (\delta_{ik} R_i^2 + a_{ik} R_k
              + R_i a_{ki} + (A A^\top)_{ik}) + (c_2 - 2 c_1 + c_0)
              (\delta_{ik} \textstyle\sum_j a_{ij}^2 + a_{ik} a_{ki}),

    ``O(G^3)`` time and ``O(G^2)`` memory at any ``G``. ``a`` is ``(B, G, G)``, zero diagonal.
    """
    c2, c1, c0 = p2 - p2 * p2, p3 - p2 * p2, p4 - p2 * p2
    if ht:
        c2, c1, c0 = c2 / p2, c1 / p3, c0 / p4
    g = a.shape[-1]
    idx = np.arange(g)
    row = a.sum(axis=-1)
    a_t = np.swapaxes(a, -1, -2)
    one = a * row[:, None, :] + row[:, :, None] * a_t + a @ a_t
    one[:, idx, idx] += row**2
    two = a * a_t
    two[:, idx, idx] += (a * a).sum(axis=-1)
    out = c0 * (row[:, :, None] * row[:, None, :])
    out += (c1 - c0) * one
    out += (c2 - 2.0 * c1 + c0) * two
    return out


def _general_sigma(a: np.ndarray, design: Design, rho: np.ndarray, *, ht: bool) -> np.ndarray:
    """``Sigma^A`` (or its HT estimate) from inclusions up to order 4; ``a`` is (B, G, G)."""
    g = design.n_units
    p = [design._exchangeable_inclusion(k) for k in (2, 3, 4)] if g >= 4 else [None]
    if all(v is not None for v in p):
        p2, p3, p4 = (float(v) for v in p)  # type: ignore[arg-type]
        return _exchangeable_sigma(a, p2, p3, p4, ht=ht)
    incl3, incl4, uniform = _inclusion_tables(design)
    a_t = np.ascontiguousarray(np.moveaxis(a, 0, -1))
    out = _advantage_covariance_kernel(
        a_t, np.ascontiguousarray(rho), incl3, incl4, _binomials(g), ht, uniform
    )
    return np.moveaxis(out, -1, 0)


def _bernoulli_sigma(r: np.ndarray, pi: np.ndarray) -> np.ndarray:
    r"""``Sigma^A`` under independent Bernoulli vertices (Proposition 1), ``O(G^3)``.

    Proposition 1 writes ``M^2 Cov = sum_{i<j} w_ij h_ij h_ij^T + sum_i t_i (v_i v_i^T -
    sum_{j != i} h_ij h_ij^T)`` with ``w_ij = 1/(pi_i pi_j) - 1``, ``t_i = 1/pi_i - 1`` and
    ``v_i = sum_{j != i} h_ij``. With ``delta_ij = r_i - r_j``, ``h_ij = delta_ij (s_i -
    s_j)/2`` and ``v_i = (1/2) (C S)_i`` for ``C = diag(delta 1) - delta``, this is
    ``S^T [L(q) + C^T diag(t) C / 4] S / M^2``, where ``L(q)`` is the graph Laplacian of the
    edge weights ``q_ij = (w_ij - t_i - t_j) delta_ij^2 / 4``.
    """
    g = r.shape[-1]
    t = 1.0 / pi - 1.0
    w = 1.0 / np.outer(pi, pi) - 1.0
    delta = r[..., :, None] - r[..., None, :]
    q = (w - t[:, None] - t[None, :]) * delta**2 / 4.0
    idx = np.arange(g)
    q[..., idx, idx] = 0.0
    lap = -q
    lap[..., idx, idx] = q.sum(axis=-1)
    c = -delta
    c[..., idx, idx] = delta.sum(axis=-1)
    quad = np.einsum("...ji,j,...jk->...ik", c, t, c) / 4.0
    return (lap + quad) / float(n_pairs(g)) ** 2


def _sigma(
    r: np.ndarray,
    design: Design,
    variant: Variant | None = None,
    w_max: float | None = None,
    pi: np.ndarray | None = None,
) -> np.ndarray:
    """``Sigma^A`` for rewards ``r`` (B, G): closed Bernoulli form when it applies.

    ``variant=None`` is the Horvitz-Thompson estimator; another linear variant replaces its
    edge coefficients ``1/(M rho_e)`` by the variant's ``w_e``.
    """
    if variant is None and isinstance(design, Bernoulli) and bool(np.all(design.pi > 0.0)):
        return _bernoulli_sigma(r, design.pi)
    rho = design.joint()
    if variant is None:
        a = _pair_coefficients(r, rho)
    else:
        a = _linear_coefficients(r, rho, variant, w_max, design.pi if pi is None else pi)
    return _general_sigma(a, design, rho, ht=False)


# ---------------------------------------------------------------------- public API
def _check_gram(gram: ArrayLike, g: int) -> np.ndarray:
    arr = check_finite("gram", gram)
    if arr.ndim < 2 or arr.shape[-2:] != (g, g):
        raise ValueError(
            f"gram must have shape (..., G, G) with G = {g}: the inner products "
            f"<s_i, s_j> of the scores; got shape {arr.shape}"
        )
    check_symmetric("gram", arr, GRAM_SYMMETRY_RTOL * max(np.abs(arr).max(initial=0.0), 1e-300),
                    "g_ij = <s_i, s_j> = g_ji")
    return arr


def _scores_or_gram(
    scores: ArrayLike | None, gram: ArrayLike | None, g: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Exactly one of ``scores`` (checked later against a mask) or ``gram`` (checked here)."""
    if (scores is None) == (gram is None):
        raise ValueError(
            "pass exactly one of scores (..., G, d) or gram (..., G, G) = scores @ scores^T; "
            f"got scores={'None' if scores is None else 'an array'}, "
            f"gram={'None' if gram is None else 'an array'}"
        )
    if gram is not None:
        return None, _check_gram(gram, g)
    assert scores is not None  # exactly one of the two was given
    return check_scores(scores, g, finite=False), None


def design_covariance(
    rewards: ArrayLike,
    scores: ArrayLike | None,
    design: Design,
    *,
    gram: ArrayLike | None = None,
    full: bool | None = None,
    weighting: str | Variant = "exact",
    w_max: float | None = None,
    pi: ArrayLike | None = None,
) -> DesignCovariance:
    r"""Exact design covariance of :func:`~pairht.estimators.pair_ht_gradient` (or a variant).

    .. math:: Cov = \frac{1}{M^2} \sum_{e,f} \frac{\Delta_{ef}}{\rho_e \rho_f} h_e h_f^\top,
              \qquad \Delta_{ef} = P(I_e I_f = 1) - \rho_e \rho_f

    (PAIR paper, Eq. general-covariance; sums over all ordered pairs of edges), computed as
    ``S^T Sigma^A S`` with ``Sigma^A`` the ``G x G`` covariance of the advantages (see the
    module docstring). The trace needs only the Gram matrix ``<s_i, s_j>``. Edges with
    ``rho_e = 0`` are never observed and contribute nothing (the estimator is then biased,
    see :func:`~pairht.estimators.conditional_bias`). For :class:`~pairht.designs.Bernoulli`
    with every ``pi_i > 0`` the closed form of Proposition 1 is used; otherwise the design's
    inclusion probabilities of order 2, 3 and 4 (one batched call each).

    Parameters
    ----------
    rewards : (..., G) array_like
        Rewards of all candidates.
    scores : (..., G, d) array_like or None
        Scores of all candidates; ``None`` when ``gram`` is given.
    design : Design
        The continuation design, ``design.n_units == G``.
    gram : (..., G, G) array_like, optional
        Precomputed ``scores @ scores^T`` (use for very large ``d``); then only the trace
        is available.
    full : bool, optional
        Whether to return the ``(d, d)`` matrix; ``None`` means ``d <= 512``.
    weighting : str
        A *linear* variant of :data:`~pairht.estimators.VARIANTS` (``W_ij = I_ij w_ij``,
        ``w`` fixed by the design): ``"exact"`` (default), ``"clipped"``, ``"marginal_only"``,
        ``"unweighted"``. The formula is the one above with ``1/(M rho_e)`` replaced by
        ``w_e``: ``Cov = sum_{e,f} w_e w_f Delta_ef h_e h_f^T``. Ratio variants
        (``"hajek"``, ``"observed_average"``) have no such form: a ValueError.
    w_max : float, optional
        Clipping level of ``weighting="clipped"``.
    pi : (G,) array_like, optional
        Marginals of ``weighting="marginal_only"``; default ``design.pi``.

    Returns
    -------
    DesignCovariance
        ``trace`` (float, or ``(...)`` for batched rewards), ``matrix`` or ``None``, and
        ``advantage_covariance`` ``(..., G, G)``.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import Bernoulli
    >>> from pairht.estimators import design_covariance
    >>> cov = design_covariance([1.0, 0.0], np.array([[1.0], [0.0]]), Bernoulli([0.5, 0.5]))
    >>> cov.trace  # (1/rho - 1) ||h_01||^2 = 3 * 0.25
    0.75
    """
    r = check_rewards(rewards)
    g = r.shape[-1]
    design = _check_design(design, g)
    variant, w_max_checked, pi_arr = _linear_variant(weighting, w_max, pi, g)
    s, gm = _scores_or_gram(scores, gram, g)
    if s is not None:
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite: named just below
            gm = np.matmul(s, np.swapaxes(s, -1, -2))
        # The covariance reads every candidate, so all scores must be finite. A NaN or inf
        # score makes its Gram diagonal non-finite: checking the small Gram matrix spares a
        # pass over the (G, d) scores, which are then scanned only to name the bad entry.
        if not np.all(np.isfinite(gm)):
            check_finite("scores", s)
            raise ValueError(
                "scores are finite but their inner products overflow float64; rescale them"
            )
    assert gm is not None
    want_full = _want_full(full, s)
    batch = broadcast_batch(rewards=r.shape[:-1], scores=gm.shape[:-2])
    flat = np.broadcast_to(r, (*batch, g)).reshape(-1, g)
    sigma = _sigma(flat, design, variant, w_max_checked, pi_arr).reshape((*batch, g, g))
    return _assemble(sigma, s, gm, want_full)


def _linear_variant(
    weighting: str | Variant, w_max: Any, pi: ArrayLike | None, g: int
) -> tuple[Variant | None, float | None, np.ndarray | None]:
    """The variant for ``weighting`` (``None`` for exact HT), checked to be linear, with its
    checked ``w_max`` and ``pi``."""
    variant = resolve_variant(weighting)
    w = check_w_max(variant, w_max)
    if not variant.linear:
        raise ValueError(
            f"weighting={variant.name!r} is not linear in the edge indicators ({variant.bias}); "
            f"design_covariance covers the linear variants "
            f"{sorted(k for k, v in VARIANTS.items() if v.linear)}"
        )
    pi_arr = None
    if pi is not None:
        if not variant.needs_pi:
            raise ValueError(
                f"pi is only read by weighting='marginal_only'; got weighting={variant.name!r}"
            )
        pi_arr = check_probabilities("pi", pi, ndim=1)
        if pi_arr.shape != (g,):
            raise ValueError(f"pi must have shape ({g},) like the rewards; got {pi_arr.shape}")
    if variant is VARIANTS["exact"]:
        return None, None, None
    return variant, w, pi_arr


def _want_full(full: bool | None, s: np.ndarray | None) -> bool:
    if full is not None and not isinstance(full, (bool, np.bool_)):
        # a truthy string such as "no" must not switch the (d, d) matrix on
        raise TypeError(f"full must be True, False or None; got {full!r}")
    if full is None:
        return s is not None and s.shape[-1] <= FULL_MATRIX_MAX_DIM
    if full and s is None:
        raise ValueError("full=True needs scores (the (d, d) matrix); only gram was given")
    return bool(full)


def _assemble(
    sigma: np.ndarray, s: np.ndarray | None, gm: np.ndarray, want_full: bool
) -> DesignCovariance:
    trace = np.einsum("...ij,...ij->...", sigma, gm)
    matrix = None
    if want_full and s is not None:
        matrix = np.swapaxes(s, -1, -2) @ sigma @ s
    return DesignCovariance(
        trace=float(trace) if trace.ndim == 0 else trace,
        matrix=matrix,
        advantage_covariance=sigma,
    )


def _check_union_positive(design: Design, rho: np.ndarray) -> None:
    """The HT variance estimator needs ``P(I_e I_f = 1) > 0`` for every pair of edges."""
    g = design.n_units
    off = ~np.eye(g, dtype=bool)
    if np.any(off & ~(rho > 0.0)):
        i, j = (int(x) for x in np.argwhere(off & ~(rho > 0.0))[0])
        raise ValueError(
            f"variance_estimate needs every joint inclusion positive (unbiased only if every "
            f"pair of edges can be observed together); "
            f"design.joint()[{i}, {j}] = {rho[i, j].item()!r}"
        )
    incl3, incl4, _ = _inclusion_tables(design)
    for k, table in ((3, incl3), (4, incl4)):
        bad = np.flatnonzero(~(table > 0.0))
        if bad.size:
            units = tuple(int(u) for u in _colex_unrank(int(bad[0]), k))
            raise ValueError(
                f"variance_estimate needs every inclusion of order 3 and 4 positive (two edges "
                f"sharing at most one unit must be observable together); "
                f"design.inclusion({units}) = {table[bad[0]].item()!r}. Fixed-size designs with "
                f"fewer than 4 units per sample cannot estimate their own variance unbiasedly."
            )


def variance_estimate(
    rewards: ArrayLike,
    scores: ArrayLike | None,
    mask: ArrayLike,
    design: Design,
    *,
    gram: ArrayLike | None = None,
) -> float | np.ndarray:
    r"""Unbiased estimate of ``tr Cov(hat g)`` from one observed sample.

    The Horvitz-Thompson variance estimator of the pair-HT gradient,

    .. math:: \hat V = \frac{1}{M^2} \sum_{e, f} \frac{I_e I_f}{P(I_e I_f = 1)}
              \frac{\Delta_{ef}}{\rho_e \rho_f} \langle h_e, h_f \rangle,

    reads only selected candidates and satisfies ``E_design[hat V] =
    design_covariance(...).trace`` exactly when every union inclusion ``P(I_e I_f = 1)`` is
    positive (all inclusions of order 2, 3 and 4); otherwise it raises ``ValueError`` naming
    the zero inclusion. It can be negative in a particular draw.

    Parameters
    ----------
    rewards : (..., G) array_like
        Rewards; unselected entries are ignored (may be NaN).
    scores : (..., G, d) array_like or None
        Scores; unselected rows are ignored (may be NaN). ``None`` when ``gram`` is given.
    mask : (..., G) array_like of bool
        ``J_i``: which candidates were completed.
    design : Design
        The design that drew ``mask``.
    gram : (..., G, G) array_like, optional
        Precomputed Gram matrix of the scores (entries of unselected rows are ignored).

    Returns
    -------
    float, or (...) ndarray for a batch

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import Bernoulli
    >>> from pairht.estimators import variance_estimate
    >>> r, s = [1.0, 0.0], np.array([[1.0], [0.0]])
    >>> variance_estimate(r, s, [True, True], Bernoulli([0.5, 0.5]))  # (1 - rho) / rho^2 * 1/4
    3.0
    """
    r = check_rewards(rewards, finite=False)
    g = r.shape[-1]
    design = _check_design(design, g)
    msk = check_mask(mask, g)
    s, gm0 = _scores_or_gram(scores, gram, g)
    if s is not None:
        other = s.shape[:-2]
    else:
        assert gm0 is not None  # exactly one of the two was given
        other = gm0.shape[:-2]
    batch = broadcast_batch(rewards=r.shape[:-1], scores=other, mask=msk.shape[:-1])
    msk_b = np.broadcast_to(msk, (*batch, g))
    r_b = np.broadcast_to(r, (*batch, g))
    check_observed_finite("rewards", r_b, msk_b, 0)
    r_b = zero_unobserved(r_b, msk_b, 0)
    obs = msk_b[..., :, None] & msk_b[..., None, :]
    if s is not None:
        # one Gram matrix per distinct scores array (scores are often shared by a batch of
        # masks), with the rows read by some mask checked and the others zeroed (NaN allowed)
        used = any_over_broadcast(msk_b, s.shape[:-2])
        check_observed_finite("scores", s, used, 1)
        s0 = zero_unobserved(s, used, 1)
        gm_s = np.matmul(s0, np.swapaxes(s0, -1, -2))
        gm = np.where(obs, np.broadcast_to(gm_s, (*batch, g, g)), 0.0)
    else:
        assert gm0 is not None
        gm = np.where(obs, np.broadcast_to(gm0, (*batch, g, g)), 0.0)
    rho = design.joint()
    _check_union_positive(design, rho)
    a = np.where(obs, _pair_coefficients(r_b, rho), 0.0).reshape(-1, g, g)
    sigma_hat = _general_sigma(a, design, rho, ht=True).reshape((*batch, g, g))
    trace = np.einsum("...ij,...ij->...", sigma_hat, gm)
    return float(trace) if trace.ndim == 0 else trace
