r"""Replace a population's prefix predictions: what the audit measures PAIR against.

* ``"stored"``: the population's own ``p_hat``, ``c_hat``, ``m_hat`` (the synthetic
  generator's ``calibration="oracle"`` stores the true conditional values given the prefix);
* ``"prompt_mean"``: *uninformative* predictions, every unfinished candidate of a prompt
  gets the prompt's mean ``p_hat`` and mean ``c_hat`` (and mean ``m_hat``) over its
  unfinished candidates: the prefix says nothing about which candidate will succeed or run
  long; only the prompt-level difficulty and length remain;
* ``"hindsight"``: *hindsight-perfect* predictions, ``p_hat = r`` (the realised reward,
  clipped to [0, 1]), ``c_hat = C`` (the realised suffix tokens) and ``m_hat = ||s_i||``
  (the realised score norm): the best any prefix predictor could do.

Finished candidates keep their values (the allocations set their ``pi`` to 1 regardless).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pairht.audit.base import finished_mask
from pairht.audit.population import Population

#: Prediction modes of :func:`with_predictions` (and ``pairht audit --predictions``).
PREDICTIONS = ("stored", "prompt_mean", "hindsight")


def _prompt_mean(x: np.ndarray, unf: np.ndarray) -> np.ndarray:
    n = np.maximum(unf.sum(axis=1, keepdims=True), 1)
    mean = np.where(unf, x, 0.0).sum(axis=1, keepdims=True) / n
    return np.where(unf, mean, x)


def with_predictions(pop: Population, mode: str) -> Population:
    """``pop`` with its predictions replaced according to ``mode`` (see module docstring).

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> pop = with_predictions(synthetic_population(2, 4, rng=0), "prompt_mean")
    >>> bool((pop.p_hat == pop.p_hat[:, :1]).all())
    True
    """
    if mode not in PREDICTIONS:
        raise ValueError(f"predictions must be one of {PREDICTIONS}; got {mode!r}")
    if mode == "stored":
        return pop
    unf = ~finished_mask(pop)
    meta = {**pop.meta, "predictions": mode}
    if mode == "prompt_mean":
        m_hat = None if pop.m_hat is None else _prompt_mean(pop.m_hat, unf)
        return dataclasses.replace(pop, p_hat=_prompt_mean(pop.p_hat, unf),
                                   c_hat=_prompt_mean(pop.c_hat, unf), m_hat=m_hat, meta=meta)
    norms = np.sqrt(np.clip(np.diagonal(pop.gram_matrix(), axis1=1, axis2=2), 0.0, None))
    return dataclasses.replace(
        pop, p_hat=np.where(unf, np.clip(pop.rewards, 0.0, 1.0), pop.p_hat),
        c_hat=np.where(unf, pop.costs, pop.c_hat), m_hat=norms, meta=meta)
