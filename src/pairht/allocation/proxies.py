r"""The contrast graph: edge proxies ``a_ij`` and the shared-vertex term ``b_i``.

PAIR (section "The contrast graph") weights each candidate pair by a nonnegative proxy of its
pair-kernel energy, ``a_ij ~ E[||h_ij||^2 | z_i, z_j]`` (Eq. edge-proxy), and charges every
vertex for the covariance of the edges it shares (section "Graph-coupled probability design"),

    b_i = (sum_{j != i} sqrt(a_ij))^2 - sum_{j != i} a_ij = 2 sum_{j<k; j,k != i} sqrt(a_ij a_ik).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from pairht import _validation
from pairht._validation import (
    check_finite,
    check_probabilities,
    check_symmetric,
    check_table_size,
)
from pairht.allocation._pair_tables import disagreement_fill, vertex_term_fill
from pairht.registry import Registry

ProxyKind = Literal["disagreement", "score_norm", "energy"]


@dataclasses.dataclass(frozen=True)
class ProxyCapabilities:
    """What an edge proxy reads besides ``p_hat``: ``needs`` names the keyword of
    :func:`edge_proxy` it requires (``"score_norm"``, ``"energy"``) or is ``None``."""

    needs: str | None = None


#: name -> ``proxy(p, extra) -> (..., G, G)``, with ``p`` the checked ``p_hat`` and ``extra``
#: the array its capability ``needs`` names (``None`` when it needs none).
PROXIES: Registry[Callable[[np.ndarray, Any], np.ndarray]] = Registry("proxy", ProxyCapabilities)


def check_pair_table_size(shape: tuple[int, ...], name: str = "p_hat") -> None:
    """Refuse a ``(..., G)`` input whose ``(..., G, G)`` pair tables exceed the memory limit.

    Every allocation builds several float64 tables of that shape (the proxy ``a``, its
    normalised copy, the objective's terms), so the size is checked against
    :data:`pairht._validation.MAX_TABLE_BYTES` before the first is allocated; a
    ``ValueError`` names ``name``, its shape and the limit.
    """
    g = shape[-1] if shape else 0
    problems = math.prod(shape[:-1])
    if 8 * problems * g * g <= _validation.MAX_TABLE_BYTES:  # read at call time, as below
        return  # (the message below is only built for a refusal)
    check_table_size(
        f"the G x G pair table of {name} with shape {shape} ({problems} problem(s) x G x G, "
        f"G = {g})",
        problems * g * g,
        "use fewer candidates per group (G) or split the batch into smaller calls",
    )


def disagreement(p_hat: ArrayLike) -> np.ndarray:
    r"""Predicted probability that two completed suffixes disagree (Eq. disagreement).

    ``d_ij = p_i (1 - p_j) + (1 - p_i) p_j`` for ``i != j``; the diagonal is set to 0 (a vertex
    forms no edge with itself).

    Parameters
    ----------
    p_hat : (..., G) array_like
        Predicted success probabilities in [0, 1].

    Returns
    -------
    (..., G, G) ndarray, symmetric with zero diagonal.

    Examples
    --------
    >>> disagreement([0.0, 1.0, 0.5]).tolist()
    [[0.0, 1.0, 0.5], [1.0, 0.0, 0.5], [0.5, 0.5, 0.0]]
    """
    p = check_probabilities("p_hat", p_hat)
    check_pair_table_size(p.shape)
    return _disagreement_table(p)


def _disagreement_table(p: np.ndarray) -> np.ndarray:
    """:func:`disagreement` of a checked float ``(..., G)`` array (the proxies' own path)."""
    g = p.shape[-1]
    flat = np.ascontiguousarray(p.reshape(-1, g))
    d = np.empty((flat.shape[0], g, g))
    disagreement_fill(flat, d)
    return d.reshape(*p.shape, g)


def check_energy(
    energy: ArrayLike, shape: tuple[int, ...] | None = None, name: str = "energy"
) -> np.ndarray:
    """Validate a pair-energy matrix: finite, nonnegative, symmetric, shape ``(..., G, G)``.

    Returns a float64 copy with the diagonal set to zero (self-pairs are not edges).
    """
    e = np.array(check_finite(name, energy), dtype=np.float64)
    if e.ndim < 2 or e.shape[-1] != e.shape[-2]:
        raise ValueError(f"{name} must have shape (..., G, G) (one square matrix per group); "
                         f"got {e.shape}")
    if shape is not None and e.shape != shape:
        raise ValueError(f"{name} must have shape {shape} to match p_hat; got {e.shape}")
    if np.any(e < 0):
        idx = tuple(int(i) for i in np.argwhere(e < 0)[0])
        raise ValueError(f"{name} must be nonnegative (it proxies E||h_ij||^2); "
                         f"{name}[{', '.join(map(str, idx))}] = {e[idx]!r}")
    # Exact symmetry up to rounding of whoever computed it: 1e-12 relative to the largest entry.
    transposed = check_symmetric(name, e, 1e-12 * max(float(np.max(e, initial=0.0)), 1e-300),
                                 "a_ij = a_ji")
    g = e.shape[-1]
    e = 0.5 * (e + transposed)
    e[..., np.arange(g), np.arange(g)] = 0.0
    return e


def edge_proxy(
    p_hat: ArrayLike,
    kind: ProxyKind = "disagreement",
    score_norm: ArrayLike | None = None,
    energy: ArrayLike | None = None,
) -> np.ndarray:
    r"""Edge proxy ``a_ij ~ E[||h_ij||_2^2 | z_i, z_j]`` of Eq. (edge-proxy), zero diagonal.

    ``kind="disagreement"`` (default, parameter-free): ``a_ij = d_ij``.
    ``kind="score_norm"``: ``a_ij = d_ij (m_i + m_j)^2 / 4`` with a score-norm predictor ``m``.
    ``kind="energy"``: ``a_ij = energy_ij``, a user-supplied (regressed) pair-energy matrix.

    Parameters
    ----------
    p_hat : (..., G) array_like
        Predicted success probabilities in [0, 1].
    kind : {"disagreement", "score_norm", "energy"}
    score_norm : (..., G) array_like, optional
        Nonnegative predicted score norms ``m_i`` (required for ``kind="score_norm"``).
    energy : (..., G, G) array_like, optional
        Symmetric, nonnegative, finite matrix (required for ``kind="energy"``).

    Returns
    -------
    (..., G, G) ndarray, symmetric, nonnegative, zero diagonal.

    Examples
    --------
    >>> edge_proxy([0.0, 1.0], kind="score_norm", score_norm=[1.0, 3.0]).tolist()
    [[0.0, 4.0], [4.0, 0.0]]
    """
    p = check_probabilities("p_hat", p_hat)
    check_pair_table_size(p.shape)
    PROXIES.check("proxy/kind", kind)
    needs = PROXIES.capabilities(kind).needs
    given = {"score_norm": score_norm, "energy": energy}
    for key, value in given.items():
        if key != needs and value is not None:
            raise ValueError(f"{key} is only used with kind={key!r}; got kind={kind!r}")
    if needs is not None and given[needs] is None:
        raise ValueError(f"kind={kind!r} needs {needs}, "
                         f"{NEEDS_DOC.get(needs, 'an array')}")
    return PROXIES[kind](p, given[needs] if needs is not None else None)


#: How :func:`edge_proxy` describes a missing input in its error.
NEEDS_DOC = {"score_norm": "(..., G), the predicted m_i",
             "energy": "(..., G, G), a pair-energy matrix"}


@PROXIES.register("disagreement")
def _disagreement_proxy(p: np.ndarray, _: Any) -> np.ndarray:
    return _disagreement_table(p)  # p was checked by edge_proxy


@PROXIES.register("score_norm", needs="score_norm")
def _score_norm_proxy(p: np.ndarray, score_norm: Any) -> np.ndarray:
    m = check_finite("score_norm", score_norm)
    if m.shape != p.shape:
        raise ValueError(f"score_norm must have the shape of p_hat {p.shape}; got {m.shape}")
    if np.any(m < 0):
        raise ValueError(f"score_norm must be nonnegative (a norm); got min {m.min()!r}")
    mm = m[..., :, None] + m[..., None, :]
    return _disagreement_table(p) * mm * mm / 4.0


@PROXIES.register("energy", needs="energy")
def _energy_proxy(p: np.ndarray, energy: Any) -> np.ndarray:
    return check_energy(energy, shape=(*p.shape, p.shape[-1]))


#: The proxy names (of :data:`PROXIES`).
PROXY_KINDS: tuple[str, ...] = tuple(PROXIES)


def covariance_term(a: ArrayLike) -> np.ndarray:
    r"""Shared-vertex covariance term ``b_i = (sum_{j!=i} sqrt(a_ij))^2 - sum_{j!=i} a_ij``.

    If ``a_ij >= ||h_ij||^2`` it bounds ``2 sum_{j<k; j,k!=i} |<h_ij, h_ik>|`` by Cauchy-Schwarz
    (appendix "Variance upper bound and convexity").

    Parameters
    ----------
    a : (..., G, G) array_like
        Edge proxy (the diagonal is ignored).

    Returns
    -------
    (..., G) ndarray, nonnegative.

    Examples
    --------
    >>> covariance_term([[0, 1, 4], [1, 0, 9], [4, 9, 0]]).tolist()
    [4.0, 6.0, 12.0]
    """
    return shared_vertex_term(check_energy(a, name="a"))


def shared_vertex_term(a: np.ndarray) -> np.ndarray:
    """:func:`covariance_term` without validation, for a float ``(..., G, G)`` proxy with zero
    diagonal that this module built."""
    # One compiled pass per row, no (..., G, G) temporary (see _pair_tables). (sum sqrt a)^2
    # >= sum a exactly; rounding can leave -1e-17 when a row has one edge: clipped at 0.
    g = a.shape[-1]
    flat = np.ascontiguousarray(a.reshape(-1, g, g), dtype=np.float64)
    out = np.empty(flat.shape[:2])
    vertex_term_fill(flat, out)
    return out.reshape(a.shape[:-1])


def proxy_terms(
    p: np.ndarray,
    proxy: str = "disagreement",
    covariance_term: bool = True,
    score_norm: ArrayLike | None = None,
    energy: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""The program's terms from a named proxy: ``a`` = :func:`edge_proxy` and ``b`` =
    :func:`covariance_term` of ``a`` (zeros when ``covariance_term`` is false).

    The objective ``sum_{i<j} a_ij / (pi_i pi_j) + sum_i b_i / pi_i`` of
    :func:`~pairht.allocation.allocate`, :func:`~pairht.allocation.reference_slsqp`, the
    joint comparator and :mod:`pairht.step.pair_program` is built here, once.

    Parameters
    ----------
    p : (..., G) ndarray          predicted success probabilities (validated by :func:`edge_proxy`)
    proxy : str                   a name of :data:`PROXIES`
    covariance_term : bool        whether ``b`` is the shared-vertex term or zero
    score_norm, energy            as in :func:`edge_proxy`

    Returns
    -------
    tuple of ndarray
        ``(a, b)``: ``a`` ``(..., G, G)`` symmetric, nonnegative, zero diagonal; ``b``
        ``(..., G)`` nonnegative.

    Examples
    --------
    >>> proxy_terms(np.array([0.0, 1.0, 0.5]))[1].round(4).tolist()
    [1.4142, 1.4142, 1.0]
    >>> proxy_terms(np.array([0.0, 1.0, 0.5]), covariance_term=False)[1].tolist()
    [0.0, 0.0, 0.0]
    """
    a = edge_proxy(p, kind=proxy, score_norm=score_norm, energy=energy)  # type: ignore[arg-type]
    b = shared_vertex_term(a) if covariance_term else np.zeros(a.shape[:-1])
    return a, b
