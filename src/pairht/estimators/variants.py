r"""Edge-weighting variants of the pair estimator, one registered object each.

Every variant estimates the complete-pair target ``g_pair = (1/M) sum_{i<j} h_ij`` as

.. math:: \hat g = \sum_{i<j} W_{ij} h_{ij}, \qquad A_i = \tfrac12 \sum_j W_{ij} (r_i - r_j),

with an edge multiplier ``W_ij`` that is zero on unobserved edges (``I_ij = J_i J_j = 0``)
and includes the normaliser. Variants differ only in ``W``:

================== ================================= =================================
name               W_ij on an observed edge          conditional bias (PAIR paper)
================== ================================= =================================
exact              1 / (M rho_ij)                    0 (Theorem 2)
hajek              (1/rho_ij) / sum_e I_e / rho_e    ratio estimator; by enumeration
clipped            min(1/rho_ij, w_max) / M          multiplier min(1, w_max rho_e) - 1
marginal_only      1 / (M pi_i pi_j)                 multiplier rho_e / (pi_i pi_j) - 1
unweighted         1 / M                             multiplier rho_e - 1
observed_average   1 / K_E,  K_E = sum_e I_e         random denominator; by enumeration
================== ================================= =================================

"Multiplier ``c_e``" means ``E_design[hat g] - g_pair = (1/M) sum_e c_e h_e`` (appendix
"Naive selection bias" and "Estimated and stabilized propensities"). New variants are added
with :func:`register_variant`, in the style of verl's ``@register_adv_est``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import ClassVar, TypeVar

import numpy as np

from pairht.estimators._inputs import n_pairs
from pairht.registry import Registry


class Variant(abc.ABC):
    """One way of weighting the observed edges of the pair estimator.

    Subclasses set the class attributes and implement :meth:`weights`; linear variants
    (``W_ij = I_ij w_ij`` with ``w`` fixed by the design) also implement
    :meth:`bias_multiplier` with their closed-form conditional bias.
    """

    #: Registry name (set by :func:`register_variant`).
    name: ClassVar[str] = ""
    #: Whether the estimator is exactly design-unbiased when every rho_ij > 0.
    unbiased: ClassVar[bool] = False
    #: One line stating the conditional bias, for docs and error messages.
    bias: ClassVar[str] = ""
    #: Whether ``W`` reads the joint inclusion matrix ``rho``.
    uses_joint: ClassVar[bool] = True
    #: Whether ``W_ij = I_ij w_ij`` with ``w`` fixed by the design (not by the sample): then
    #: the estimate is linear in the edge indicators and its exact covariance follows from
    #: inclusions up to order 4 (:func:`~pairht.estimators.design_covariance`).
    linear: ClassVar[bool] = True
    #: Whether the variant needs ``w_max`` (clipping level) or ``pi`` (marginals).
    needs_w_max: ClassVar[bool] = False
    needs_pi: ClassVar[bool] = False

    @abc.abstractmethod
    def weights(
        self,
        observed: np.ndarray,
        joint: np.ndarray | None,
        *,
        w_max: float | None,
        pi: np.ndarray | None,
    ) -> np.ndarray:
        """Edge multipliers ``W`` of shape ``observed.shape``.

        ``observed`` is ``I_ij`` (bool ``(..., G, G)``, zero diagonal); ``joint`` broadcasts
        against it and is positive on every observed edge (checked by the caller).
        """

    def bias_multiplier(
        self,
        rho: np.ndarray,
        rho_hat: np.ndarray,
        *,
        w_max: float | None,
        pi: np.ndarray,
    ) -> np.ndarray | None:
        """Closed-form ``c_e`` with ``E[hat g] - g_pair = (1/M) sum_e c_e h_e``, or ``None``.

        ``rho`` is the design's true joint matrix, ``rho_hat`` the one the estimator used and
        ``pi`` the design's marginals. ``None`` means no closed form from pairwise inclusions
        exists (ratio estimators); the bias is then computed by enumeration.
        """
        return None

    def __repr__(self) -> str:
        return f"<pair-estimator variant {self.name!r}: {self.bias}>"


@dataclasses.dataclass(frozen=True)
class VariantCapabilities:
    """What a variant declares (read from its class attributes when it registers): see
    :class:`Variant` for each field."""

    unbiased: bool = False
    uses_joint: bool = True
    linear: bool = True
    needs_w_max: bool = False
    needs_pi: bool = False


#: Registry of edge-weighting variants, name -> instance.
VARIANTS: Registry[Variant] = Registry("weighting", VariantCapabilities)

_V = TypeVar("_V", bound=type[Variant])


def register_variant(name: str) -> Callable[[_V], _V]:
    """Class decorator registering a :class:`Variant` subclass under ``name`` in VARIANTS,
    its capabilities (:class:`VariantCapabilities`) read from its class attributes.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.estimators import VARIANTS, Variant, register_variant
    >>> @register_variant("half_exact")
    ... class HalfExact(Variant):
    ...     bias = "multiplier -1/2"
    ...     def weights(self, observed, joint, *, w_max, pi):
    ...         g = observed.shape[-1]
    ...         return np.where(observed, 0.5 / (g * (g - 1) / 2 * joint), 0.0)
    >>> VARIANTS["half_exact"].name, VARIANTS.capabilities("half_exact").linear
    ('half_exact', True)
    >>> del VARIANTS["half_exact"]
    """

    def decorate(cls: _V) -> _V:
        if name in VARIANTS:
            raise ValueError(f"variant name {name!r} is already registered")
        cls.name = name
        caps = {f.name: getattr(cls, f.name) for f in dataclasses.fields(VariantCapabilities)}
        VARIANTS.register(name, cls(), **caps)
        return cls

    return decorate


def inverse_on(values: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """``1/values`` on observed edges, 0 elsewhere (never divides by an unobserved zero).

    The one implementation of the inverse inclusion weight ``1/rho_ij`` (``1/(pi_i pi_j)``)
    of the pair estimator; the variants below scale or clip it, and the audit's Monte Carlo
    replay reads the relative weights ``M W_ij = 1/rho_ij`` from it.
    """
    # reciprocal of a copy with 1 on unobserved edges, then zeroed there: three dense passes,
    # much faster than a masked ``np.divide(..., where=)``
    safe = np.where(observed, values, 1.0)
    np.reciprocal(safe, out=safe)
    safe *= observed
    return safe


def _never_observed(rho: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Edges with rho = 0 are never observed, so the estimator drops them: multiplier -1."""
    return np.where(rho > 0.0, c, -1.0)


@register_variant("exact")
class Exact(Variant):
    r"""Horvitz-Thompson: ``W_ij = I_ij / (M rho_ij)`` (PAIR paper, Eq. pair-ht).

    Exactly design-unbiased when every ``rho_ij > 0`` (Theorem 2). With estimated
    propensities ``rho_hat`` in place of ``rho`` the bias multiplier is
    ``rho_e / rho_hat_e - 1`` (appendix "Estimated and stabilized propensities").
    """

    unbiased = True
    bias = "0 when every rho_ij > 0; rho_e / rho_hat_e - 1 with estimated propensities"

    def weights(self, observed, joint, *, w_max, pi):  # type: ignore[no-untyped-def]
        m = n_pairs(observed.shape[-1])
        return inverse_on(joint, observed) / m

    def bias_multiplier(self, rho, rho_hat, *, w_max, pi):  # type: ignore[no-untyped-def]
        ratio = np.divide(rho, rho_hat, out=np.zeros_like(rho), where=rho > 0.0)
        return _never_observed(rho, ratio - 1.0)


@register_variant("hajek")
class Hajek(Variant):
    r"""Self-normalised (Hajek): ``W_ij = (I_ij / rho_ij) / sum_{e} I_e / rho_e``.

    The denominator is an unbiased estimate of ``M``, so the estimator is a ratio of two
    unbiased estimates: biased in finite samples, often with lower MSE. ``W = 0`` when no
    edge is observed. The exact bias needs the whole design, not pairwise
    inclusions; :func:`~pairht.estimators.conditional_bias` enumerates the support.
    """

    bias = "ratio estimator: no closed form; exact by enumeration of the design support"
    linear = False

    def weights(self, observed, joint, *, w_max, pi):  # type: ignore[no-untyped-def]
        inv = inverse_on(joint, observed)
        total = inv.sum(axis=(-2, -1), keepdims=True) / 2.0  # sum over i < j
        return np.divide(inv, total, out=np.zeros_like(inv), where=total > 0.0)


@register_variant("clipped")
class Clipped(Variant):
    r"""Clipped inverse weights: ``W_ij = I_ij min(1/rho_ij, w_max) / M``.

    Conditional bias multiplier ``rho_e min(1/rho_hat_e, w_max) - 1``, which is
    ``min(1, w_max rho_e) - 1`` with the true propensities: edges with
    ``rho_e < 1/w_max`` are shrunk towards zero.
    """

    bias = "multiplier min(1, w_max rho_e) - 1 (edges with rho_e < 1/w_max shrink)"
    needs_w_max = True

    def weights(self, observed, joint, *, w_max, pi):  # type: ignore[no-untyped-def]
        m = n_pairs(observed.shape[-1])
        return np.minimum(inverse_on(joint, observed), w_max) / m

    def bias_multiplier(self, rho, rho_hat, *, w_max, pi):  # type: ignore[no-untyped-def]
        inv = np.divide(1.0, rho_hat, out=np.zeros_like(rho_hat), where=rho > 0.0)
        return _never_observed(rho, rho * np.minimum(inv, w_max) - 1.0)


@register_variant("marginal_only")
class MarginalOnly(Variant):
    r"""Product of marginals: ``W_ij = I_ij / (M pi_i pi_j)``.

    Correct only when ``rho_ij = pi_i pi_j`` (the Bernoulli design); under any dependent
    design (conditional Poisson, dependent rounding, an anchor pair) the multiplier
    ``rho_e / (pi_i pi_j) - 1`` is nonzero. Needs ``pi``.
    """

    bias = "multiplier rho_e / (pi_i pi_j) - 1 (zero only for the Bernoulli design)"
    uses_joint = False
    needs_pi = True

    def weights(self, observed, joint, *, w_max, pi):  # type: ignore[no-untyped-def]
        m = n_pairs(observed.shape[-1])
        prod = pi[..., :, None] * pi[..., None, :]
        return inverse_on(prod, observed) / m

    def bias_multiplier(self, rho, rho_hat, *, w_max, pi):  # type: ignore[no-untyped-def]
        prod = np.outer(pi, pi)
        ratio = np.divide(rho, prod, out=np.zeros_like(rho), where=rho > 0.0)
        return _never_observed(rho, ratio - 1.0)


@register_variant("unweighted")
class Unweighted(Variant):
    r"""No inverse weights, complete-pair denominator: ``W_ij = I_ij / M``.

    Conditional bias multiplier ``rho_e - 1`` (PAIR paper, Proposition 1): even a constant
    edge inclusion ``p`` attenuates the target by ``p``.
    """

    bias = "multiplier rho_e - 1 (attenuates the target; Proposition 1)"
    uses_joint = False

    def weights(self, observed, joint, *, w_max, pi):  # type: ignore[no-untyped-def]
        return observed / float(n_pairs(observed.shape[-1]))

    def bias_multiplier(self, rho, rho_hat, *, w_max, pi):  # type: ignore[no-untyped-def]
        return rho - 1.0


@register_variant("observed_average")
class ObservedAverage(Variant):
    r"""Average over the observed edges: ``W_ij = I_ij / K_E``, ``K_E = sum_{e} I_e``.

    ``W = 0`` when ``K_E = 0``. Then ``E[hat g] = sum_e w_e h_e`` with
    ``w_e = E[I_e / K_E ; K_E > 0]`` (appendix "Naive selection bias", there conditioned on
    ``K_E > 0``), which equals ``1/M`` only for a self-weighting design. Computed exactly by
    enumeration of the design support.
    """

    bias = "random denominator: weights E[I_e / K_E; K_E > 0]; exact by enumeration"
    uses_joint = False
    linear = False

    def weights(self, observed, joint, *, w_max, pi):  # type: ignore[no-untyped-def]
        count = observed.sum(axis=(-2, -1), keepdims=True) / 2.0
        obs = observed.astype(np.float64)
        return np.divide(obs, count, out=np.zeros_like(obs), where=count > 0.0)
