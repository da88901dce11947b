r"""Prefixes for a uniform subset only: the two-phase design of a narrower prefix width.

Phase one draws a uniform ``w``-subset ``S`` of each prompt's ``G`` candidates (simple random
sampling without replacement, independent across prompts) and generates the prefixes of
``S`` only; phase two runs a prefix rule among ``S`` (its design ``pi_i|S``,
``rho_ij|S``). The two-phase (``pi*``) inclusions

.. math:: \pi^*_i = \frac{w}{G}\,\pi_{i|S}, \qquad
          \rho^*_{ij} = \frac{w (w - 1)}{G (G - 1)}\,\rho_{ij|S} \quad (i, j \in S)

make the pair-HT estimator on ``G`` candidates the inner rule's estimate of ``g_S``, the pair
average over ``S``: ``1 / (C(G, 2) rho*_ij) = 1 / (C(w, 2) rho_ij|S)``. It is unbiased for
``g_S`` given ``S`` and ``E_S[g_S] = g`` (a uniform subset's pair average is a U-statistic of
the group's), so the whole is unbiased for ``g`` (Sarndal, Swensson and Wretman 1992, ch. 9:
the ``pi*`` estimator of two-phase sampling). ``pi*`` is not the unconditional inclusion
probability (``pi_i|S`` depends on who else is in ``S``); it is the product the estimator
needs.

**Cost.** With share ``s = w / G``, the expected tokens ``s (P + b_w C)`` of the narrower
width (``P`` every prefix, ``C`` every unfinished suffix of the ``G`` candidates) equal
full-width PAIR's ``P + b C`` at ``b_w = (P + b C - s P) / (s C)``: narrowing spends on
suffixes what it saves on prefixes. :func:`subset_budget_ratio` is that formula, shared by
the audit (:func:`pairht.audit.two_stage.width_budget`, pooled over a population's true
costs) and the trainer (pooled over a batch's subsets, ``P`` and ``C`` estimated from ``S``
by ``P_S / s`` and ``C_S / s``).

References
----------
Sarndal, C.-E., Swensson, B. and Wretman, J. (1992). *Model Assisted Survey Sampling*,
Springer, chapter 9 (two-phase sampling).
"""

from __future__ import annotations

import math

import numpy as np

from pairht.designs.base import srswor_inclusion, srswor_sample


def check_prefix_width(width: object, G: int) -> int:
    """``width`` as an int in ``[2, G]`` (a pair needs two prefixes), or a ``ValueError``
    naming it."""
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) \
            or not 2 <= width <= G:
        raise ValueError(f"width must be an int in [2, G = {G}]; got width = {width!r}")
    return int(width)


def draw_subsets(n_prompts: int, G: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A uniform ``width``-subset of each prompt's ``G`` candidates, shape ``(B, width)``,
    each row sorted (candidate order kept).

    Examples
    --------
    >>> import numpy as np
    >>> S = draw_subsets(3, 6, 4, np.random.default_rng(0))
    >>> S.shape, bool(np.all(np.diff(S, axis=1) > 0))
    ((3, 4), True)
    """
    w = check_prefix_width(width, G)
    if isinstance(n_prompts, bool) or not isinstance(n_prompts, (int, np.integer)) \
            or n_prompts < 0:
        raise ValueError(f"n_prompts must be an int >= 0; got n_prompts = {n_prompts!r}")
    mask = srswor_sample(np.full(int(n_prompts), w), np.ones((int(n_prompts), G), bool), rng)
    return np.nonzero(mask)[1].reshape(int(n_prompts), w)  # row-major: each row ascending


def subset_budget_ratio(prefix: float, suffix: float, budget_ratio: float,
                        share: float) -> float:
    r"""The suffix budget ratio ``b_w`` at which a width with share ``s = w / G`` spends
    full-width PAIR's tokens: ``s (P + b_w C) = P + b C``, so
    ``b_w = (P + b C - s P) / (s C)`` (module docstring). May exceed 1: the width then
    cannot spend the tokens (it is at or below small-group GRPO's ``G'``).

    Parameters
    ----------
    prefix : float
        ``P``, the prefix tokens of every candidate.
    suffix : float
        ``C``, the suffix tokens of every unfinished candidate (``> 0``).
    budget_ratio : float
        ``b``, full-width PAIR's suffix budget ratio.
    share : float
        ``s = w / G`` in ``(0, 1]``.

    Examples
    --------
    >>> subset_budget_ratio(100.0, 400.0, 0.5, 1.0)
    0.5
    >>> subset_budget_ratio(100.0, 400.0, 0.5, 0.75)  # (100 + 200 - 75) / 300
    0.75
    """
    if not (math.isfinite(share) and 0.0 < share <= 1.0):
        raise ValueError(f"share must lie in (0, 1]; got share = {share!r}")
    if not (math.isfinite(suffix) and suffix > 0.0):
        raise ValueError(f"suffix must be a finite number > 0 (the unfinished candidates' "
                         f"suffix tokens); got suffix = {suffix!r}")
    if not (math.isfinite(prefix) and prefix >= 0.0):
        raise ValueError(f"prefix must be a finite number >= 0; got prefix = {prefix!r}")
    return (prefix + budget_ratio * suffix - share * prefix) / (share * suffix)


def pair_share(width: int, G: int) -> float:
    """``P(i, j both in S) = w (w - 1) / (G (G - 1))`` of a uniform ``w``-subset of ``G``."""
    return float(srswor_inclusion(check_prefix_width(width, G), G, 2))


def two_phase_design(pi: np.ndarray, joint: np.ndarray, subsets: np.ndarray,
                     G: int) -> tuple[np.ndarray, np.ndarray]:
    r"""The two-phase ``(pi*, rho*)`` on all ``G`` candidates (module docstring) from the
    inner design on the subsets.

    Parameters
    ----------
    pi : (B, w) array
        ``pi_i|S`` of the subset's candidates, in the subset's order.
    joint : (B, w, w) array
        ``rho_ij|S`` with ``pi_i|S`` on the diagonal.
    subsets : (B, w) int array
        The candidates of each prompt's subset (:func:`draw_subsets`).
    G : int
        Candidates per prompt.

    Returns
    -------
    pi_star : (B, G) ndarray
        ``(w / G) pi_i|S`` on the subset, 0 elsewhere (never generated).
    rho_star : (B, G, G) ndarray
        ``w (w - 1) / (G (G - 1)) rho_ij|S`` on pairs of the subset, ``pi*_i`` on the
        diagonal, 0 elsewhere.

    Examples
    --------
    >>> import numpy as np
    >>> pi, rho = two_phase_design(np.ones((1, 2)), np.ones((1, 2, 2)), np.array([[0, 2]]), 4)
    >>> pi.tolist(), float(rho[0, 0, 2]), float(rho[0, 0, 0]), float(rho[0, 1, 1])
    ([[0.5, 0.0, 0.5, 0.0]], 0.16666666666666666, 0.5, 0.0)
    """
    S = np.asarray(subsets)
    B, w = S.shape
    p = np.asarray(pi, dtype=np.float64)
    rho = np.asarray(joint, dtype=np.float64)
    if p.shape != (B, w) or rho.shape != (B, w, w):
        raise ValueError(f"pi and joint must have shapes (B, w) = {(B, w)} and (B, w, w) of "
                         f"subsets; got {p.shape} and {rho.shape}")
    share, share2 = w / G, pair_share(w, G)
    scale = np.full((w, w), share2)
    np.fill_diagonal(scale, share)
    rows = np.arange(B)[:, None]
    pi_star = two_phase_pi(p, S, G)
    rho_star = np.zeros((B, G, G))
    rho_star[rows[:, :, None], S[:, :, None], S[:, None, :]] = scale * rho
    return pi_star, rho_star


def two_phase_pi(pi: np.ndarray, subsets: np.ndarray, G: int) -> np.ndarray:
    """``pi* = (w / G) pi_i|S`` on the subset and 0 elsewhere, ``(B, G)``, from ``pi_i|S``
    ``(B, w)`` (the first-order part of :func:`two_phase_design`)."""
    S = np.asarray(subsets)
    w = check_prefix_width(S.shape[1], G)
    return put(w / G * np.asarray(pi, dtype=np.float64), S, G)


def take(values: np.ndarray, subsets: np.ndarray) -> np.ndarray:
    """The subset's entries of a ``(B, G, ...)`` array, shape ``(B, w, ...)``."""
    return np.asarray(values)[np.arange(len(subsets))[:, None], subsets]


def put(values: np.ndarray, subsets: np.ndarray, G: int, fill: float = 0.0) -> np.ndarray:
    """Inverse of :func:`take`: a ``(B, G, ...)`` array with the ``(B, w, ...)`` values on
    the subset and ``fill`` elsewhere."""
    v = np.asarray(values)
    out = np.full((v.shape[0], G, *v.shape[2:]), fill, dtype=v.dtype)
    out[np.arange(v.shape[0])[:, None], subsets] = v
    return out
