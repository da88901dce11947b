r"""The appendix's reference solver: SLSQP in ``x = -log(pi)``, one problem at a time.

Kept to compare against :func:`~pairht.allocation.allocate` (which is faster and converges
on every feasible problem); not meant for training loops.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize

from pairht._validation import check_option_names, check_real
from pairht.allocation._checks import check_flag, check_max_iter
from pairht.allocation.kkt import _lstsq_multipliers, _residual, _value, estimate_multipliers
from pairht.allocation.proxies import ProxyKind, proxy_terms
from pairht.allocation.solver import (
    AllocationResult,
    _check_proxy_kind,
    allocate,
    check_warm_start,
    resolve_sizes,
    uniform_fallback,
    validate_problem,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ProblemOptions", "estimate_multipliers", "reference_slsqp"]


class ProblemOptions(TypedDict, total=False):
    """The options of the allocation problem, documented once at :func:`allocate`.

    The keyword options :func:`reference_slsqp` takes to pose the same problem as
    :func:`~pairht.allocation.allocate` (with ``allocate``'s defaults, except
    ``fallback``); type a wrapper's own ``**options`` with it to forward them too.
    """

    proxy: ProxyKind
    covariance_term: bool
    warm_start: ArrayLike | None
    size: int | str | ArrayLike | None
    fallback: bool
    score_norm: ArrayLike | None
    energy: ArrayLike | None


#: :func:`allocate`'s defaults of the problem options, read from its signature so that an
#: option left out poses the same problem to both solvers.
_ALLOCATE_DEFAULTS: dict[str, Any] = {
    name: param.default for name, param in inspect.signature(allocate).parameters.items()
    if name in ProblemOptions.__optional_keys__
}


def reference_slsqp(
    p_hat: ArrayLike,
    c_hat: ArrayLike,
    budget: ArrayLike,
    pi_min: float = 0.08,
    *,
    ftol: float = 1e-6,
    maxiter: int = 50,
    relative_ftol: bool = True,
    **options: Unpack[ProblemOptions],
) -> AllocationResult:
    r"""Appendix "Probability optimization": SLSQP on Eqs. (convex-objective)-(budget).

    For each problem (a Python loop; this is a reference, not the fast path): minimise
    ``Phi(x) = sum_{i<j} a_ij e^{x_i + x_j} + sum_i b_i e^{x_i}`` subject to
    ``sum_i c_i e^{-x_i} <= budget`` and ``0 <= x_i <= -log(pi_min)`` [and
    ``sum_i e^{-x_i} = n``] with ``scipy.optimize.minimize(method="SLSQP")`` in double
    precision, analytic gradients, warm-started from ``warm_start`` (default: the uniform
    allocation at the budget), stopping at ``ftol`` relative objective change (the objective
    is divided by its starting value, so SciPy's ``ftol`` acts relatively) or ``maxiter``
    iterations. ``relative_ftol=False`` passes the raw objective instead (SciPy's ``ftol``
    then acts on its absolute value, which at objective values of 10-1000 often does not
    trigger within 50 iterations: in ``benchmarks/bench_allocation.py`` it fails on about
    half the problems at G = 32 and on all at G = 64; kept to reproduce such runs).
    When SLSQP reports failure and ``fallback`` is set, the uniform allocation with the same
    expected cost replaces it (``fallback_used``), as the appendix prescribes.

    SLSQP satisfies the budget only to its own tolerance (overshoots of ~1e-6 relative are
    common), so its objective can sit slightly below the true optimum while infeasible.
    ``converged`` is SLSQP's own success flag; ``kkt_residual`` is measured on the returned
    point with least-squares multipliers (:func:`estimate_multipliers`) by the same
    :func:`~pairht.allocation.kkt_residual` as :func:`~pairht.allocation.allocate`.
    ``size="auto"`` takes the size :func:`~pairht.allocation.allocate` chooses.

    Parameters
    ----------
    p_hat, c_hat, budget, pi_min
        The problem, as in :func:`~pairht.allocation.allocate`.
    ftol : float
        SLSQP's stopping tolerance in [0, 1), on the objective change (relative unless
        ``relative_ftol=False``).
    maxiter : int
        SLSQP's iteration cap (>= 1).
    relative_ftol : bool
        Divide the objective by its value at the start, so that ``ftol`` acts relatively.
    **options
        ``proxy``, ``covariance_term``, ``warm_start``, ``size``, ``fallback``,
        ``score_norm``, ``energy`` (:class:`ProblemOptions`): as in
        :func:`~pairht.allocation.allocate`, with its defaults except ``fallback=True``
        (the appendix's rule).

    Returns
    -------
    AllocationResult
        As :func:`~pairht.allocation.allocate`'s; ``iterations`` are SLSQP's.

    Examples
    --------
    >>> res = reference_slsqp([0.2, 0.7, 0.5], [100.0, 300.0, 200.0], budget=300.0)
    >>> res.converged, abs(res.expected_cost / 300.0 - 1.0) < 1e-5
    (True, True)
    """
    check_option_names("reference_slsqp", options, ProblemOptions)
    opts = {**_ALLOCATE_DEFAULTS, "fallback": True, **options}
    proxy, size, score_norm, energy = (opts["proxy"], opts["size"], opts["score_norm"],
                                       opts["energy"])
    p, c, bud, lo = validate_problem(p_hat, c_hat, budget, pi_min)
    batch, G = p.shape[:-1], p.shape[-1]
    _check_proxy_kind(proxy)
    cov = check_flag("covariance_term", opts["covariance_term"])
    fallback = check_flag("fallback", opts["fallback"])
    relative_ftol = check_flag("relative_ftol", relative_ftol)
    ftol = check_real("ftol", ftol, low=0.0, high=1.0, high_open=True,
                      rule="SLSQP's stopping tolerance")
    maxiter = check_max_iter("maxiter", maxiter)
    if isinstance(size, str) and size == "auto":
        size = allocate(p, c, bud, lo, proxy=proxy, covariance_term=cov, size="auto",
                        score_norm=score_norm, energy=energy).size
    a, b = proxy_terms(p, proxy, cov, score_norm, energy)
    m = int(np.prod(batch, dtype=np.int64))
    C, A, Bv, BUD = c.reshape(m, G), a.reshape(m, G, G), b.reshape(m, G), bud.reshape(m)
    W = check_warm_start(opts["warm_start"], p.shape)
    if W is not None:
        W = np.clip(W.reshape(m, G), lo, 1.0)
    sizes = resolve_sizes(size, c, bud, lo)  # the same checks as allocate
    N = None if sizes is None else np.broadcast_to(sizes, batch).reshape(m)
    fallback_pi = uniform_fallback(C, BUD, lo, N)
    xmax = -np.log(lo)
    pi_out = np.empty((m, G))
    lam_out = np.zeros(m)
    nu_out = np.full(m, np.nan)
    iters = np.zeros(m, dtype=np.int64)
    status = np.empty(m, dtype=object)
    ok = np.zeros(m, dtype=bool)
    fb = np.zeros(m, dtype=bool)
    for k in range(m):
        ak, bk, ck, Bk = A[k], Bv[k], C[k], BUD[k]
        uni = fallback_pi[k]
        start = uni if W is None else W[k]
        x0 = -np.log(start)
        scale = 1.0 / max(float(_value(start, ak, bk)), 1e-300) if relative_ftol else 1.0

        def fun(x, ak=ak, bk=bk, scale=scale):
            e = np.exp(x)
            ae = ak @ e
            return scale * (0.5 * e @ ae + bk @ e), scale * e * (ae + bk)

        cons = [{"type": "ineq", "fun": lambda x, ck=ck, Bk=Bk: (Bk - ck @ np.exp(-x)) / Bk,
                 "jac": lambda x, ck=ck, Bk=Bk: ck * np.exp(-x) / Bk}]
        if N is not None:
            cons.append({"type": "eq", "fun": lambda x, n=N[k]: np.exp(-x).sum() - n,
                         "jac": lambda x: -np.exp(-x)})
        res = minimize(fun, x0, jac=True, method="SLSQP", bounds=[(0.0, xmax)] * G,
                       constraints=cons, options={"ftol": ftol, "maxiter": maxiter})
        pik = np.clip(np.exp(-res.x), lo, 1.0)
        iters[k] = res.nit
        ok[k] = bool(res.success)
        status[k] = "optimal" if res.success else f"slsqp: {res.message}"
        if not res.success and fallback:
            pik = uni
            fb[k] = True
            status[k] = "fallback_uniform"
        pi_out[k] = pik
        lam_out[k], nu = _lstsq_multipliers(pik, ak, bk, ck, float(Bk), lo,
                                            None if N is None else float(N[k]))
        if N is not None:
            nu_out[k] = nu
    res_kkt = _residual(pi_out, A, Bv, C, BUD, lo, lam_out,
                        None if N is None else nu_out,
                        None if N is None else N.astype(np.float64))
    cost = np.einsum("mg,mg->m", C, pi_out)
    fields = {
        "pi": pi_out, "objective": _value(pi_out, A, Bv), "kkt_residual": res_kkt,
        "iterations": iters, "status": status.astype(str), "converged": ok,
        "fallback_used": fb, "expected_cost": cost, "unspent_budget": BUD - cost,
        "budget_multiplier": lam_out, "size_multiplier": nu_out,
        "size": np.full(m, -1, dtype=np.int64) if N is None else N.copy(),
    }
    return AllocationResult.from_flat(fields, batch, G)
