r"""Exact conditional (design) bias of the pair-estimator variants.

Conditional on the candidate population (rewards and scores fixed), a variant with edge
multipliers ``W`` has

.. math:: E_{design}[\hat g] - g_{pair} = \sum_{i<j} \Big(E[W_{ij}] - \frac1M\Big) h_{ij}
          = \frac1M \sum_{i<j} c_{ij} h_{ij}.

For the linear variants ``c_e`` has the closed forms of the PAIR paper's appendices
("Naive selection bias", "Estimated and stabilized propensities"); for the ratio variants
(``hajek``, ``observed_average``) ``E[W]`` depends on the whole design and is computed
exactly by enumerating ``design.support()``, which is limited to small ``N``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_int, check_option_names
from pairht.designs.base import MAX_SUPPORT_UNITS, Design
from pairht.estimators._inputs import (
    broadcast_batch,
    check_joint,
    check_rewards,
    check_scores,
    n_pairs,
)
from pairht.estimators.horvitz_thompson import (
    _advantages_from_weights,
    check_w_max,
    edge_weights,
    resolve_variant,
)
from pairht.estimators.variants import Variant

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: Support masks processed at once when enumerating ``E[W]`` (bounds memory to
#: ``SUPPORT_CHUNK * G * G`` floats).
SUPPORT_CHUNK = 4096


def weighted_pair_sum(coef: np.ndarray, rewards: np.ndarray, scores: np.ndarray) -> np.ndarray:
    r"""``sum_{i<j} C_ij h_ij`` for a symmetric ``C`` (..., G, G), without the dense kernel.

    Uses ``sum_{i<j} C_ij h_ij = sum_i a_i s_i`` with ``a_i = (1/2) sum_j C_ij (r_i - r_j)``;
    the diagonal of ``C`` is irrelevant (``h_ii = 0``).
    """
    a = _advantages_from_weights(rewards, coef, np.dtype(np.float64))
    return np.einsum("...g,...gd->...d", a, scores)


def _check_design(design: Any, g: int | None = None) -> Design:
    if not isinstance(design, Design):
        raise ValueError(
            f"design must be a pairht.designs.Design (e.g. Bernoulli(pi)); "
            f"got {type(design).__name__}"
        )
    if g is not None and design.n_units != g:
        raise ValueError(
            f"design must have one unit per candidate: design.n_units = {design.n_units} "
            f"but rewards has G = {g} along its last axis"
        )
    return design


class BiasOptions(TypedDict, total=False):
    """A variant's parameters for its exact bias, documented once at :func:`expected_edge_weights`.

    The keyword options :func:`conditional_bias` forwards to :func:`expected_edge_weights`
    (``w_max`` and ``rho_hat`` default ``None``, ``max_units`` :data:`MAX_SUPPORT_UNITS`).
    """

    w_max: float | None
    rho_hat: ArrayLike | None
    max_units: int


def expected_edge_weights(
    design: Design,
    *,
    weighting: str | Variant,
    w_max: float | None = None,
    rho_hat: ArrayLike | None = None,
    max_units: int = MAX_SUPPORT_UNITS,
) -> np.ndarray:
    r"""``E_design[W]`` of a variant, exactly, by enumerating ``design.support()``.

    ``E[W_ij] = sum_s P(s) W_ij(s)`` over every sample ``s`` of the design. The cost is
    ``O(|support| G^2)``; the support is enumerated only for ``N <= max_units``.

    Parameters
    ----------
    design : Design
        The sampling design (its ``joint()`` and ``pi`` feed the weights).
    weighting : str or Variant
        A registered variant name, see :func:`~pairht.estimators.edge_weights`.
    w_max : float, optional
        Clipping level, for ``"clipped"`` only.
    rho_hat : (N, N) array_like, optional
        Joint probabilities the estimator uses instead of the design's (estimated
        propensities); only for variants that read ``joint``.
    max_units : int
        Largest ``N`` for which ``design.support()`` is enumerated.

    Returns
    -------
    (N, N) ndarray
        Symmetric, zero diagonal.

    Examples
    --------
    >>> from pairht.designs import Bernoulli
    >>> from pairht.estimators import expected_edge_weights
    >>> EW = expected_edge_weights(Bernoulli([0.5, 0.5, 0.5]), weighting="observed_average")
    >>> round(float(EW[0, 1]), 6)  # P(J_0 J_1 = 1) * E[1/K_E | J_0 J_1 = 1] = 1/4 * (1/2 + 1/6)
    0.166667
    """
    design = _check_design(design)
    check_int("max_units", max_units, low=1)
    variant = resolve_variant(weighting)
    w = check_w_max(variant, w_max)
    joint = _rho_used(design, variant, rho_hat)
    masks, probs = design.support(max_units=max_units)
    g = design.n_units
    pi = design.pi if variant.needs_pi else None
    out = np.zeros((g, g))
    for start in range(0, masks.shape[0], SUPPORT_CHUNK):
        chunk = masks[start : start + SUPPORT_CHUNK]
        weights = edge_weights(chunk, joint, weighting=variant, w_max=w, pi=pi)
        out += np.tensordot(probs[start : start + SUPPORT_CHUNK], weights, axes=1)
    return out


def _rho_used(design: Design, variant: Variant, rho_hat: ArrayLike | None) -> np.ndarray | None:
    """The joint matrix the estimator divides by: ``rho_hat`` if given, else the design's."""
    rho = design.joint()
    if rho_hat is None:
        return rho if variant.uses_joint else None
    if not variant.uses_joint:
        raise ValueError(
            f"rho_hat (estimated propensities) only affects variants that use joint; "
            f"weighting={variant.name!r} does not read it"
        )
    hat = check_joint(rho_hat, design.n_units, name="rho_hat")
    if hat.ndim != 2:
        raise ValueError(f"rho_hat must have shape (N, N) for one design; got {hat.shape}")
    off = ~np.eye(design.n_units, dtype=bool)
    bad = off & (rho > 0.0) & ~(hat > 0.0)
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(
            f"rho_hat must be > 0 on every edge the design can observe (rho_ij > 0), or the "
            f"estimator divides by zero; rho_hat[{i}, {j}] = {hat[i, j].item()!r} while "
            f"rho[{i}, {j}] = {rho[i, j].item()!r}"
        )
    return hat


def conditional_bias(
    rewards: ArrayLike,
    scores: ArrayLike,
    design: Design,
    *,
    weighting: str | Variant,
    **options: Unpack[BiasOptions],
) -> np.ndarray:
    r"""Exact conditional bias ``E_design[hat g] - g_pair`` of a pair-estimator variant.

    With ``c_e`` the bias multiplier, ``bias = (1/M) sum_{e=(i,j)} c_e h_e``, where
    (``rho`` the design's joint, ``rho_hat`` the one the estimator used, default ``rho``):

    - ``exact``: ``c_e = rho_e / rho_hat_e - 1`` (0 with the true propensities: Theorem 2);
    - ``clipped``: ``c_e = rho_e min(1/rho_hat_e, w_max) - 1 = min(1, w_max rho_e) - 1``;
    - ``marginal_only``: ``c_e = rho_e / (pi_i pi_j) - 1``;
    - ``unweighted``: ``c_e = rho_e - 1`` (Proposition 1);
    - edges with ``rho_e = 0`` are never observed: ``c_e = -1`` for every variant;
    - ``hajek`` and ``observed_average`` (random denominators): ``c_e = M E[W_e] - 1`` with
      ``E[W_e]`` enumerated over ``design.support()`` (:func:`expected_edge_weights`);
      exact, but only for ``N <= max_units``. For ``observed_average`` this is
      ``E[I_e / K_E ; K_E > 0]``, i.e. ``P(K_E > 0)`` times the appendix's conditional form,
      because the estimator returns 0 on draws without an edge.

    Parameters
    ----------
    rewards : (..., G) array_like
        Rewards of all ``G`` candidates (the population, not only the selected ones).
    scores : (..., G, d) array_like
        Scores of all candidates.
    design : Design
        The continuation design, ``design.n_units == G``.
    weighting : str or Variant
        A registered variant name, see :func:`~pairht.estimators.edge_weights`.
    **options
        ``w_max``, ``rho_hat``, ``max_units`` (:class:`BiasOptions`): as in
        :func:`expected_edge_weights` (with ``N = G``); the support is enumerated for the
        ratio variants only.

    Returns
    -------
    (..., d) ndarray
        The bias ``E_design[hat g] - g_pair``, in the units of the scores.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import Bernoulli
    >>> from pairht.estimators import conditional_bias
    >>> r, s = np.array([1.0, 0.0, 0.0]), np.array([[3.0], [0.0], [0.0]])
    >>> d = Bernoulli([0.5, 0.5, 0.5])
    >>> conditional_bias(r, s, d, weighting="unweighted").tolist()  # (rho - 1) = -3/4 of target
    [-0.75]
    >>> conditional_bias(r, s, d, weighting="exact").tolist()
    [0.0]
    """
    check_option_names("conditional_bias", options, BiasOptions)
    variant = resolve_variant(weighting)
    w = check_w_max(variant, options.get("w_max"))
    r = check_rewards(rewards)
    g = r.shape[-1]
    s = check_scores(scores, g)
    broadcast_batch(rewards=r.shape[:-1], scores=s.shape[:-2])
    design = _check_design(design, g)
    check_int("max_units", options.get("max_units", MAX_SUPPORT_UNITS), low=1)
    rho = design.joint()
    used = _rho_used(design, variant, options.get("rho_hat"))
    hat = used if used is not None else rho
    m = n_pairs(g)
    coef = variant.bias_multiplier(rho, hat, w_max=w, pi=design.pi)
    if coef is None:  # a ratio variant: E[W] by enumerating the support
        coef = m * expected_edge_weights(design, weighting=variant, **options) - 1.0
    return weighted_pair_sum(coef / m, r, s)
