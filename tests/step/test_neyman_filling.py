"""Each Neyman-type rule solves its budget equation exactly: the step's difference-estimator
allocation (``neyman_pi``) and the strata's sizes (``stratum_pi``), both filled by
``pairht.allocation.baselines.fill_to_budget``, against references that solve the rule's
stationarity condition with :func:`scipy.optimize.brentq` on the budget equation (no
water-filling, no bisection), and the filling spends the budget to rounding."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from pairht.allocation.proxies import disagreement
from pairht.step.neyman import neyman_pi
from pairht.step.strata import THRESHOLD, joint_floor_size, stratum_pi

# brentq pins the multiplier to 4 ulps relative (rtol = 4 eps, xtol ~ 0), so each pi is off
# by a few ulps; the filling is exact to rounding: the two agree far inside 1e-12.
TOL = 1e-12


def _root(spent, hi: float) -> float:
    """The scale in ``(0, hi)`` at which ``spent`` (nondecreasing, negative at 0, positive at
    ``hi``) crosses zero, to the last bits."""
    return brentq(spent, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)


def reference_neyman_pi(w, c, unfinished, total, pi_min):
    """Minimise ``sum (1/pi - 1) w`` at ``sum pi c = total``: the KKT point ``pi_i =
    clip(t sqrt(w_i / c_i), pi_min, 1)`` on candidates with ``w > 0``, the others at the
    floor, ``t`` the root of the budget equation; statuses as :func:`neyman_pi` documents."""
    unf = np.asarray(unfinished, dtype=bool)
    live, dead = unf & (w > 0), unf & ~(w > 0)
    full, live_full = float(c[unf].sum()), float(c[live].sum())
    pi = np.ones(w.shape)
    if total >= full:
        return pi, "full"
    if not live.any() or total <= pi_min * full:
        pi[unf] = max(pi_min, total / full)
        return pi, "floor"
    if live_full + pi_min * float(c[dead].sum()) <= total:  # contrasts at 1, rest shared
        pi[dead] = (total - live_full) / float(c[dead].sum())
        return pi, "contrast_full"
    root = np.sqrt(w[live] / c[live])

    def at(t: float) -> np.ndarray:
        out = pi.copy()
        out[unf] = pi_min
        out[live] = np.clip(t * root, pi_min, 1.0)
        return out

    return at(_root(lambda t: float(at(t)[unf] @ c[unf]) - total, 1.0 / root.min())), "neyman"


def reference_stratum_pi(p, c, finished, budget, pi_min, m=None):
    """Neyman's stratum sizes ``n_h = clip(lam W_h / sqrt(cbar_h), floor_h, N_h)`` at
    ``sum_h n_h cbar_h = budget``, ``W_h = N_h sqrt(mean_h e^2)`` with ``e_i = sum_{j != i}
    p_i (1 - p_j) + p_j (1 - p_i)`` written out (times ``m_i`` when given), ``lam`` the root
    of the budget equation; statuses as :func:`stratum_pi` documents."""
    unf = ~finished
    pi = np.ones(p.size)
    full = float(c[unf].sum())
    if not unf.any():
        return pi, "all_finished"
    if budget >= full:
        return pi, "full"
    pi[unf] = budget / full
    strata = [s for s in (unf & (p >= THRESHOLD), unf & (p < THRESHOLD)) if s.any()]
    if len(strata) == 1:
        return pi, "one_stratum"
    q = 1.0 - p
    e = p * (q.sum() - q) + q * (p.sum() - p)
    e = e if m is None else e * m
    size = np.array([s.sum() for s in strata], dtype=np.float64)
    cbar = np.array([c[s].mean() for s in strata])
    slope = size * np.sqrt([np.mean(e[s] ** 2) for s in strata]) / np.sqrt(cbar)
    floor = np.array([joint_floor_size(int(n), pi_min) for n in size])
    if floor @ cbar > budget:
        return pi, "floor"

    def sizes(lam: float) -> np.ndarray:
        return np.clip(lam * slope, floor, size)

    lam = _root(lambda v: float(sizes(v) @ cbar) - budget, float((size / slope).max()))
    for s, n_h, N_h in zip(strata, sizes(lam), size):
        pi[s] = n_h / N_h
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
def test_neyman_pi_solves_the_budget_equation(seed, ratio):
    p, c, fin = _cases(seed, 3 + seed % 14)
    w = disagreement(p).sum(axis=1) ** 2 * (np.random.default_rng(seed).random(p.size) < 0.8)
    total = ratio * float(c[~fin].sum())
    for pi_min in (0.0, 0.08):
        new, status = neyman_pi(w, c, ~fin, total, pi_min)
        ref, ref_status = reference_neyman_pi(w, c, ~fin, total, pi_min)
        assert status == ref_status
        np.testing.assert_allclose(new, ref, rtol=0, atol=TOL)
        if status in ("neyman", "contrast_full"):  # the budget is spent to rounding
            np.testing.assert_allclose(float((new * np.where(fin, 0.0, c)).sum()), total,
                                       rtol=1e-13)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.6, 0.9])
def test_stratum_pi_solves_the_budget_equation(seed, ratio):
    p, c, fin = _cases(1000 + seed, 4 + seed % 13)
    m = None if seed % 2 else np.random.default_rng(seed).uniform(0.5, 2.0, p.size)
    budget = ratio * float(c[~fin].sum())
    new, status = stratum_pi(p, c, fin, budget, 0.08, m)
    ref, ref_status = reference_stratum_pi(p, c, fin, budget, 0.08, m)
    assert status == ref_status
    np.testing.assert_allclose(new, ref, rtol=0, atol=TOL)
    if status == "stratified":  # the budget is spent to rounding
        np.testing.assert_allclose(float(new[~fin] @ c[~fin]), budget, rtol=1e-13)
