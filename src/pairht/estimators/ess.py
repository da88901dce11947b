"""Kish effective sample size of the observed edge weights."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite, check_symmetric, name_index


def ess(weights: ArrayLike) -> float | np.ndarray:
    r"""Kish effective number of observed edges ``(sum_e w_e)^2 / sum_e w_e^2``.

    Equal to the number of observed edges when all their weights are equal, and smaller the
    more unequal the inverse weights are; it is scale-free, so the weights of
    :func:`~pairht.estimators.edge_weights` (normaliser included) give the same value as the
    raw ``1/rho_e``. Unobserved edges carry weight zero and do not count; with no observed
    edge the ESS is defined as 0.

    Parameters
    ----------
    weights : (E,) or (..., G, G) array_like
        Non-negative weights. A 1-d array is a flat vector of edge weights; an array with
        two or more axes is a batch of symmetric ``(G, G)`` edge-weight matrices (e.g. from
        :func:`~pairht.estimators.edge_weights`) whose upper triangle ``i < j`` holds one
        weight per edge.

    Returns
    -------
    float for a vector or a single matrix, else ndarray of shape ``(...)``.

    References
    ----------
    Kish, L. (1965). Survey Sampling. Wiley.

    Examples
    --------
    >>> from pairht.estimators import ess
    >>> ess([2.0, 2.0, 0.0])
    2.0
    >>> ess([[0.0, 1.0, 3.0], [1.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    1.6
    """
    w = check_finite("weights", weights)
    if w.ndim == 0:
        raise ValueError("weights must be a (E,) vector or (..., G, G) matrices; got a scalar")
    if (w < 0).any():
        where = tuple(int(i) for i in np.argwhere(w < 0)[0])
        raise ValueError(
            f"weights must be non-negative (inverse inclusion weights); "
            f"weights{name_index(where)} = {w[where].item()!r}"
        )
    if w.ndim == 1:
        edges = w
    else:
        g = w.shape[-1]
        if w.shape[-2] != g:
            raise ValueError(
                f"weights with two or more axes must be (..., G, G) edge-weight matrices; "
                f"got shape {w.shape}"
            )
        check_symmetric("weights", w, 1e-12 * np.abs(w).max(initial=0.0),
                        "W_ij = W_ji, one weight per edge; pass a flat vector for per-edge "
                        "weights")
        iu, ju = np.triu_indices(g, k=1)
        edges = w[..., iu, ju]
    total = edges.sum(axis=-1)
    sq = (edges * edges).sum(axis=-1)
    out = np.divide(total * total, sq, out=np.zeros_like(total), where=sq > 0.0)
    return float(out) if out.ndim == 0 else out
