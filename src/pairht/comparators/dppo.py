r"""DPPO: unbiased dynamic pruning of prompts and completions (Zhu et al., 2026).

arXiv 2603.04135. From the paper (as its abstract states it): prompts and completions are
pruned dynamically, with importance-sampling rescaling factors that keep the gradient an
unbiased estimate of the full-batch one, and Dense Prompt Packing raises the token density
of what is kept. This project's reading: the pruning uses the rewards' advantages, so DPPO
samples and scores every completion (no generation is saved) and prunes low-advantage
prompts and completions *before the backward pass*. The paper's method section was not
available to us in full; the eligibility rule (quantiles of ``|A|``) and the default rates
are ours.
Implemented here as a two-stage Poisson design with known inclusion probabilities,
conditional on the rewards:

* prompt ``b`` is kept with probability ``q_b``: ``1 - prompt_rate`` if it is *eligible*
  (its mean ``|A_bi|`` is at or below the ``prompt_quantile`` of the batch), else 1;
* completion ``i`` of a kept prompt is kept with probability ``o_bi``: ``1 - completion_rate``
  if eligible (``|A_bi|`` at or below the ``completion_quantile`` of its group), else 1;
* every decision independent. Hence ``pi_bi = q_b o_bi`` and, within a prompt,
  ``rho_ij = q_b o_bi o_bj`` (``i != j``).

Estimators (``K`` the kept mask):

* :func:`dppo_gradient` ``g = sum_{b,i} K_bi A_bi s_bi / pi_bi`` is unbiased for the
  full-batch gradient ``sum_{b,i} A_bi s_bi`` (advantages computed on the full group, as in
  the paper, before pruning);
* the pair-HT estimator with ``rho`` from :func:`dppo_design` is unbiased for the complete
  pair target of every group.

The paper's dense prompt packing changes only how kept sequences are batched on the device,
not the estimator, and is not part of this module.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import RNGLike, as_generator, check_finite


def _rate(name: str, x: float) -> float:
    if not (isinstance(x, (int, float, np.floating)) and 0.0 <= float(x) < 1.0):
        raise ValueError(f"{name} must be a pruning rate in [0, 1) (a rate of 1 would leave "
                         f"a zero keep probability, and no unbiased rescaling); got {x!r}")
    return float(x)


def dppo_keep_probabilities(
    advantages: ArrayLike,
    *,
    prompt_rate: float = 0.5,
    completion_rate: float = 0.5,
    prompt_quantile: float = 0.5,
    completion_quantile: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Keep probabilities ``(q, o)`` of DPPO's prompt and completion pruning.

    Parameters
    ----------
    advantages : (B, G) array_like
        Full-group advantages ``A_bi`` (known after rewards).
    prompt_rate, completion_rate : float in [0, 1)
        Pruning rates ``r_q``, ``r_o`` applied to eligible prompts / completions.
    prompt_quantile, completion_quantile : float in [0, 1]
        Eligibility: a prompt whose mean ``|A|`` is ``<=`` this quantile of the batch, a
        completion whose ``|A|`` is ``<=`` this quantile of its group.

    Returns
    -------
    q : (B,) ndarray
        Prompt keep probabilities.
    o : (B, G) ndarray
        Completion keep probabilities (given the prompt is kept).

    Examples
    --------
    >>> q, o = dppo_keep_probabilities([[1.0, -1.0], [0.0, 0.0]])
    >>> q.tolist(), o.tolist()
    ([1.0, 0.5], [[0.5, 0.5], [0.5, 0.5]])
    """
    A = check_finite("advantages", advantages)
    if A.ndim != 2:
        raise ValueError(f"advantages must have shape (B, G); got {A.shape}")
    rq, ro = _rate("prompt_rate", prompt_rate), _rate("completion_rate", completion_rate)
    for name, qv in (("prompt_quantile", prompt_quantile),
                     ("completion_quantile", completion_quantile)):
        if not 0.0 <= float(qv) <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1]; got {qv!r}")
    mag = np.abs(A)
    score = mag.mean(axis=1)
    q = np.where(score <= np.quantile(score, prompt_quantile), 1.0 - rq, 1.0)
    thr = np.quantile(mag, completion_quantile, axis=1, keepdims=True)
    o = np.where(mag <= thr, 1.0 - ro, 1.0)
    return q, o


def dppo_design(q: ArrayLike, o: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    r"""Exact ``pi_bi = q_b o_bi`` and ``rho_bij = q_b o_bi o_bj`` (diagonal ``pi``)."""
    qa = np.asarray(q, dtype=float)
    oa = np.asarray(o, dtype=float)
    pi = qa[:, None] * oa
    joint = qa[:, None, None] * oa[:, :, None] * oa[:, None, :]
    G = oa.shape[1]
    joint[:, np.arange(G), np.arange(G)] = pi
    return pi, joint


def dppo_sample(q: ArrayLike, o: ArrayLike, rng: RNGLike = None) -> np.ndarray:
    """Draw the ``(B, G)`` kept mask: prompt kept w.p. ``q_b``, then completion w.p. ``o_bi``."""
    gen = as_generator(rng)
    qa = np.asarray(q, dtype=float)
    oa = np.asarray(o, dtype=float)
    prompt = gen.random(qa.shape) < qa
    return prompt[:, None] & (gen.random(oa.shape) < oa)


def dppo_gradient(advantages: ArrayLike, scores: ArrayLike, kept: ArrayLike,
                  pi: ArrayLike) -> np.ndarray:
    r"""DPPO's rescaled gradient ``sum_{b,i} K_bi A_bi s_bi / pi_bi``, shape ``(d,)``.

    Unbiased for ``sum_{b,i} A_bi s_bi`` over the pruning randomness when every ``pi > 0``.
    """
    A = np.asarray(advantages, dtype=float)
    S = np.asarray(scores, dtype=float)
    K = np.asarray(kept, dtype=bool)
    P = np.asarray(pi, dtype=float)
    w = np.divide(A, P, out=np.zeros_like(A), where=K)
    return np.einsum("bg,bgd->d", w, S)
