r"""DUET: dual-controlled token allocation (Hu et al., 2026, arXiv 2605.08441).

From the paper (as its abstract and a summary of it state it): two levers under one shared
token budget, a lightweight pre-rollout surrogate of prompt informativeness that sets how
many rollouts each prompt receives, and a marker-gated abort rule with importance
reweighting that sets when to stop them (answer markers such as ``\boxed{}`` or a closing
code fence; default keep probability 0.05). The paper's method section was not available to
us in full. Ours: the surrogate ``pbar (1 - pbar)``, rollouts proportional to it with
largest-remainder rounding and the ``min_group`` floor, and the abort written as an exact
second-phase design. The registered allocator ``"duet"`` is lever 1 only; lever 2 is
:func:`abort_design` / :func:`abort_sample`, applied by the caller to a realised plan (the
step, the trainer and the audit do not apply it).

The two levers as implemented here:

1. **How many rollouts per prompt.** A pre-rollout surrogate of prompt informativeness,
   ``u_b = pbar_b (1 - pbar_b)`` with ``pbar_b`` the Beta(1,1) posterior mean of the history
   (or the mean predicted ``p_hat`` of the group for a prompt without history), sets the number of
   continuations: ``k_b`` proportional to ``u_b`` (largest-remainder rounding of
   ``N u_b / sum u``, capped at ``U_b`` and floored so that each group, finished candidates
   included, has ``min_group`` members where it can, the excess redistributed), then which
   ``k_b`` of the ``U_b`` unfinished candidates by SRSWOR (each with probability ``1 / U_b``
   at ``k_b = 1 < U_b``: :func:`pairht.comparators._inputs.prompt_joint`).
2. **When to stop them.** A marker-gated abort: past an abort horizon, a rollout whose answer
   marker (``\boxed{}``, a closing code fence, ...) has appeared is kept; one without a
   marker is aborted, except with probability ``keep_prob`` (paper default 0.05) it runs to
   the end and is up-weighted by ``1 / keep_prob``.

As a design: phase 1 as above (``pi1 = k/U``, ``rho1`` of
:func:`~pairht.comparators._inputs.prompt_joint`), phase 2 independent Bernoulli with
``kappa_i = 1`` (marker or finished) or ``keep_prob`` (no marker), given phase 1. The marker
of a candidate is a property of its trajectory (fixed in the finite-population view), so

.. math:: \pi_i = \pi^{(1)}_i \kappa_i,\qquad \rho_{ij} = \rho^{(1)}_{ij} \kappa_i \kappa_j
          \ (i \ne j),

exactly. The point HT total ``sum_i J_i y_i / pi_i`` (DUET's reweighting) and the pair-HT
estimator with this ``rho`` are unbiased for the complete-group targets wherever every
``pi_i > 0`` and ``rho_ij > 0`` (``keep_prob > 0`` and ``k_b >= 1`` when ``U_b >= 1``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import RNGLike, as_generator, check_finite


def informativeness(successes: ArrayLike | None, trials: ArrayLike | None,
                    p_hat: np.ndarray) -> np.ndarray:
    """DUET surrogate ``u_b = pbar (1 - pbar)``: the history's posterior mean
    ``(s_b + 1) / (t_b + 2)`` for a prompt with ``t_b > 0`` trials, else (no history, or a
    prompt never tried) the group's mean ``p_hat``: the prefix heads know more about an unseen
    prompt than the flat prior's 1/2."""
    pbar = p_hat.mean(axis=1)
    if successes is not None and trials is not None:
        t = np.asarray(trials, dtype=float)
        post = (np.asarray(successes, dtype=float) + 1.0) / (t + 2.0)
        pbar = np.where(t > 0, post, pbar)
    return pbar * (1.0 - pbar)


def proportional_counts(u: ArrayLike, n_unfinished: ArrayLike, total: int, *,
                        lower: ArrayLike | None = None) -> np.ndarray:
    r"""Integer counts ``k_b`` proportional to ``u_b``, within ``[lower_b, U_b]``.

    ``lower`` defaults to ``min(U_b, 2)``; the allocator passes
    ``min(U_b, max(0, min_group - F_b))`` (a group of at least ``min_group`` with its
    ``F_b`` finished candidates).

    Real shares ``x_b = clip(lambda u_b, lower_b, U_b)`` with ``lambda`` solving
    ``sum x_b = N`` exactly (the sum is piecewise linear in ``lambda``: found between its
    breakpoints), then largest-remainder rounding (ties to the lower index), so
    ``sum k = min(total, sum U)`` exactly. Prompts with a zero surrogate stay at their floor
    unless the others are all at ``U_b``; then they share the rest equally (as does a zero
    surrogate everywhere).

    Examples
    --------
    >>> proportional_counts([0.25, 0.09, 0.0], [8, 8, 8], 12).tolist()
    [7, 3, 2]
    """
    u = check_finite("u", u)
    if np.any(u < 0):
        raise ValueError(f"u must be >= 0 (an informativeness score); got min {u.min()!r}")
    U = np.asarray(n_unfinished, dtype=np.int64)
    lo = np.minimum(U, 2) if lower is None else np.asarray(lower, dtype=np.int64)
    if np.any(lo < 0) or np.any(lo > U):
        raise ValueError(f"lower must satisfy 0 <= lower_b <= U_b; got lower = {lo.tolist()}, "
                         f"U = {U.tolist()}")
    if int(lo.sum()) > total:
        raise ValueError(f"budget infeasible: the per-prompt minimums need {int(lo.sum())} "
                         f"rollouts but the budget is {total}; raise the budget or lower the "
                         f"per-prompt minimums (min_group or min_rollouts)")
    N = min(int(total), int(U.sum()))
    w = u if u.sum() > 0 else np.ones_like(u)
    x = _clipped_shares(w, lo.astype(float), U.astype(float), float(N))
    zero = w <= 0
    if zero.any() and x.sum() < N:   # informative prompts saturated: share the rest equally
        x[zero] = _clipped_shares(np.ones(int(zero.sum())), lo[zero].astype(float),
                                  U[zero].astype(float), N - float(x[~zero].sum()))
    k = np.floor(x + 1e-12).astype(np.int64)
    left = N - int(k.sum())
    room = k < U
    frac = np.where(room, x - k, -np.inf)
    order = np.lexsort((np.arange(u.size), -frac))
    for b in order[:max(left, 0)]:
        k[b] += 1
    return k


def _clipped_shares(w: np.ndarray, lo: np.ndarray, hi: np.ndarray, N: float) -> np.ndarray:
    """``clip(lambda w, lo, hi)`` with ``lambda`` such that the sum is ``N`` (exact)."""
    pos = w > 0
    if lo.sum() >= N or not pos.any():
        return lo.copy()
    top = np.where(pos, hi, lo).sum()
    if top <= N:
        return np.where(pos, hi, lo)
    bps = np.unique(np.concatenate([lo[pos] / w[pos], hi[pos] / w[pos]]))
    sums = np.array([np.clip(lam * w, lo, hi).sum() for lam in bps])
    j = int(np.searchsorted(sums, N))           # sums[j-1] < N <= sums[j]
    l0, l1 = (0.0, bps[0]) if j == 0 else (bps[j - 1], bps[j])
    s0 = np.clip(l0 * w, lo, hi).sum()
    lam = l0 + (N - s0) * (l1 - l0) / (sums[j] - s0)
    return np.clip(lam * w, lo, hi)


def abort_design(pi1: np.ndarray, joint1: np.ndarray, marker: ArrayLike,
                 finished: np.ndarray, keep_prob: float = 0.05
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Compose phase 1 with the marker-gated abort: exact ``(pi, rho, kappa)``.

    ``kappa_i = 1`` if candidate ``i`` is finished or shows a marker, else ``keep_prob``.
    """
    if not (0.0 < float(keep_prob) <= 1.0):
        raise ValueError(f"keep_prob must lie in (0, 1] (0 would abort with no unbiased "
                         f"reweighting possible); got {keep_prob!r}")
    m = np.asarray(marker, dtype=bool)
    kappa = np.where(finished | m, 1.0, float(keep_prob))
    pi = pi1 * kappa
    joint = joint1 * kappa[..., :, None] * kappa[..., None, :]
    G = pi.shape[-1]
    joint[..., np.arange(G), np.arange(G)] = pi
    return pi, joint, kappa


def abort_sample(selected: np.ndarray, kappa: np.ndarray, rng: RNGLike = None) -> np.ndarray:
    """Phase 2 draw: a selected candidate survives the abort w.p. ``kappa_i``, independently."""
    gen = as_generator(rng)
    return selected & (gen.random(selected.shape) < kappa)
