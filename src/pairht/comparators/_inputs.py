r"""What the comparators read from a step's inputs, and the group-size design they share.

Comparators read :class:`~pairht.allocation.inputs.StepInputs` (``pairht.step.StepInputs``,
validated on construction): ``p_hat``, ``c_hat``, ``finished``, ``budget`` and ``history``.
A prompt-level decision "continue ``k_b`` of the ``U_b`` unfinished candidates" is
expressed over the ``G`` candidates as simple random sampling without replacement (SRSWOR):

.. math:: \pi_i = k_b / U_b,\qquad
          \rho_{ij} = \frac{k_b (k_b - 1)}{U_b (U_b - 1)}\ (i \ne j \text{ unfinished}),

finished candidates in with probability 1 (their joint with ``j`` is ``pi_j``). ``k_b = U_b``
gives ``pi = 1`` and ``k_b = 0`` gives ``pi = 0`` (deterministic cases).

Below two continuations the design is Bernoulli instead (:func:`prompt_joint`,
:func:`prompt_sample`): ``k_b = 1`` of ``U_b >= 2`` is each unfinished candidate continued
independently with ``pi_i = 1 / U_b`` (one continuation in expectation, ``rho_ij = 1/U_b^2``),
the rule ``pairht.step`` applies to every fixed-size design below an expected size of two.
SRSWOR of one would never observe a pair of unfinished candidates (``rho_ij = 0``) and the
pair-HT estimator would be biased. ``k_b = 0`` with ``U_b >= 1`` has no unbiased design: the
pairs of an unfinished candidate are never observed.
"""

from __future__ import annotations

import numpy as np

from pairht._validation import RNGLike, as_generator, check_finite
from pairht.allocation.inputs import StepInputs
from pairht.designs.base import srswor_inclusion, srswor_sample


def read_history(inputs: StepInputs, B: int, *, required: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """Return ``(successes, trials, features)`` from ``inputs.history`` (validated).

    ``history`` is a mapping with ``"successes"`` and ``"trials"`` (``(B,)``, ``0 <= s <= t``)
    and optionally ``"features"`` (``(B, d)``, prompt features for the GP of VIP).
    """
    hist = inputs.history
    if hist is None or "successes" not in hist or "trials" not in hist:
        if not required:
            return None
        raise ValueError(
            "inputs.history must hold per-prompt 'successes' and 'trials' arrays of shape (B,) "
            "for a prompt-level comparator (they are its only source of difficulty); got "
            f"{None if hist is None else sorted(hist)}")
    s = check_finite("history['successes']", hist["successes"])
    t = check_finite("history['trials']", hist["trials"])
    for name, arr in (("history['successes']", s), ("history['trials']", t)):
        if arr.shape != (B,):
            raise ValueError(f"{name} must have shape ({B},); got {arr.shape}")
    if np.any(s < 0) or np.any(s > t):
        b = int(np.argmax((s < 0) | (s > t)))
        raise ValueError(f"history must satisfy 0 <= successes <= trials; prompt {b} has "
                         f"successes = {s[b]!r}, trials = {t[b]!r}")
    feats = hist.get("features")
    if feats is not None:
        feats = check_finite("history['features']", feats)
        if feats.ndim != 2 or feats.shape[0] != B:
            raise ValueError(f"history['features'] must have shape ({B}, d); got {feats.shape}")
    return s, t, feats


def rollout_budget(inputs: StepInputs, rollout_budget: int | None) -> int:
    r"""Total number of continuations the batch may buy.

    ``rollout_budget`` if given, else ``floor(sum_b budget_b / cbar)`` with ``cbar`` the mean
    predicted suffix cost over all unfinished candidates of the batch: the prompt-level
    comparators count rollouts (as their papers do), and this converts the step's token budget
    at the batch's average rollout cost.
    """
    if rollout_budget is not None:
        if isinstance(rollout_budget, bool) or not isinstance(rollout_budget, (int, np.integer)):
            raise TypeError(f"rollout_budget must be an int; got {rollout_budget!r}")
        if rollout_budget < 0:
            raise ValueError(f"rollout_budget must be >= 0; got {rollout_budget}")
        return int(rollout_budget)
    unf = inputs.unfinished
    if not unf.any():
        return 0
    cbar = float(inputs.c_hat[unf].mean())
    return int(np.floor(inputs.budget.sum() / cbar + 1e-9))


def srswor_pi(k: np.ndarray, finished: np.ndarray) -> np.ndarray:
    """``(B, G)`` inclusion probabilities of continuing ``k_b`` of the unfinished by SRSWOR."""
    frac = srswor_inclusion(k, (~finished).sum(axis=1), 1)
    return np.where(finished, 1.0, frac[:, None])


def srswor_joint(k: np.ndarray, finished: np.ndarray) -> np.ndarray:
    r"""``(B, G, G)`` exact ``rho_ij`` of SRSWOR of ``k_b`` among the unfinished, finished in."""
    pi = srswor_pi(k, finished)
    pair = srswor_inclusion(k, (~finished).sum(axis=1), 2)
    unf = ~finished
    both = unf[:, :, None] & unf[:, None, :]
    joint = np.where(both, pair[:, None, None], pi[:, :, None] * pi[:, None, :])
    G = finished.shape[1]
    diag = np.arange(G)
    joint[:, diag, diag] = pi
    return joint


def prompt_joint(k: np.ndarray, finished: np.ndarray) -> np.ndarray:
    r"""``(B, G, G)`` exact ``rho_ij`` of the design that continues ``k_b`` unfinished
    candidates (module doc): SRSWOR (:func:`srswor_joint`) for ``k_b >= 2`` or ``k_b = U_b``;
    for ``k_b = 1 < U_b`` independent Bernoulli(``1 / U_b``), ``rho_ij = 1 / U_b^2`` between
    two unfinished candidates. The marginals are :func:`srswor_pi` in every case.

    Examples
    --------
    >>> import numpy as np
    >>> fin = np.array([[True, False, False, False]])
    >>> prompt_joint(np.array([1]), fin)[0, 1:, 1:].round(4).tolist()  # Bernoulli(1/3)
    [[0.3333, 0.1111, 0.1111], [0.1111, 0.3333, 0.1111], [0.1111, 0.1111, 0.3333]]
    >>> prompt_joint(np.array([2]), fin)[0, 1, 2].round(4)   # SRSWOR of 2 of 3: 2*1/(3*2)
    np.float64(0.3333)
    """
    joint = srswor_joint(k, finished)
    U = (~finished).sum(axis=1)
    low = (k == 1) & (U >= 2)
    if low.any():
        unf = ~finished[low]
        both = unf[:, :, None] & unf[:, None, :]
        q = 1.0 / U[low].astype(float)
        G = finished.shape[1]
        off = both & ~np.eye(G, dtype=bool)[None]
        joint[low] = np.where(off, (q * q)[:, None, None], joint[low])
    return joint


def prompt_sample(k: np.ndarray, finished: np.ndarray, rng: RNGLike = None) -> np.ndarray:
    """Draw the ``(B, G)`` mask of the design of :func:`prompt_joint`: all finished, plus
    ``k_b`` unfinished by SRSWOR, or each unfinished with probability ``1 / U_b`` where
    ``k_b = 1 < U_b``."""
    gen = as_generator(rng)
    U = (~finished).sum(axis=1)
    low = (np.asarray(k) == 1) & (U >= 2)
    mask = finished | srswor_sample(np.where(low, 0, k), ~finished, gen)
    for b in np.flatnonzero(low):
        unf = ~finished[b]
        mask[b, unf] = gen.random(int(U[b])) < 1.0 / U[b]
    return mask
