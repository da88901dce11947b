r"""Allocations of the audit rows, under realised accounting, matched at realised cost.

:func:`allocator_pi` gives the inclusion probabilities of one allocation rule, named as in the
step's allocator registry (``pairht.step.ALLOCATORS``: ``"full"``, ``"uniform"``,
``"srswor"``, ``"pointwise"``, ``"pair"``), with the rule of realised accounting: finished
candidates get ``pi = 1`` and cost nothing, and the budget ``B_q = s * sum_{i unfinished}
c_hat_qi`` is spent on the unfinished ones only.

:func:`matched_pi` solves, for each rule, the budget scale ``s`` at which the expected
*realised* suffix tokens ``sum_q sum_i pi_qi(s) C_qi`` (finished: ``C = 0``) equal
``budget_ratio * sum_q sum_{i unfinished} C_qi``: **bisection on the budget** (one scalar
``s`` for all prompts, as a user sets one budget ratio; :func:`solve_scale`, Brent's method
on ``[pi_min, 1]``, to 1e-12 relative whenever the target is reachable). Uniform
rules hit it at ``s = budget_ratio`` exactly (their realised cost is ``s`` times the full
cost whatever the predictions).

The rules are the step's own allocators (:func:`pairht.step.get_allocator`, on
:func:`step_inputs` of the population): one implementation of every rule. ``pair`` is PAIR's
program over the unfinished candidates with the finished ones fixed at 1 (an edge to a
finished candidate adds ``a_if`` to ``b_i``; :mod:`pairht.step.pair_program`), at a ``size``:
``None`` (Bernoulli) or ``"auto"`` (the two sizes neighbouring uniform SRSWOR's, mixed).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import optimize

from pairht.audit.base import AuditConfig, RowUnavailable, finished_mask, suffix_costs
from pairht.audit.population import Population
from pairht.step import ALLOCATORS, StepInputs, get_allocator, program_allocators
from pairht.step.pair_program import PROXIES as STEP_PROXIES

#: Edge proxies a ``pair`` row can name (the step's, less a user-given energy matrix).
PROXIES = tuple(k for k in STEP_PROXIES if k != "energy")
#: Iterations of the budget-scale root finder.
_MAX_STEPS = 100


def solve_scale(cost: Any, target: float, lo: float, hi: float) -> float:
    r"""The budget scale ``s`` in ``[lo, hi]`` with ``cost(s) = target`` (``cost`` increasing).

    Brent's bracketing method (:func:`scipy.optimize.brentq`) to the last bits of ``s``: the
    expected realised cost is close to linear in the budget, so a few evaluations reach
    ``|cost(s) - target| <= 1e-12 target``; at most 100 iterations. A target outside
    ``[cost(lo), cost(hi)]`` returns the nearer end.

    Examples
    --------
    >>> round(solve_scale(lambda s: 3.0 * s, 1.2, 0.08, 1.0), 12)
    0.4
    """
    f_lo, f_hi = cost(lo) - target, cost(hi) - target
    if f_lo >= 0.0 or f_hi <= 0.0:
        return lo if abs(f_lo) <= abs(f_hi) else hi
    # xtol ~0 and scipy's smallest rtol (4 eps): stop only when the bracket is a few ulps wide,
    # so a cost with steps in s ends at its jump; disp=False: no error after _MAX_STEPS.
    s = optimize.brentq(lambda v: cost(v) - target, lo, hi, xtol=1e-300,
                        rtol=4 * np.finfo(float).eps, maxiter=_MAX_STEPS, disp=False)
    return float(s)


def step_inputs(pop: Population, scale: float) -> StepInputs:
    """The step's inputs of ``pop`` at budget ``scale * sum_{i unfinished} c_hat_qi`` per prompt.

    Finished candidates cost nothing (their ``c_hat`` is ignored); ``prefix_tokens`` is the
    population's ``prefix_len`` (the length-energy proxy reads it).
    """
    fin = finished_mask(pop)
    return StepInputs.from_ratio(pop.p_hat, np.where(fin, 0.0, pop.c_hat), fin, scale,
                                 prefix_tokens=pop.prefix_len)


def allocation(name: str, pop: Population, scale: float, cfg: AuditConfig,
               proxy: str | None = None, size: str | None = None
               ) -> tuple[np.ndarray, dict[str, Any], list[str]]:
    """The step allocator ``name`` on ``pop`` at budget ``scale``: ``(pi, info, notes)``.

    ``proxy`` (``None``: the config's) and ``size`` (``None``: Bernoulli; ``"auto"``: two
    neighbouring sizes, mixed) apply to ``pair`` only. Finished candidates get exactly 1 and
    cost nothing; the budget of prompt ``q`` is ``scale`` times the predicted suffix tokens of
    its unfinished candidates, spent on them only.
    """
    allocator = get_allocator(name)  # the registry names the rules (ValueError otherwise)
    inputs = step_inputs(pop, scale)
    opts: dict[str, Any] = {}
    if name in program_allocators():
        kind = cfg.proxy if proxy is None else proxy
        if kind not in PROXIES:
            raise ValueError(f"proxy must be one of {PROXIES}; got {kind!r}")
        opts = {"proxy": kind, "size": size}
        if kind == "score_norm":
            if pop.m_hat is None:
                raise RowUnavailable("the score_norm proxy needs m_hat in the population")
            opts["score_norm"] = pop.m_hat
    else:
        if size is not None:
            raise ValueError(f"size applies to allocators {program_allocators()} only; got "
                             f"size={size!r} for {name!r}")
        caps = ALLOCATORS.capabilities(name)
        if caps.takes_score_norm and pop.m_hat is not None:
            opts = {"score_norm": pop.m_hat}
        if caps.takes_known_rewards:
            opts["known"] = pop.rewards  # read only where finished: known before the draw
    pi, info = allocator.pi(inputs, pi_min=cfg.pi_min, **opts)
    notes = []
    bad = ~np.asarray(info.get("converged", True), dtype=bool)
    if bad.any():
        notes.append(f"allocation did not converge on {int(bad.sum())} prompts")
    fb = np.asarray(info.get("fallback_used", False), dtype=bool)
    if fb.any():
        notes.append(f"allocation fell back to uniform on {int(fb.sum())} prompts")
    return np.asarray(pi), info, notes


def allocator_pi(name: str, pop: Population, scale: float, cfg: AuditConfig,
                 proxy: str | None = None, size: str | None = None
                 ) -> tuple[np.ndarray, list[str]]:
    """Inclusion probabilities ``(P, G)`` of rule ``name`` at budget ``scale * sum c_hat_u``
    (:func:`allocation`). Returns ``(pi, notes)``."""
    pi, _, notes = allocation(name, pop, scale, cfg, proxy, size)
    return pi, notes


def matched_allocation(name: str, pop: Population, cfg: AuditConfig, cache: dict[str, Any],
                       proxy: str | None = None, size: str | None = None
                       ) -> tuple[np.ndarray, dict[str, Any], float, list[str]]:
    """:func:`allocation` at the budget scale whose expected realised cost hits the target.

    Returns ``(pi, info, scale, notes)``; cached per audit under ``(name, proxy, size)``. A
    target the rule cannot reach inside ``[pi_min, 1]`` leaves the nearest end and says so in
    a note.
    """
    key = f"alloc:{name}:{proxy}:{size}"
    if key in cache:
        return cache[key]
    C = suffix_costs(pop)
    target = cfg.budget_ratio * C.sum()

    def cost(s: float) -> float:
        return float((allocation(name, pop, s, cfg, proxy, size)[0] * C).sum())

    if name == "full":
        s = 1.0
    elif name in ("uniform", "srswor"):
        s = cfg.budget_ratio
    else:
        s = solve_scale(cost, target, cfg.pi_min, 1.0)
    pi, info, notes = allocation(name, pop, s, cfg, proxy, size)
    got = float((pi * C).sum())
    if name != "full" and abs(got - target) > 1e-9 * max(target, 1e-300):
        notes.append(f"realised cost {got / C.sum():.6f} of the full cost could not be matched "
                     f"to the target {cfg.budget_ratio} (budget scale {s:.4f})")
    cache[key] = (pi, info, s, notes)
    return cache[key]


def matched_pi(name: str, pop: Population, cfg: AuditConfig, cache: dict[str, Any],
               proxy: str | None = None, size: str | None = None
               ) -> tuple[np.ndarray, float, list[str]]:
    """:func:`matched_allocation` without the allocator's info: ``(pi, scale, notes)``."""
    pi, _, s, notes = matched_allocation(name, pop, cfg, cache, proxy, size)
    return pi, s, notes
