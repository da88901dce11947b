r"""PAIR's stratified rule: predicted successes and failures sampled apart, sizes by Neyman.

The pair gradient is a sum over pairs with different rewards. If the candidates could be
split into the ones that will succeed (``A``) and the ones that will fail (``B``), it would be
``|B| sum_{i in A} s_i - |A| sum_{j in B} s_j`` (up to ``1/M``): two stratum totals. Sampling
each stratum apart (stratified SRSWOR, :class:`~pairht.designs.Stratified`) removes the
variance a single uniform sample spends on *how many* of each it happened to draw; the
optimal sizes are Neyman's (Cochran 1977, 5.5), minimising ``sum_h W_h^2 S_h^2 / n_h`` for
``sum_h n_h c_h = budget``:

.. math:: n_h \propto \frac{W_h}{\sqrt{\bar c_h}}, \qquad
          W_h^2 = N_h^2 \,\overline{e^2}_h, \quad
          e_i = \sum_{j \ne i} \bigl[p_i (1 - p_j) + p_j (1 - p_i)\bigr],

``e_i`` the expected number of candidates that disagree with ``i`` (finished ones included;
with hindsight predictions ``|B|`` for ``i`` in ``A``, which is the weight above), ``\bar
c_h`` the stratum's mean predicted suffix cost. The strata are the unfinished candidates with
``p_hat >= 0.5`` and with ``p_hat < 0.5``; finished candidates are kept (``pi = 1``, free).
With uninformative predictions every unfinished candidate is in one stratum, and the rule is
the fixed-size uniform design (SRSWOR of the unfinished) exactly.

Floors keep the pair-HT estimator's weights bounded as PAIR's floor does: every ``pi_h >=
pi_min``, and every within-stratum joint ``E[n_h (n_h - 1)] / (N_h (N_h - 1)) >= pi_min^2``
(so a stratum of two or more units observes one of its own pairs with positive probability:
every pair is positive and the estimator exactly unbiased for any rewards). Sizes above a
stratum's floor and below ``N_h`` are water-filled on ``lambda W_h / sqrt(c_h)``.
"""

from __future__ import annotations

import numpy as np

from pairht.allocation.baselines import fill_to_budget
from pairht.allocation.proxies import disagreement

#: ``p_hat`` at or above this puts an unfinished candidate in the predicted-success stratum.
THRESHOLD = 0.5


def joint_floor_size(n_units: int, pi_min: float) -> float:
    r"""Smallest expected size ``S`` of SRSWOR over ``n_units`` (sizes ``floor(S)`` and
    ``floor(S) + 1`` mixed) whose joint inclusion ``E[n (n-1)] / (N (N-1))`` is at least
    ``pi_min^2``, and whose ``pi = S / N`` is at least ``pi_min``.

    ``E[n(n-1)] = m (m - 1) + 2 f m`` at ``S = m + f``: linear in ``f`` on each unit step.

    Examples
    --------
    >>> round(joint_floor_size(16, 0.08), 6)   # 0.0064 * 240 = 1.536 = 2 f at m = 1
    1.768
    >>> joint_floor_size(1, 0.08)
    0.08
    """
    N = int(n_units)
    lo = pi_min * N
    if N < 2:
        return lo
    t = pi_min**2 * N * (N - 1)
    m = 1
    while (m + 1) * m < t:
        m += 1
    s = m + (t - m * (m - 1)) / (2.0 * m)
    return float(min(N, max(lo, s)))


def stratum_pi(p: np.ndarray, c: np.ndarray, finished: np.ndarray, budget: float,
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

    # Neyman's sizes n_h = clip(lambda weight_h, floor_h, N_h) at sum n_h cbar_h = budget: in
    # pi_h = n_h / N_h the water-filling clip(t weight_h / N_h, floor_h / N_h, 1) at costs
    # N_h cbar_h, solved exactly
    level = fill_to_budget((weight / N)[None, :], (N * cbar)[None, :], np.array([budget]),
                           (floor / N)[None, :])[0]
    for m, pi_h in zip(strata, level):
        pi[m] = min(1.0, float(pi_h))
    return pi, "stratified"
