"""Each Neyman-type rule is the one exact water-filling (``pairht.allocation.baselines.
fill_to_budget``): the step's difference-estimator allocation (``neyman_pi``) and the strata's
sizes (``stratum_pi``) give the numbers of the bisections they replace (kept here as the
independent references, in log-lambda / lambda to 200 halvings, then the last piece spent
linearly), and the filling spends the budget to rounding."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.allocation.proxies import disagreement
from pairht.step.neyman import neyman_pi
from pairht.step.strata import THRESHOLD, joint_floor_size, stratum_pi

# Both references stop where lambda is pinned to ~1e-15 relative, and the clipped sums that
# follow are of a few terms: the two agree to a few ulps of pi in [0.08, 1].
TOL = 1e-12


def old_neyman_pi(w: np.ndarray, c: np.ndarray, unfinished: np.ndarray, total: float,
              pi_min: float, *, iters: int = 200) -> tuple[np.ndarray, str]:
    r"""``pi`` minimising ``sum (1/pi - 1) w`` at ``sum pi c = total`` over ``unfinished``.

    Finished entries get 1. Returns ``(pi, status)``: ``"neyman"`` (the budget binds),
    ``"full"`` (it pays every unfinished candidate), ``"contrast_full"`` (it pays every
    candidate with ``w > 0``; the rest is spread uniformly over the others), ``"floor"`` (no
    candidate has ``w > 0``: uniform among unfinished at what the budget affords, at least
    ``pi_min``; or the budget pays only the floors).
    """
    unf = np.asarray(unfinished, dtype=bool)
    cu = np.where(unf, c, 0.0)
    full = float(cu.sum())
    pi = np.ones(w.shape)
    if full <= 0.0:
        return pi, "full"
    if total >= full * (1.0 - 1e-12):
        return pi, "full"
    live = unf & (w > 0)
    if not live.any():
        # no predicted contrast anywhere: uniform among unfinished spends the budget
        pi[unf] = max(pi_min, total / full)
        return pi, "floor"
    floor_cost = pi_min * full
    if total <= floor_cost * (1.0 + 1e-12):
        pi[unf] = pi_min
        return pi, "floor"

    def at(lam: float) -> np.ndarray:
        out = np.ones(w.shape)
        out[unf] = pi_min
        out[live] = np.clip(np.sqrt(w[live] / (lam * c[live])), pi_min, 1.0)
        return out

    def cost(lam: float) -> float:
        return float((at(lam) * cu).sum())

    dead = unf & ~live
    live_cost = float(cu[live].sum())
    if live_cost + pi_min * float(cu[dead].sum()) <= total:
        # every predicted contrast paid in full: the rest spread over the others, uniformly
        pi[dead] = min(1.0, (total - live_cost) / float(cu[dead].sum())) if dead.any() else 1.0
        return pi, "contrast_full"
    lo, hi = 1e-300, 1.0
    while cost(hi) > total:  # cost falls as lambda grows
        hi *= 1e4
    for _ in range(iters):  # bisection in log space: lambda spans many decades
        mid = float(np.sqrt(lo * hi))
        if cost(mid) > total:
            lo = mid
        else:
            hi = mid
        if hi <= lo * (1.0 + 1e-15):
            break
    pi = at(hi)
    # the last step leaves cost(hi) <= total; spend the rest on the interior units exactly
    inner = live & (pi > pi_min) & (pi < 1.0)
    gap = total - float((pi * cu).sum())
    if inner.any() and gap > 0.0:
        scale = 1.0 + gap / float((pi[inner] * c[inner]).sum())
        pi[inner] = np.minimum(pi[inner] * scale, 1.0)
    return pi, "neyman"


def old_stratum_pi(p: np.ndarray, c: np.ndarray, finished: np.ndarray, budget: float,
               pi_min: float, m: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """One group's ``pi`` (finished 1) and status: ``"stratified"``, ``"one_stratum"``
    (uniform: SRSWOR), ``"floor"`` (the strata's floors cost more than the budget: uniform),
    ``"all_finished"`` or ``"full"`` (the budget buys every unfinished candidate)."""
    unf = ~finished
    pi = np.ones(p.shape[0])
    k = int(unf.sum())
    if k == 0:
        return pi, "all_finished"
    full = float(c[unf].sum())
    if budget >= full * (1.0 - 1e-12):
        return pi, "full"
    uniform = budget / full
    pi[unf] = uniform
    hi = unf & (p >= THRESHOLD)
    strata = [m for m in (hi, unf & ~hi) if m.any()]
    if len(strata) < 2:
        return pi, "one_stratum"
    e = disagreement(p).sum(axis=1)
    if m is not None:  # predicted score norms: a candidate's pair terms scale with ||s_i||
        e = e * m
    N = np.array([m.sum() for m in strata], dtype=np.float64)
    cbar = np.array([c[m].mean() for m in strata])
    weight = N * np.sqrt(np.array([np.mean(e[m] ** 2) for m in strata])) / np.sqrt(cbar)
    # a stratum predicted to carry nothing (zero weight) still takes what the others leave
    weight = np.maximum(weight, 1e-12 * max(float(weight.max()), 1.0))
    floor = np.array([joint_floor_size(int(n), pi_min) for n in N])
    if float((floor * cbar).sum()) > budget * (1.0 + 1e-12):
        return pi, "floor"

    def sizes(lam: float) -> np.ndarray:
        return np.clip(lam * weight, floor, N)

    lo_l, hi_l = 0.0, 1.0
    while float((sizes(hi_l) * cbar).sum()) < budget:  # ends: budget < full, weights > 0
        hi_l *= 2.0
    for _ in range(200):  # bisection on lambda: spent cost is nondecreasing in it
        mid = 0.5 * (lo_l + hi_l)
        if float((sizes(mid) * cbar).sum()) < budget:
            lo_l = mid
        else:
            hi_l = mid
    n = sizes(hi_l)
    # spend the budget exactly: the last piece is linear in lambda between lo_l and hi_l
    n_lo = sizes(lo_l)
    gap = float(((n - n_lo) * cbar).sum())
    if gap > 0:
        t = (budget - float((n_lo * cbar).sum())) / gap
        n = n_lo + np.clip(t, 0.0, 1.0) * (n - n_lo)
    for m, n_h, N_h in zip(strata, n, N):
        pi[m] = min(1.0, n_h / N_h)
    return pi, "stratified"


def _cases(seed: int, G: int):
    rng = np.random.default_rng(seed)
    p = rng.random(G)
    p[rng.random(G) < 0.2] = rng.choice([0.0, 1.0])  # ties and certain predictions
    c = rng.uniform(10.0, 500.0, G)
    fin = rng.random(G) < 0.3
    return p, c, fin


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("ratio", [0.05, 0.2, 0.5, 0.8, 0.99])
def test_neyman_pi_is_the_water_filling_the_bisection_found(seed, ratio):
    p, c, fin = _cases(seed, 3 + seed % 14)
    w = disagreement(p).sum(axis=1) ** 2 * (np.random.default_rng(seed).random(p.size) < 0.8)
    total = ratio * float(c[~fin].sum())
    for pi_min in (0.0, 0.08):
        new, status = neyman_pi(w, c, ~fin, total, pi_min)
        old, old_status = old_neyman_pi(w, c, ~fin, total, pi_min)
        assert status == old_status
        np.testing.assert_allclose(new, old, rtol=0, atol=TOL)
        if status in ("neyman", "contrast_full"):  # the budget is spent to rounding
            np.testing.assert_allclose(float((new * np.where(fin, 0.0, c)).sum()), total,
                                       rtol=1e-13)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.6, 0.9])
def test_stratum_pi_is_the_water_filling_the_bisection_found(seed, ratio):
    p, c, fin = _cases(1000 + seed, 4 + seed % 13)
    m = None if seed % 2 else np.random.default_rng(seed).uniform(0.5, 2.0, p.size)
    budget = ratio * float(c[~fin].sum())
    new, status = stratum_pi(p, c, fin, budget, 0.08, m)
    old, old_status = old_stratum_pi(p, c, fin, budget, 0.08, m)
    assert status == old_status
    np.testing.assert_allclose(new, old, rtol=0, atol=TOL)
