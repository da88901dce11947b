"""Per-step allocation diagnostics, as the appendix logs them ("Probability optimization")."""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite, check_probabilities
from pairht.allocation._checks import broadcast_budget, check_flag
from pairht.allocation.kkt import _value
from pairht.allocation.proxies import check_energy, covariance_term
from pairht.allocation.solver import AllocationResult
from pairht.estimators import check_joint, n_pairs


@dataclasses.dataclass(frozen=True)
class AllocationDiagnostics:
    """Diagnostics of a batch of designs; every field has the batch shape ``(...)``.

    For a single design (``pi`` of shape ``(G,)``) every field but ``pi`` is a Python
    ``float``, not a 0-d array.

    Attributes
    ----------
    pi : (..., G)             the probability vector
    expected_cost : (...)     predicted expected suffix cost ``sum_i c_i pi_i``
    unspent_budget : (...)    ``budget - expected_cost`` (from ``budget``, else the result's
                              field; NaN when neither was passed)
    residual : (...)          solver KKT residual (NaN when no result was passed)
    expected_edges : (...)    expected observed edges ``sum_{i<j} rho_ij``
    expected_completed : (...) expected completed vertices ``sum_i pi_i``
    max_weight : (...)        largest inverse edge weight ``max_{i<j} 1 / rho_ij``
    expected_ess : (...)      ``M^2 / sum_{i<j} 1/rho_ij`` (see :func:`diagnostics`)
    variance_proxy : (...)    ``sum_{i<j} a_ij/(pi_i pi_j) + sum_i b_i/pi_i`` (NaN without a)
    """

    pi: np.ndarray
    expected_cost: np.ndarray | float
    unspent_budget: np.ndarray | float
    residual: np.ndarray | float
    expected_edges: np.ndarray | float
    expected_completed: np.ndarray | float
    max_weight: np.ndarray | float
    expected_ess: np.ndarray | float
    variance_proxy: np.ndarray | float

    def as_dict(self) -> dict[str, np.ndarray | float]:
        """The fields as a plain dict (for loggers)."""
        return dataclasses.asdict(self)


def diagnostics(
    pi: ArrayLike,
    c_hat: ArrayLike,
    joint: ArrayLike | None = None,
    a: ArrayLike | None = None,
    result: AllocationResult | None = None,
    covariance: bool = True,
    budget: ArrayLike | None = None,
) -> AllocationDiagnostics:
    r"""Allocation diagnostics of the appendix, per problem.

    With edge inclusion probabilities ``rho_ij`` (``joint``; default the Bernoulli
    ``pi_i pi_j``) and ``M = G(G-1)/2``:

    * ``expected_edges = sum_{i<j} rho_ij`` (expected number of observed contrast terms);
    * ``expected_completed = sum_i pi_i``;  ``expected_cost = sum_i c_i pi_i``;
    * ``unspent_budget = budget - expected_cost`` (predicted tokens left unused; with a
      ``result`` and no ``budget``, the result's ``unspent_budget``);
    * ``max_weight = max_{i<j} 1/rho_ij`` (the largest Horvitz-Thompson edge weight);
    * ``expected_ess = (sum_e rho_e w_e)^2 / sum_e rho_e w_e^2`` with ``w_e = 1/rho_e``, i.e.
      ``M^2 / sum_e 1/rho_e``: the Kish ESS of the HT weights with numerator and denominator
      replaced by their design expectations. It equals ``M`` when every ``rho_e = 1`` and is
      the harmonic mean of ``rho_e`` times ``M``, so it is at most ``expected_edges``;
    * ``variance_proxy = sum_{i<j} a_ij/(pi_i pi_j) + sum_i b_i/pi_i`` (the objective of
      Eq. convex-objective, evaluated at ``pi``; ``b`` from ``a`` unless ``covariance`` is
      False). It is the Bernoulli design's proxy whatever ``joint`` is.

    Parameters
    ----------
    pi : (..., G) array_like
    c_hat : (..., G) array_like
    joint : (..., G, G) array_like, optional
        Exact joint inclusions of the design used (e.g. ``design.joint()``).
    a : (..., G, G) array_like, optional
        Edge proxy (for the variance proxy).
    result : AllocationResult, optional
        Supplies the solver residual (and the unspent budget); batch shape of ``pi``.
    covariance : bool
        Include ``b_i`` in the variance proxy.
    budget : float or (...) array_like, optional
        The expected-cost budget, for ``unspent_budget``.

    Returns
    -------
    AllocationDiagnostics

    Examples
    --------
    >>> d = diagnostics([0.5, 0.5, 1.0], [100.0, 100.0, 200.0])
    >>> d.expected_edges, d.max_weight, d.expected_ess
    (1.25, 4.0, 1.125)
    """
    p = check_probabilities("pi", pi)
    covariance = check_flag("covariance", covariance)
    if p.ndim < 1 or p.shape[-1] < 2:
        raise ValueError(f"pi must have shape (..., G) with G >= 2; got {p.shape}")
    c = check_finite("c_hat", c_hat)
    if c.shape != p.shape:
        raise ValueError(f"c_hat must have the shape of pi {p.shape}; got {c.shape}")
    if np.any(c <= 0):
        raise ValueError(
            f"c_hat must be positive (predicted suffix tokens); got min {float(c.min())!r}"
        )
    G = p.shape[-1]
    iu = np.triu_indices(G, 1)
    if joint is None:
        rho = p[..., :, None] * p[..., None, :]
    else:
        # only the upper triangle is read below: an asymmetric matrix is not a joint
        rho = check_joint(joint, G)
        if rho.shape != (*p.shape, G):
            raise ValueError(f"joint must have shape {(*p.shape, G)}; got {rho.shape}")
    edges = rho[..., iu[0], iu[1]]
    M = n_pairs(G)
    with np.errstate(divide="ignore"):
        inv = 1.0 / edges
    sum_inv = inv.sum(axis=-1)
    if a is None:
        vp = np.full(p.shape[:-1], np.nan)
    else:
        aa = check_energy(a, shape=(*p.shape, G), name="a")
        b = covariance_term(aa) if covariance else np.zeros(p.shape)
        with np.errstate(divide="ignore"):
            vp = _value(p, aa, b)
    batch = p.shape[:-1]
    cost = np.einsum("...i,...i->...", c, p)
    unspent = np.full(batch, np.nan)
    resid = np.full(batch, np.nan)
    if result is not None:
        if not isinstance(result, AllocationResult):
            raise TypeError(f"result must be an AllocationResult (from allocate); got "
                            f"{type(result).__name__}")
        if np.shape(result.kkt_residual) != batch:
            raise ValueError(f"result must have the batch shape of pi {batch}; got "
                             f"{np.shape(result.kkt_residual)}")
        resid = np.asarray(result.kkt_residual, dtype=np.float64).copy()
        unspent = np.asarray(result.unspent_budget, dtype=np.float64).copy()
    if budget is not None:
        bud = broadcast_budget(budget, batch)
        if np.any(bud <= 0):
            raise ValueError(f"budget must be positive; got min {float(bud.min())!r}")
        unspent = bud - cost
    per_problem = {
        "expected_cost": cost,
        "unspent_budget": unspent,
        "residual": resid,
        "expected_edges": edges.sum(axis=-1),
        "expected_completed": p.sum(axis=-1),
        "max_weight": inv.max(axis=-1),
        "expected_ess": np.where(np.isfinite(sum_inv), M * M / sum_inv, 0.0),
        "variance_proxy": vp,
    }
    if batch == ():  # one problem: plain floats, not 0-d arrays (they log and print as such)
        return AllocationDiagnostics(pi=p, **{k: float(v) for k, v in per_problem.items()})
    return AllocationDiagnostics(pi=p, **per_problem)
