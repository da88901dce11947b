r"""Horvitz-Thompson estimators of the complete-pair target from the completed candidates.

A continuation design completes candidate ``i`` when ``J_i = 1``; the edge ``(i, j)`` is
observed when ``I_ij = J_i J_j = 1``, with logged joint inclusion probability
``rho_ij = P(J_i = J_j = 1)``. Every estimator here has the form

.. math:: \hat g = \sum_{i<j} W_{ij} h_{ij} = \sum_i A_i s_i, \qquad
          A_i = \tfrac12 \sum_{j} W_{ij} (r_i - r_j),

with ``W`` from :func:`edge_weights` (a registered variant, see
:mod:`pairht.estimators.variants`). The exact variant ``W_ij = I_ij / (M rho_ij)`` is the
PAIR estimator (Eq. pair-ht) and its advantages are Eq. pair-advantage. The gradient is
formed as ``sum_i A_i s_i``, never through the ``(G, G, d)`` kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from pairht._validation import check_symmetric
from pairht.estimators._inputs import (
    SYMMETRY_ATOL,
    any_over_broadcast,
    broadcast_batch,
    check_dtype,
    check_joint,
    check_mask,
    check_observed_finite,
    check_pi,
    check_positive_on,
    check_rewards,
    check_scores,
    observed_edges,
    zero_unobserved,
)
from pairht.estimators.variants import VARIANTS, Variant

if TYPE_CHECKING:
    from typing_extensions import Unpack


class WeightingOptions(TypedDict, total=False):
    """The estimator variant and its parameters, documented once at :func:`edge_weights`.

    The keyword options :func:`pair_advantages` and :func:`pair_estimate` forward to
    :func:`edge_weights` (``weighting`` default ``"exact"``, ``w_max`` and ``pi`` default
    ``None``); type a wrapper's own ``**options`` with it to forward them too.
    """

    weighting: str | Variant
    w_max: float | None
    pi: ArrayLike | None


def resolve_variant(weighting: str | Variant) -> Variant:
    """The registered :class:`Variant` named ``weighting`` (or ``weighting`` itself)."""
    if isinstance(weighting, Variant):
        return weighting
    variant = VARIANTS.get(weighting) if isinstance(weighting, str) else None
    if variant is None:
        raise ValueError(
            f"weighting must be one of {sorted(VARIANTS)} (registered in "
            f"pairht.estimators.VARIANTS); got {weighting!r}"
        )
    return variant


def check_w_max(variant: Variant, w_max: Any) -> float | None:
    """``w_max`` is required by clipping variants, positive and finite, and refused elsewhere."""
    if not variant.needs_w_max:
        if w_max is not None:
            raise ValueError(
                f"w_max is only used by clipping variants; weighting={variant.name!r} would "
                f"silently ignore w_max={w_max!r}. Use weighting='clipped' or drop w_max."
            )
        return None
    if w_max is None:
        raise ValueError(
            f"weighting={variant.name!r} needs w_max, the largest inverse weight "
            f"min(1/rho_ij, w_max); got w_max=None"
        )
    if isinstance(w_max, (bool, np.bool_, str, bytes)):
        raise TypeError(f"w_max must be a positive finite number; got {w_max!r}")
    try:
        value = float(w_max)
    except (TypeError, ValueError):
        raise ValueError(f"w_max must be a positive finite number; got {w_max!r}") from None
    if not np.isfinite(value) or value <= 0.0:
        raise ValueError(f"w_max must be a positive finite number; got {w_max!r}")
    return value


def _prepare_weights(
    mask: np.ndarray,
    joint: ArrayLike | None,
    variant: Variant,
    w_max: Any,
    pi: ArrayLike | None,
) -> np.ndarray:
    """Validate the design arguments against ``mask`` (bool ``(..., G)``) and return ``W``."""
    g = mask.shape[-1]
    w = check_w_max(variant, w_max)
    observed = observed_edges(mask)
    rho = None
    batches: dict[str, tuple[int, ...]] = {"mask": mask.shape[:-1]}
    if joint is None:
        if variant.uses_joint:
            raise ValueError(
                f"weighting={variant.name!r} needs joint, the (..., G, G) matrix of joint "
                f"inclusion probabilities rho_ij = P(J_i = J_j = 1); got joint=None"
            )
    else:
        rho = check_joint(joint, g)
        batches["joint"] = rho.shape[:-2]
    pi_arr = None
    if variant.needs_pi:
        if pi is None:
            raise ValueError(
                f"weighting={variant.name!r} needs pi, the (..., G) first-order inclusion "
                f"probabilities (the marginals this variant weights by); got pi=None"
            )
        pi_arr = check_pi(pi, g)
        batches["pi"] = pi_arr.shape[:-1]
    elif pi is not None:
        raise ValueError(
            f"pi is only used by weighting='marginal_only'; weighting={variant.name!r} would "
            f"silently ignore it. Drop pi or pass joint, which this variant uses."
        )
    batch = broadcast_batch(**batches)
    observed = np.broadcast_to(observed, (*batch, g, g))
    if rho is not None:
        check_positive_on("joint", np.broadcast_to(rho, observed.shape), observed, "rho_ij")
    if pi_arr is not None:
        prod = pi_arr[..., :, None] * pi_arr[..., None, :]
        check_positive_on("pi", np.broadcast_to(prod, observed.shape), observed, "pi_i * pi_j")
    return variant.weights(observed, rho, w_max=w, pi=pi_arr)


def edge_weights(
    mask: ArrayLike,
    joint: ArrayLike | None = None,
    *,
    weighting: str | Variant = "exact",
    w_max: float | None = None,
    pi: ArrayLike | None = None,
) -> np.ndarray:
    r"""Per-edge multipliers ``W_ij`` of a pair-estimator variant, normaliser included.

    Any variant's gradient is ``sum_{i<j} W_ij h_ij`` and its advantages are
    ``A_i = (1/2) sum_j W_ij (r_i - r_j)``. ``W`` is symmetric, has a zero diagonal and is
    zero on unobserved edges (``J_i J_j = 0``). For ``weighting="exact"``,
    ``W_ij = J_i J_j / (M rho_ij)`` with ``M = G(G-1)/2`` (PAIR paper, Eq. pair-ht).

    Parameters
    ----------
    mask : (..., G) array_like of bool
        ``J_i``: which candidates were completed (0/1 numbers are accepted).
    joint : (..., G, G) array_like, optional
        ``rho_ij = P(J_i = J_j = 1)`` as logged by the design, symmetric. Required by the
        variants that use it (``exact``, ``hajek``, ``clipped``); when given it must be
        positive on every observed edge, hold ``pi_i`` on its diagonal (as ``Design.joint()``
        does) and satisfy the Frechet bounds ``max(0, pi_i + pi_j - 1) <= rho_ij <=
        min(pi_i, pi_j)`` (within 1e-9; else ``ValueError`` naming the pair).
    weighting : str or Variant
        A name in :data:`~pairht.estimators.VARIANTS`: ``"exact"``, ``"hajek"``,
        ``"clipped"``, ``"marginal_only"``, ``"unweighted"`` or ``"observed_average"``.
    w_max : float, optional
        Clipping level of ``min(1/rho_ij, w_max)``; required by ``"clipped"`` only.
    pi : (..., G) array_like, optional
        First-order inclusion probabilities; required by ``"marginal_only"`` only.

    Returns
    -------
    (..., G, G) ndarray of float64
        The batch shape is the broadcast of those of ``mask``, ``joint`` and ``pi``.

    Examples
    --------
    >>> from pairht.estimators import edge_weights
    >>> from pairht.designs import Bernoulli
    >>> joint = Bernoulli([0.5, 0.5, 1.0]).joint()  # pi_i pi_j off the diagonal, pi on it
    >>> W = edge_weights([True, False, True], joint)
    >>> W.round(4).tolist()  # one observed edge, M = 3, rho_02 = 0.5
    [[0.0, 0.0, 0.6667], [0.0, 0.0, 0.0], [0.6667, 0.0, 0.0]]
    """
    variant = resolve_variant(weighting)
    try:
        m = np.asarray(mask)
    except (ValueError, TypeError):  # ragged nested sequences
        raise ValueError("mask must be a rectangular (..., G) boolean array; got a ragged "
                         "sequence") from None
    if m.ndim < 1 or m.shape[-1] < 2:
        raise ValueError(
            f"mask must have shape (..., G) with G >= 2 candidates; got shape {m.shape}"
        )
    return _prepare_weights(check_mask(m, m.shape[-1]), joint, variant, w_max, pi)


def _advantages_from_weights(r: np.ndarray, w: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``A_i = (1/2) sum_j W_ij (r_i - r_j)`` accumulated in ``dtype``."""
    r = r.astype(dtype, copy=False)
    diff = r[..., :, None] - r[..., None, :]
    return 0.5 * np.einsum("...ij,...ij->...i", w.astype(dtype, copy=False), diff)


def _masked_advantages(
    r: np.ndarray, msk: np.ndarray, w: np.ndarray, batch: tuple[int, ...], dtype: np.dtype
) -> np.ndarray:
    """Advantages with rewards checked (and zeroed) at unselected candidates only."""
    g = r.shape[-1]
    msk_b = np.broadcast_to(msk, (*batch, g))
    r_b = np.broadcast_to(r, (*batch, g))
    check_observed_finite("rewards", r_b, msk_b, 0)
    return _advantages_from_weights(zero_unobserved(r_b, msk_b, 0), w, dtype)


def _rewards_and_weights(
    rewards: ArrayLike,
    mask: ArrayLike,
    joint: ArrayLike | None,
    options: WeightingOptions,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Checked rewards (NaN allowed), mask and the variant's ``W`` of one estimator call."""
    r = check_rewards(rewards, finite=False)
    msk = check_mask(mask, r.shape[-1])
    return r, msk, edge_weights(msk, joint, **options)


def pair_advantages(
    rewards: ArrayLike,
    mask: ArrayLike,
    joint: ArrayLike | None = None,
    *,
    dtype: DTypeLike = np.float64,
    **options: Unpack[WeightingOptions],
) -> np.ndarray:
    r"""Pair-corrected sequence advantages (PAIR paper, Eq. pair-advantage).

    .. math:: \tilde A_i = \frac{1}{2M} \sum_{j \ne i} \frac{J_i J_j}{\rho_{ij}} (r_i - r_j)

    for ``weighting="exact"``; in general ``A_i = (1/2) sum_j W_ij (r_i - r_j)`` with ``W``
    from :func:`edge_weights`. ``A_i = 0`` for unselected candidates and
    ``sum_i A_i s_i`` is the variant's gradient (:func:`pair_estimate`), which for
    ``"exact"`` is :func:`pair_ht_gradient`. The advantages sum to zero over each group
    (they are antisymmetric pair sums), so they come out centred over the observed
    endpoints.

    Parameters
    ----------
    rewards : (..., G) array_like
        Rewards ``r_i``; entries of unselected candidates are ignored (may be NaN).
    mask : (..., G) array_like of bool
        ``J_i``: which candidates were completed.
    joint : (..., G, G) array_like, optional
        Logged ``rho_ij``; required by the variants that use it (see :func:`edge_weights`).
    dtype : float64 or float32
        Accumulation precision of the pair sums (the paper trains with FP32; float64 is
        the reference).
    **options
        ``weighting``, ``w_max``, ``pi`` (:class:`WeightingOptions`): the variant and its
        parameters, as in :func:`edge_weights`.

    Returns
    -------
    (..., G) ndarray of ``dtype``

    Examples
    --------
    Two draws of one design in one call (the mask carries the batch axis, ``joint`` is
    shared):

    >>> from pairht.estimators import pair_advantages
    >>> from pairht.designs import Bernoulli
    >>> rho = Bernoulli([0.5, 0.5, 1.0]).joint()
    >>> masks = [[True, False, True], [True, True, True]]
    >>> pair_advantages([1.0, 0.0, 0.0], masks, rho).round(4).tolist()
    [[0.3333, 0.0, -0.3333], [1.0, -0.6667, -0.3333]]
    """
    dt = check_dtype(dtype)
    r, msk, w = _rewards_and_weights(rewards, mask, joint, options)
    batch = broadcast_batch(rewards=r.shape[:-1], mask=msk.shape[:-1], weights=w.shape[:-2])
    return _masked_advantages(r, msk, w, batch, dt)


def check_edge_weights(w: np.ndarray, g: int) -> np.ndarray:
    """``W`` finite, nonnegative, symmetric with zero diagonal, shape ``(..., G, G)``."""
    if w.ndim < 2 or w.shape[-2:] != (g, g):
        raise ValueError(
            f"weights must have shape (..., G, G) with G = {g} (the last axis of rewards); "
            f"got shape {w.shape}"
        )
    bad = ~np.isfinite(w)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"weights must be finite (no NaN or inf); weights{list(where)} = {w[where].item()!r}"
        )
    bad = w < 0
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"weights must be >= 0 (W_ij = I_ij w_ij with a nonnegative edge weight); "
            f"weights{list(where)} = {w[where].item()!r}"
        )
    diag = np.diagonal(w, axis1=-2, axis2=-1)
    if np.any(diag != 0):
        where = tuple(int(i) for i in np.argwhere(diag != 0)[0])
        raise ValueError(
            f"weights must have a zero diagonal (a candidate forms no edge with itself); "
            f"weights{[*where[:-1], where[-1], where[-1]]} = {diag[where].item()!r}"
        )
    # Relative to the largest weight: the core builds W symmetric exactly, so any gap beyond
    # rounding means the argument is not an edge-weight matrix (e.g. a transposed mix-up).
    check_symmetric("weights", w, SYMMETRY_ATOL * max(float(np.abs(w).max(initial=0.0)), 1.0),
                    "W_ij = W_ji")
    return w


def pair_advantages_from_weights(
    rewards: ArrayLike,
    weights: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    dtype: DTypeLike = np.float64,
) -> np.ndarray:
    r"""``A_i = 1/2 sum_j W_ij (r_i - r_j)`` from edge weights already built.

    The kernel of :func:`pair_advantages`, for a caller that holds ``W`` (from
    :func:`edge_weights`, or a pruned design's): rewards at completed candidates must be
    finite, the others are ignored (may be NaN).

    Parameters
    ----------
    rewards : (..., G) array_like
    weights : (..., G, G) array_like
        Finite, nonnegative, symmetric, zero diagonal (:func:`check_edge_weights`).
    mask : (..., G) array_like of bool, optional
        ``J_i``; ``None``: the candidates with a nonzero weight. When given, ``weights``
        must vanish off the observed edges ``J_i J_j = 1``.
    dtype : float64 or float32
        Accumulation precision.

    Returns
    -------
    (..., G) ndarray of ``dtype``

    Examples
    --------
    >>> pair_advantages_from_weights([[1.0, 0.0]], [[[0.0, 4.0], [4.0, 0.0]]]).tolist()
    [[2.0, -2.0]]
    """
    dt = check_dtype(dtype)
    r = check_rewards(np.asarray(rewards, dtype=np.float64), finite=False)
    g = r.shape[-1]
    w = check_edge_weights(np.asarray(weights, dtype=np.float64), g)
    touched = np.any(w != 0, axis=-1)  # candidates whose reward enters A
    if mask is None:
        msk = touched
    else:
        msk = check_mask(mask, g)
        observed = msk[..., :, None] & msk[..., None, :]
        stray = (w != 0) & ~np.broadcast_to(observed, w.shape)
        if stray.any():
            where = tuple(int(i) for i in np.argwhere(stray)[0])
            raise ValueError(
                f"weights must be zero on every edge that was not observed (J_i J_j = 0); "
                f"weights{list(where)} = {w[where].item()!r} but mask does not hold both "
                f"endpoints {where[-2]} and {where[-1]}"
            )
    batch = broadcast_batch(rewards=r.shape[:-1], mask=msk.shape[:-1], weights=w.shape[:-2])
    if batch != r.shape[:-1]:
        raise ValueError(
            f"weights must have shape (B, G, G) = {(*r.shape, g)} to match rewards; "
            f"got {w.shape}"
        )
    return _masked_advantages(r, msk, np.broadcast_to(w, (*batch, g, g)), batch, dt)


def pair_estimate(
    rewards: ArrayLike,
    scores: ArrayLike,
    mask: ArrayLike,
    joint: ArrayLike | None = None,
    **options: Unpack[WeightingOptions],
) -> np.ndarray:
    r"""Gradient estimate ``sum_{i<j} W_ij h_ij = sum_i A_i s_i`` of any registered variant.

    ``weighting="exact"`` is :func:`pair_ht_gradient`; the other variants are the biased
    practical departures of the PAIR paper's appendix (see
    :func:`~pairht.estimators.conditional_bias` for their exact bias).

    Parameters
    ----------
    rewards : (..., G) array_like
        Rewards; entries of unselected candidates are ignored (may be NaN).
    scores : (..., G, d) array_like
        Sequence scores; rows of unselected candidates are ignored (may be NaN).
    mask : (..., G) array_like of bool
        ``J_i``: which candidates were completed.
    joint : (..., G, G) array_like, optional
        Logged ``rho_ij``, as in :func:`edge_weights`.
    **options
        ``weighting``, ``w_max``, ``pi`` (:class:`WeightingOptions`): the variant and its
        parameters, as in :func:`edge_weights`.

    Returns
    -------
    (..., d) ndarray of float64

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.estimators import pair_estimate
    >>> r, s = [1.0, 0.0, 0.0], np.array([[3.0], [0.0], [0.0]])
    >>> pair_estimate(r, s, [True, False, True], weighting="unweighted").tolist()
    [0.5]
    """
    r, msk, w = _rewards_and_weights(rewards, mask, joint, options)
    g = r.shape[-1]
    s = check_scores(scores, g, finite=False)
    batch = broadcast_batch(
        rewards=r.shape[:-1], scores=s.shape[:-2], mask=msk.shape[:-1], weights=w.shape[:-2]
    )
    adv = _masked_advantages(r, msk, w, batch, np.dtype(np.float64))
    # Scores may be shared across the batch (one group, many masks): a row is read when it
    # is selected in any batch element that uses it, and only those rows must be finite.
    used = any_over_broadcast(np.broadcast_to(msk, (*batch, g)), s.shape[:-2])
    check_observed_finite("scores", s, used, 1)
    s_obs = zero_unobserved(s, used, 1)
    return np.einsum("...g,...gd->...d", adv, s_obs)


def pair_ht_gradient(
    rewards: ArrayLike, scores: ArrayLike, mask: ArrayLike, joint: ArrayLike
) -> np.ndarray:
    r"""Horvitz-Thompson estimate of the complete-pair gradient (PAIR paper, Eq. pair-ht).

    Estimates ``g_pair = (1/M) sum_{i<j} h_ij``, ``h_ij = (r_i - r_j)(s_i - s_j)/2``, by

    .. math:: \hat g = \frac1M \sum_{i<j} \frac{J_i J_j}{\rho_{ij}} h_{ij}
                     = \sum_i \tilde A_i s_i ,

    computed from the advantages of :func:`pair_advantages` in ``O(G^2 + G d)``. Exactly
    design-unbiased when ``rho_ij > 0`` for every pair (Theorem 2); an edge with
    ``rho_ij = 0`` is never observed and its term is lost.

    Parameters
    ----------
    rewards : (..., G) array_like
        Terminal rewards ``r_i``; unselected entries are ignored (may be NaN).
    scores : (..., G, d) array_like
        Sequence scores ``s_i``; unselected rows are ignored (may be NaN).
    mask : (..., G) array_like of bool
        ``J_i``: which candidates were completed.
    joint : (..., G, G) array_like
        ``rho_ij = P(J_i = J_j = 1)``, logged before rewards existed; positive on every
        observed edge, ``pi`` on the diagonal, within the Frechet bounds (see
        :func:`edge_weights`).

    Returns
    -------
    (..., d) ndarray

    References
    ----------
    Horvitz, D. G. & Thompson, D. J. (1952). A generalization of sampling without
    replacement from a finite universe. JASA 47(260), 663-685.

    Examples
    --------
    Theorem 2 on a small design: the estimate averaged over the design's support (one
    estimate per sample, weighted by its probability) is the complete-pair target.

    >>> import numpy as np
    >>> from pairht.designs import ConditionalPoisson
    >>> from pairht.estimators import pair_gradient, pair_ht_gradient
    >>> r, s = np.array([1.0, 0.0, 2.0]), np.array([[3.0], [1.0], [0.0]])
    >>> design = ConditionalPoisson([0.5, 0.7, 0.8])  # two of the three completed
    >>> masks, probs = design.support()
    >>> draws = pair_ht_gradient(r, s, masks, design.joint())  # (3 samples, d = 1)
    >>> (probs @ draws).round(12).tolist(), pair_gradient(r, s).tolist()
    ([-0.5], [-0.5])
    """
    return pair_estimate(rewards, scores, mask, joint, weighting="exact")
