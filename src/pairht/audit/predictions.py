r"""Replace a population's prefix predictions: what the audit measures PAIR against.

* ``"stored"``: the population's own ``p_hat``, ``c_hat``, ``m_hat`` (the synthetic
  generator's ``calibration="oracle"`` stores the true conditional values given the prefix);
* ``"prompt_mean"``: *uninformative* predictions, every unfinished candidate of a prompt
  gets the prompt's mean ``p_hat`` and mean ``c_hat`` (and mean ``m_hat``) over its
  unfinished candidates: the prefix says nothing about which candidate will succeed or run
  long; only the prompt-level difficulty and length remain;
* ``"hindsight"``: *hindsight-perfect* predictions, ``p_hat = r`` (the realised reward,
  clipped to [0, 1]), ``c_hat = C`` (the realised suffix tokens) and ``m_hat = ||s_i||``
  (the realised score norm): the best any prefix predictor could do;
* ``"shrunk_slope"``, ``"shrunk_skill"``: the stored predictions shrunk toward their group
  mean (:func:`pairht.step.shrink_predictions`) by the factors the trainer would use
  (``PairGRPOConfig.shrink_by``), measured here on the stored predictions and the realised
  outcomes (:func:`shrinkage_measures`): the reliability slope of the within-group
  deviations, or the Brier skill and the R^2 of log cost. For a population whose predictions
  are out of fold (the real populations are cross-fitted by prompt) these are held-out
  measures, as in training.

:func:`within_prompt_skill` measures how well the predictions rank the candidates of one
prompt (zero for ``"prompt_mean"``, one for ``"hindsight"``).

Finished candidates keep their values (the allocations set their ``pi`` to 1 regardless).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from pairht.audit.base import finished_mask
from pairht.audit.population import Population
from pairht.heads_fit import brier_skill, log_cost_r2, reliability_slope
from pairht.step import StepInputs, shrink_predictions

#: Prediction modes of :func:`with_predictions` (and ``pairht audit --predictions``).
PREDICTIONS = ("stored", "prompt_mean", "hindsight", "shrunk_slope", "shrunk_skill")


def shrinkage_measures(pop: Population) -> dict[str, float]:
    r"""How much the stored predictions deserve: the measures the trainer shrinks by.

    With ``r`` the rewards clipped to [0, 1], ``p_bar_q`` the mean ``p_hat`` of prompt ``q``
    (all candidates) and ``c_bar_q`` its mean ``c_hat`` over unfinished candidates
    (:func:`pairht.step.shrink_predictions`' centres), unit weights:

    * ``skill_success`` = Brier skill against the population's mean reward,
      ``skill_cost`` = R^2 of log cost against the geometric mean cost (unfinished);
    * ``slope_success`` = :func:`pairht.heads_fit.reliability_slope` of
      ``(p_hat - p_bar_q, r - p_bar_q)``, ``slope_cost`` the same of
      ``(c_hat - c_bar_q, C - c_bar_q)`` over unfinished candidates.

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> m = shrinkage_measures(synthetic_population(48, 16, rng=0))  # oracle predictions
    >>> round(m["slope_success"], 2), round(m["skill_success"], 2)
    (1.0, 0.36)
    """
    unf = ~finished_mask(pop)
    r = np.clip(pop.rewards, 0.0, 1.0)
    p, c = pop.p_hat, pop.c_hat
    pm = p.mean(axis=1, keepdims=True)
    n_u = np.maximum(unf.sum(axis=1, keepdims=True), 1)
    cm = np.where(unf, c, 0.0).sum(axis=1, keepdims=True) / n_u
    ones = np.ones(int(unf.sum()))
    out = {
        "skill_success": brier_skill(p, r, np.full(r.shape, r.mean())),
        "slope_success": reliability_slope((p - pm).ravel(), (r - pm).ravel(),
                                           np.ones(r.size)),
        "skill_cost": math.nan,
        "slope_cost": math.nan,
    }
    if unf.any():
        geo = float(np.exp(np.log(pop.costs[unf]).mean()))
        out["skill_cost"] = log_cost_r2(c[unf], pop.costs[unf], np.full(ones.shape, geo))
        out["slope_cost"] = reliability_slope((c - cm)[unf], (pop.costs - cm)[unf], ones)
    return out


def within_prompt_skill(pop: Population) -> dict[str, float]:
    r"""How well ``p_hat`` ranks the candidates *of one prompt*: its within-prompt skill.

    A prompt-level predictor (every candidate of a prompt gets the same ``p_hat``) can be
    well calibrated across prompts and still say nothing about which candidate of a prompt
    will succeed; these two measures see only the within-prompt part. With ``r`` the rewards
    clipped to [0, 1] and ``p_bar_q`` the mean ``p_hat`` of prompt ``q`` over its unfinished
    candidates (finished candidates are left out: their outcome is known):

    * ``brier`` = ``1 - sum (p_hat - r)^2 / sum (p_bar_q - r)^2``: the Brier skill of the
      predictions against the predictor's *own* prompt means (exactly 0 for prompt-level
      predictions, 1 for hindsight-perfect ones, negative when the within-prompt deviations
      add noise);
    * ``auc`` = over every prompt and every pair of its unfinished candidates with
      ``r_i > r_j``, the share with ``p_hat_i > p_hat_j`` (ties count one half): 0.5 for no
      within-prompt ranking, 1 for a perfect one;

    and ``n_pairs``, the number of such pairs (NaN skills when there are none: no prompt has
    two different rewards).

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> m = within_prompt_skill(with_predictions(synthetic_population(8, 6, rng=0),
    ...                                          "prompt_mean"))
    >>> round(m["brier"], 12), m["auc"]
    (0.0, 0.5)
    """
    unf = ~finished_mask(pop)
    r = np.clip(pop.rewards, 0.0, 1.0)
    p = pop.p_hat
    n = np.maximum(unf.sum(axis=1, keepdims=True), 1)
    pm = np.where(unf, p, 0.0).sum(axis=1, keepdims=True) / n
    num = float(np.where(unf, (p - r) ** 2, 0.0).sum())
    den = float(np.where(unf, (pm - r) ** 2, 0.0).sum())
    both = unf[:, :, None] & unf[:, None, :]
    higher = both & (r[:, :, None] > r[:, None, :])
    n_pairs = int(higher.sum())
    dp = p[:, :, None] - p[:, None, :]
    won = float(np.where(higher, (dp > 0) + 0.5 * (dp == 0), 0.0).sum())
    return {"brier": 1.0 - num / den if den > 0 else math.nan,
            "auc": won / n_pairs if n_pairs else math.nan,
            "n_pairs": float(n_pairs)}


def _shrunk(pop: Population, by: str, meta: dict) -> Population:
    m = shrinkage_measures(pop)
    factor = {what: float(np.clip(np.nan_to_num(m[f"{by}_{what}"], nan=0.0), 0.0, 1.0))
              for what in ("success", "cost")}
    unf = ~finished_mask(pop)
    inputs = StepInputs.from_ratio(pop.p_hat, np.where(unf, pop.c_hat, 0.0), ~unf,
                                   budget_ratio=1.0)
    used = shrink_predictions(inputs, factor["success"], factor["cost"])
    return dataclasses.replace(pop, p_hat=used.p_hat, c_hat=np.where(unf, used.c_hat, pop.c_hat),
                               meta={**meta, "shrinkage": factor})


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
    if mode.startswith("shrunk_"):
        return _shrunk(pop, mode.removeprefix("shrunk_"), meta)
    if mode == "prompt_mean":
        m_hat = None if pop.m_hat is None else _prompt_mean(pop.m_hat, unf)
        return dataclasses.replace(pop, p_hat=_prompt_mean(pop.p_hat, unf),
                                   c_hat=_prompt_mean(pop.c_hat, unf), m_hat=m_hat, meta=meta)
    norms = np.sqrt(np.clip(np.diagonal(pop.gram_matrix(), axis1=1, axis2=2), 0.0, None))
    return dataclasses.replace(
        pop, p_hat=np.where(unf, np.clip(pop.rewards, 0.0, 1.0), pop.p_hat),
        c_hat=np.where(unf, pop.costs, pop.c_hat), m_hat=norms, meta=meta)
