r"""Allocations of the audit rows, under realised accounting, matched at realised cost.

:func:`allocator_pi` gives the inclusion probabilities of one allocation rule, named as in the
step's allocator registry (``pairht.step.ALLOCATORS``: ``"full"``, ``"uniform"``,
``"srswor"``, ``"pointwise"``, ``"pair"``), with the rule of realised accounting: finished
candidates get ``pi = 1`` and cost nothing, and the budget ``B_q = s * sum_{i unfinished}
c_hat_qi`` is spent on the unfinished ones only.

:func:`matched_pi` solves, for each rule, the budget scale ``s`` at which the expected
*realised* suffix tokens ``sum_q sum_i pi_qi(s) C_qi`` (finished: ``C = 0``) equal
``budget_ratio * sum_q sum_{i unfinished} C_qi``: **bisection on the budget** (one scalar
``s`` for all prompts, as a user sets one budget ratio; :func:`solve_scale`, bisection
accelerated by false-position steps on ``[pi_min, 1]``, to 1e-12 relative whenever the target
is reachable). Uniform
rules hit it at ``s = budget_ratio`` exactly (their realised cost is ``s`` times the full
cost whatever the predictions).

Until ``pairht.step`` lands the rules are computed here from :mod:`pairht.allocation`,
exactly: the program over the unfinished candidates with the finished ones fixed at 1
(:func:`_pair_program`; an edge to a finished candidate adds ``a_if`` to ``b_i``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pairht.allocation import edge_proxy, pointwise_allocation
from pairht.allocation.energy import NAME as LENGTH_ENERGY
from pairht.allocation.energy import length_energy, solve_program
from pairht.allocation.proxies import shared_vertex_term
from pairht.allocation.sizes import min_cost_point
from pairht.audit.base import AuditConfig, RowUnavailable, finished_mask, suffix_costs
from pairht.audit.population import Population

#: Allocation rules (names of the step's allocator registry).
ALLOCATORS = ("full", "uniform", "srswor", "pointwise", "pair")
#: Edge proxies a ``pair`` row can name.
PROXIES = ("disagreement", "score_norm", LENGTH_ENERGY)
_MAX_STEPS = 100
#: Relative accuracy of the matched realised cost.
_COST_RTOL = 1e-12


def solve_scale(cost: Any, target: float, lo: float, hi: float) -> float:
    r"""The budget scale ``s`` in ``[lo, hi]`` with ``cost(s) = target`` (``cost`` increasing).

    Bracketing: bisection accelerated by false-position steps (the Illinois rule halves the
    weight of an end point kept twice, so the bracket always shrinks on both sides). The
    expected realised cost is close to linear in the budget, so a few evaluations reach
    ``|cost(s) - target| <= 1e-12 target``; at most 100 steps. A target outside
    ``[cost(lo), cost(hi)]`` returns the nearer end.
    """
    f_lo, f_hi = cost(lo) - target, cost(hi) - target
    if f_lo >= 0.0 or f_hi <= 0.0:
        return lo if abs(f_lo) <= abs(f_hi) else hi
    side = 0
    best, best_gap = lo, abs(f_lo)
    for _ in range(_MAX_STEPS):
        mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        if not lo < mid < hi:
            mid = 0.5 * (lo + hi)
        f_mid = cost(mid) - target
        if abs(f_mid) < best_gap:
            best, best_gap = mid, abs(f_mid)
        if best_gap <= _COST_RTOL * abs(target) or hi - lo <= 1e-15:
            break
        if f_mid > 0.0:
            hi, f_hi = mid, f_mid
            if side == -1:
                f_lo *= 0.5
            side = -1
        else:
            lo, f_lo = mid, f_mid
            if side == 1:
                f_hi *= 0.5
            side = 1
    return best


def _proxy_terms(pop: Population, rows: np.ndarray, cfg: AuditConfig,
                 proxy: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Edge proxy ``a`` and shared-vertex term ``b`` over all ``G`` candidates of ``rows``."""
    kind = cfg.proxy if proxy is None else proxy
    p = pop.p_hat[rows]
    if kind == LENGTH_ENERGY:
        remaining = np.where(finished_mask(pop)[rows], 0.0, pop.c_hat[rows])
        return length_energy(p, np.maximum(pop.prefix_len[rows] + remaining, 1.0))
    if kind == "score_norm":
        if pop.m_hat is None:
            raise RowUnavailable("the score_norm proxy needs m_hat in the population")
        a = edge_proxy(p, kind="score_norm", score_norm=pop.m_hat[rows])
    elif kind == "disagreement":
        a = edge_proxy(p)
    else:
        raise ValueError(f"proxy must be one of {PROXIES}; got {kind!r}")
    return a, shared_vertex_term(a)


def _by_unfinished_count(pop: Population) -> dict[int, np.ndarray]:
    """Prompt indices grouped by their number of unfinished candidates ``G_u``."""
    gu = (~finished_mask(pop)).sum(axis=1)
    return {int(k): np.flatnonzero(gu == k) for k in np.unique(gu)}


def _reduced(x: np.ndarray, unf: np.ndarray, k: int) -> np.ndarray:
    """The unfinished entries of each row of ``x`` (each row has exactly ``k``), ``(m, k)``."""
    return x[unf].reshape(-1, k)


def _pair_program(pop: Population, rows: np.ndarray, k: int, budget: np.ndarray,
                  cfg: AuditConfig, proxy: str | None, size: np.ndarray | None
                  ) -> tuple[np.ndarray, list[str]]:
    r"""PAIR's program over the ``k`` unfinished candidates of ``rows``, finished fixed at 1.

    With ``pi_f = 1`` for the finished set ``F``, the objective ``sum_{i<j} a_ij/(pi_i pi_j)
    + sum_i b_i/pi_i`` is, up to a constant, the same program over the unfinished candidates
    with ``a`` restricted to them and ``b'_i = b_i + sum_{f in F} a_if`` (an edge to a
    finished candidate is observed whenever ``i`` is). Solved exactly by the allocation
    solver; returns the ``(m, k)`` probabilities.
    """
    a, b = _proxy_terms(pop, rows, cfg, proxy)
    unf = ~finished_mask(pop)[rows]
    cross = np.einsum("mij,mj->mi", a, (~unf).astype(np.float64))
    a_u = a[unf[:, :, None] & unf[:, None, :]].reshape(-1, k, k)
    b_u = _reduced(b + cross, unf, k)
    p_u = _reduced(pop.p_hat[rows], unf, k)
    c_u = _reduced(pop.c_hat[rows], unf, k)
    res = solve_program(p_u, c_u, budget, a_u, b_u, cfg.pi_min, size=size, fallback=True)
    notes = []
    if (~res.converged).any():
        notes.append(f"allocation did not converge on {int((~res.converged).sum())} prompts")
    if res.fallback_used.any():
        notes.append(f"allocation fell back to uniform on {int(res.fallback_used.sum())} "
                     f"prompts")
    return res.pi, notes


def allocator_pi(name: str, pop: Population, scale: float, cfg: AuditConfig,
                 proxy: str | None = None) -> tuple[np.ndarray, list[str]]:
    """Inclusion probabilities ``(P, G)`` of rule ``name`` at budget ``scale * sum c_hat_u``.

    Finished candidates get exactly 1 and cost nothing; the budget of prompt ``q`` is
    ``scale`` times the predicted suffix tokens of its unfinished candidates, spent on them
    only. A prompt with one unfinished candidate gives it ``min(1, scale)``. Returns
    ``(pi, notes)``.
    """
    if name not in ALLOCATORS:
        raise ValueError(f"allocator must be one of {ALLOCATORS}; got {name!r}")
    unf_all = ~finished_mask(pop)
    pi = np.ones(pop.p_hat.shape)
    notes: list[str] = []
    if name == "full":
        return pi, notes
    for k, rows in _by_unfinished_count(pop).items():
        if k == 0:
            continue
        unf = unf_all[rows]
        c_u = _reduced(pop.c_hat[rows], unf, k)
        budget = scale * c_u.sum(axis=1)
        if name in ("uniform", "srswor") or k == 1:
            sub = np.full(c_u.shape, min(1.0, scale))
        elif name == "pointwise":
            sub = pointwise_allocation(_reduced(pop.p_hat[rows], unf, k), c_u, budget,
                                       cfg.pi_min)
        else:
            sub, more = _pair_program(pop, rows, k, budget, cfg, proxy, None)
            notes += more
        block = np.ones((rows.size, pop.group_size))
        block[unf] = np.clip(sub, 0.0, 1.0).ravel()
        pi[rows] = block
    return pi, sorted(set(notes))


def sized_pair_pi(pop: Population, scale: float, cfg: AuditConfig, proxy: str | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    r"""PAIR's fixed-size program at a non-integer size: the two neighbouring sizes, mixed.

    Over the ``G_u`` unfinished candidates of a prompt the size ``S = scale * G_u`` (that of
    uniform SRSWOR at the same budget) is split as ``n = floor(S)``, ``f = S - n``; PAIR's
    program over the unfinished candidates (finished fixed at 1, see
    :func:`_pair_program`) is solved with ``sum pi = n`` at budget ``B n / S`` and with
    ``n + 1`` at ``B (n + 1) / S`` (the same budget per completion, so the mixture
    ``(1 - f) pi_lo + f pi_hi`` spends ``B`` in expectation; a size whose share cannot buy
    its cheapest ``n`` candidates gets that least cost instead). Sizes are at least
    ``max(2, ceil(G_u pi_min))`` (a smaller ``n`` is raised, the ``n + 1`` side then holds
    all the weight); prompts with fewer than three unfinished candidates take the uniform
    ``min(1, scale)``.

    Returns ``(pi_lo, pi_hi, f, notes)`` with ``f`` of shape ``(P,)``.
    """
    unf_all = ~finished_mask(pop)
    P, G = pop.p_hat.shape
    lo_pi, hi_pi = np.ones((P, G)), np.ones((P, G))
    f = np.zeros(P)
    notes: list[str] = []
    for k, rows in _by_unfinished_count(pop).items():
        if k == 0:
            continue
        unf = unf_all[rows]
        if k < 3:
            for out in (lo_pi, hi_pi):
                block = np.ones((rows.size, G))
                block[unf] = min(1.0, scale)
                out[rows] = block
            continue
        c_u = _reduced(pop.c_hat[rows], unf, k)
        S = scale * k
        least = max(2, int(np.ceil(k * cfg.pi_min - 1e-12)))
        n = max(int(np.floor(S + 1e-12)), least)
        n_hi = min(n + 1, k)
        frac = 0.0 if n_hi == n or S <= n else min(S - n, 1.0)
        sols = []
        for n_c, share in ((n, n / max(S, n)), (n_hi, n_hi / max(S, n))):
            # A size the share cannot afford (the cheapest n_c at 1, the rest at the floor)
            # gets that least cost: realised cost is matched by the bisection on ``scale``.
            least_cost = np.einsum("mi,mi->m", c_u, min_cost_point(
                c_u, cfg.pi_min, np.full(rows.size, float(n_c))))
            bud = np.maximum(scale * c_u.sum(axis=1) * share, least_cost * (1.0 + 1e-9))
            sub, more = _pair_program(pop, rows, k, bud, cfg, proxy,
                                      np.full(rows.size, n_c, dtype=np.int64))
            notes += more
            block = np.ones((rows.size, G))
            block[unf] = np.clip(sub, 0.0, 1.0).ravel()
            sols.append(block)
        lo_pi[rows], hi_pi[rows] = sols
        f[rows] = frac
    return lo_pi, hi_pi, f, sorted(set(notes))


def matched_sized_pi(pop: Population, cfg: AuditConfig, cache: dict[str, Any],
                     proxy: str | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, list[str]]:
    """:func:`sized_pair_pi` at the budget scale whose expected realised cost hits the target
    (:func:`solve_scale`, as :func:`matched_pi`). Returns ``(pi_lo, pi_hi, f, scale,
    notes)``."""
    key = f"alloc:pair_sized:{proxy}"
    if key in cache:
        return cache[key]
    C = suffix_costs(pop)
    target = cfg.budget_ratio * C.sum()

    def cost(s: float) -> float:
        lo, hi, f, _ = sized_pair_pi(pop, s, cfg, proxy)
        return float((((1 - f)[:, None] * lo + f[:, None] * hi) * C).sum())

    s = solve_scale(cost, target, cfg.pi_min, 1.0)
    p_lo, p_hi, f, notes = sized_pair_pi(pop, s, cfg, proxy)
    got = float((((1 - f)[:, None] * p_lo + f[:, None] * p_hi) * C).sum())
    if abs(got - target) > 1e-9 * max(target, 1e-300):
        notes.append(f"realised cost {got / C.sum():.6f} of the full cost could not be matched "
                     f"to the target {cfg.budget_ratio} (budget scale {s:.4f})")
    cache[key] = (p_lo, p_hi, f, s, notes)
    return cache[key]


def matched_pi(name: str, pop: Population, cfg: AuditConfig, cache: dict[str, Any],
               proxy: str | None = None) -> tuple[np.ndarray, float, list[str]]:
    """``allocator_pi`` at the budget scale whose expected realised cost hits the target.

    Returns ``(pi, scale, notes)``; cached per audit under ``(name, proxy)``. A target the
    rule cannot reach inside ``[pi_min, 1]`` leaves the nearest end and says so in a note.
    """
    key = f"alloc:{name}:{proxy}"
    if key in cache:
        return cache[key]
    C = suffix_costs(pop)
    target = cfg.budget_ratio * C.sum()

    def cost(s: float) -> float:
        return float((allocator_pi(name, pop, s, cfg, proxy)[0] * C).sum())

    if name == "full":
        s = 1.0
    elif name in ("uniform", "srswor"):
        s = cfg.budget_ratio
    else:
        s = solve_scale(cost, target, cfg.pi_min, 1.0)
    pi, notes = allocator_pi(name, pop, s, cfg, proxy)
    got = float((pi * C).sum())
    if name != "full" and abs(got - target) > 1e-9 * max(target, 1e-300):
        notes.append(f"realised cost {got / C.sum():.6f} of the full cost could not be matched "
                     f"to the target {cfg.budget_ratio} (budget scale {s:.4f})")
    cache[key] = (pi, s, notes)
    return cache[key]
