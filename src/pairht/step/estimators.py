r"""After rewards: one registry of the step's estimators, and :func:`estimate`.

Every estimator turns a plan (:class:`~pairht.step.StepPlan`, all of it logged before any
reward) and the rewards of its completed candidates into per-candidate advantages ``A`` with
``sum_i A_i s_i`` the gradient estimate (PAIR paper, Eq. pair-advantage):

``"ht"``
    the pair Horvitz-Thompson estimator, ``A_i = 1/2 sum_j W_ij (r_i - r_j)`` with the edge
    weights ``W`` of a variant (:func:`pairht.estimators.edge_weights`; ``"exact"``:
    ``W_ij = J_i J_j / (M rho_ij)``, design-unbiased for the complete-pair target, Theorem 2).
``"difference"``
    the difference estimator (:func:`pairht.estimators.difference_advantages`): the HT
    advantages corrected by fixed baselines (the predictions ``p_hat``; the known reward of a
    finished candidate), exactly unbiased for any predictions. Exact weights only.
``"dppo"``
    DPPO's pruning after rewards (:mod:`pairht.comparators.dppo`): keep probabilities from the
    full-group HT advantages, a kept mask ``K`` drawn with ``rng``, and the pair-HT estimator
    on ``K`` with the pruning design's exact ``pi = q o``, ``rho = q o o'`` (unbiased
    conditional on the completed group). The plan must complete every candidate.

An entry is a function ``(plan, rewards, *, weighting, w_max, rng) -> StepEstimate`` (with
``logged`` holding only what is its own); :func:`estimate` adds the standardisation and the
quantities every estimator logs. A new estimator registers with its capabilities
(``docs/extend/estimator.md``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import RNGLike
from pairht.estimators import (
    difference_advantages,
    edge_weights,
    ess,
    n_pairs,
    pair_advantages_from_weights,
    prediction_baselines,
    token_counts,
)
from pairht.registry import Registry
from pairht.step.step_plan import StepPlan
from pairht.step.subset import put, take


@dataclass(frozen=True)
class EstimatorCapabilities:
    """What a step estimator needs and gives.

    Attributes
    ----------
    needs_predictions : bool
        Reads the plan's ``p_hat`` (and ``finished``) as baselines.
    post_reward_design : bool
        Replaces the plan's design after the rewards (prunes completed candidates); needs
        ``rng`` and a plan that completed every candidate.
    exact_weights_only : bool
        Defined for ``weighting="exact"`` only.
    unbiased : bool
        Exactly design-unbiased for the complete-pair target with ``weighting="exact"``.
    """

    needs_predictions: bool = False
    post_reward_design: bool = False
    exact_weights_only: bool = False
    unbiased: bool = True


@dataclass(frozen=True)
class StepEstimate:
    r"""The step's advantages and what the loss and the logs need, after rewards.

    Attributes
    ----------
    advantages : (B, G) ndarray of float64
        ``A_i`` (standardised when :func:`estimate` was asked to); 0 off ``mask``.
    mask : (B, G) ndarray of bool
        The candidates whose sequences enter the loss: ``J`` (DPPO: the kept ``K``).
    pi : (B, G) ndarray
        First-order inclusion probabilities of the estimator's design (the plan's, or the
        pruning design's).
    joint : (B, G, G) ndarray
        ``rho`` of that design.
    weights : (B, G, G) ndarray
        Its edge weights ``W`` under the ``weighting`` (logged: ESS, largest weight).
    estimator : str
    logged : dict of str to float
        ``completed`` (mean ``|J|`` generated per group), ``observed_edges`` (mean per group,
        on ``mask``), ``max_weight`` (``M max W_ij``), ``ess`` (Kish, mean per group),
        ``pi_mean`` (generation design); with ``suffix_tokens``: ``prefix_tokens``,
        ``suffix_tokens``, ``full_suffix_tokens_ht`` (``sum J C / pi``), ``suffix_fraction``,
        ``token_fraction``, ``cost_ratio``; the estimator's own (DPPO: ``dppo_kept_fraction``,
        ``dppo_expected_kept_fraction``, ``dppo_prompts_kept``).
    """

    advantages: np.ndarray
    mask: np.ndarray
    pi: np.ndarray
    joint: np.ndarray
    weights: np.ndarray
    estimator: str
    logged: dict[str, float] = field(default_factory=dict)


EstimatorFn = Callable[..., StepEstimate]

#: The step's estimators, by name (module docstring); capabilities :class:`EstimatorCapabilities`.
ESTIMATORS: Registry[EstimatorFn] = Registry("estimator", EstimatorCapabilities)


def register_estimator(name: str, **capabilities: Any) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator: register a step estimator ``(plan, rewards, *, weighting, w_max, rng) ->
    StepEstimate`` under ``name`` with its :class:`EstimatorCapabilities`."""
    return ESTIMATORS.register(name, **capabilities)  # type: ignore[no-any-return]


def default_estimator(allocator: str) -> str:
    """The estimator a rule's draw is made for: its declared ``estimator`` (``"pair_dr"``:
    ``"difference"``; ``"dppo"``: ``"dppo"``), else ``"ht"``."""
    from pairht.step.allocators import ALLOCATORS

    return str(getattr(ALLOCATORS[allocator], "estimator", "ht"))


def _ht(plan: StepPlan, rewards: np.ndarray, mask: np.ndarray, pi: np.ndarray,
        joint: np.ndarray, weighting: str, w_max: float | None, name: str) -> StepEstimate:
    w = edge_weights(mask, joint, weighting=weighting, w_max=w_max, pi=_pi_if(weighting, pi))
    adv = pair_advantages_from_weights(rewards, w, mask=mask)
    return StepEstimate(advantages=adv, mask=mask, pi=pi, joint=joint, weights=w,
                        estimator=name)


def _pi_if(weighting: str, pi: np.ndarray) -> np.ndarray | None:
    from pairht.estimators import VARIANTS

    return pi if VARIANTS[weighting].needs_pi else None


@register_estimator("ht")
def ht_estimate(plan: StepPlan, rewards: np.ndarray, *, weighting: str = "exact",
                w_max: float | None = None, rng: RNGLike = None) -> StepEstimate:
    r"""``A_i = 1/2 sum_j W_ij (r_i - r_j)``, ``W`` the variant's edge weights on the plan."""
    return _ht(plan, rewards, plan.selected, plan.pi, plan.joint, weighting, w_max, "ht")


@register_estimator("difference", needs_predictions=True, exact_weights_only=True)
def difference_estimate(plan: StepPlan, rewards: np.ndarray, *, weighting: str = "exact",
                        w_max: float | None = None, rng: RNGLike = None) -> StepEstimate:
    r"""The difference estimator with the predictions as baselines
    (:func:`pairht.estimators.difference_advantages`); at width ``"subset"`` the estimate of
    ``g_S`` on the subset's block with the rule's own ``rho|S`` (the other candidates have no
    baseline), unbiased given ``S``, and ``E_S[g_S] = g`` (:mod:`pairht.step.subset`)."""
    base = prediction_baselines(plan.p_hat, rewards, plan.finished)
    if plan.subset is None:
        adv = difference_advantages(rewards, plan.selected, plan.joint, base)
    else:
        S = plan.subset
        assert plan.inner_joint is not None  # recorded with the subset
        adv = put(difference_advantages(take(rewards, S), take(plan.selected, S),
                                        plan.inner_joint, take(base, S)), S, plan.shape[1])
    # the HT weights of the plan are logged (ESS, largest weight) beside the estimate
    ht = _ht(plan, rewards, plan.selected, plan.pi, plan.joint, weighting, w_max, "difference")
    return dataclasses.replace(ht, advantages=np.asarray(adv, dtype=np.float64))


@register_estimator("dppo", post_reward_design=True)
def dppo_estimate(plan: StepPlan, rewards: np.ndarray, *, weighting: str = "exact",
                  w_max: float | None = None, rng: RNGLike = None,
                  **keep_options: float) -> StepEstimate:
    r"""DPPO's pruning: ``(q, o)`` from the full-group HT advantages
    (:func:`pairht.comparators.dppo_keep_probabilities`, ``keep_options`` its rates and
    quantiles), ``K ~ dppo_sample(q, o, rng)``, then the HT estimate on ``K`` with
    ``pi_bi = q_b o_bi``, ``rho_bij = q_b o_bi o_bj``."""
    from pairht.comparators import dppo_design, dppo_keep_probabilities, dppo_sample

    if not plan.selected.all():
        raise ValueError(f"estimator 'dppo' prunes a completed group, but the plan left "
                         f"{int((~plan.selected).sum())} candidates uncompleted")
    full = _ht(plan, rewards, plan.selected, plan.pi, plan.joint, weighting, w_max, "dppo")
    q, o = dppo_keep_probabilities(full.advantages, **keep_options)
    pi, joint = dppo_design(q, o)
    kept = dppo_sample(q, o, rng)
    out = _ht(plan, rewards, kept, pi, joint, weighting, w_max, "dppo")
    return dataclasses.replace(out, logged={
        "dppo_kept_fraction": float(kept.mean()),
        "dppo_expected_kept_fraction": float(pi.mean()),
        "dppo_prompts_kept": float(kept.any(-1).mean()),
    })


def standardise(advantages: ArrayLike, rewards: ArrayLike, mask: ArrayLike,
                scale: str) -> np.ndarray:
    r"""Practical-mode reward standardisation: ``A / (std + 1e-4)``.

    ``scale="group"``: the sample std (``n - 1``) of each group's completed rewards (0 with
    fewer than two); ``"batch"``: of every completed reward; ``"none"``: ``A`` unchanged. A
    practical departure (paper, appendix "Reward standardization"): the ratio is biased.
    """
    a = np.asarray(advantages, dtype=np.float64)
    if scale == "none":
        return a
    m = np.asarray(mask, dtype=bool)
    r = np.where(m, np.asarray(rewards, dtype=np.float64), np.nan)
    if scale == "group":
        n = m.sum(-1, keepdims=True)
        total = np.nansum(r, axis=-1, keepdims=True)
        mean = np.divide(total, n, out=np.zeros_like(total), where=n > 0)
        var = np.nansum((r - mean) ** 2, axis=-1, keepdims=True) / np.maximum(n - 1, 1)
        std = np.where(n > 1, np.sqrt(var), 0.0)
    elif scale == "batch":
        vals = r[m]
        std = np.asarray(np.std(vals, ddof=1) if vals.size > 1 else 0.0)
    else:
        raise ValueError(f"scale_rewards must be 'none', 'group' or 'batch'; got {scale!r}")
    return a / (std + 1e-4)


def estimate(
    plan: StepPlan,
    rewards: ArrayLike,
    *,
    weighting: str = "exact",
    w_max: float | None = None,
    scale_rewards: str = "none",
    rng: RNGLike = None,
    suffix_tokens: ArrayLike | None = None,
    estimator: str | None = None,
    **estimator_options: Any,
) -> StepEstimate:
    r"""The step's advantages from the plan and the rewards of its completed candidates.

    ``A = ESTIMATORS[plan.estimator](plan, r)`` (module docstring), then, in practical mode,
    ``A / (std_J(r) + 1e-4)`` (``scale_rewards``; the std over the generated candidates ``J``).
    With ``weighting="exact"`` and ``scale_rewards="none"`` (exact mode)

    .. math:: \sum_i A_{bi} s_{bi} = \widehat g_{\text{PAIR}}(q_b)
              = \frac1M \sum_{i<j} \frac{J_i J_j}{\rho_{ij}} h_{ij}

    for ``"ht"`` (PAIR paper, Eq. pair-ht), design-unbiased for the complete-pair target.

    Parameters
    ----------
    plan : StepPlan
        From :func:`~pairht.step.plan_step` (or :meth:`StepPlan.from_rows`).
    rewards : (B, G) array_like
        ``r_i`` of the completed candidates (``plan.selected``); other entries ignored (NaN
        is fine). A NaN at a completed candidate raises.
    weighting : str
        An edge-weighting variant (:data:`pairht.estimators.VARIANTS`); ``w_max`` for
        ``"clipped"``.
    scale_rewards : {"none", "group", "batch"}
        Practical-mode standardisation (:func:`standardise`).
    rng : int, numpy.random.Generator or None
        Randomness of a post-reward design (``"dppo"``); unused otherwise.
    suffix_tokens : (B, G) array_like, optional
        Realised suffix tokens (0 where not generated): adds the token accounting to
        ``logged``.
    estimator : str, optional
        Overrides ``plan.estimator``.
    **estimator_options
        Passed to the estimator (DPPO's rates and quantiles).

    Returns
    -------
    StepEstimate

    Raises
    ------
    ValueError
        ``rewards`` not ``(B, G)``, NaN at a completed candidate, an unknown estimator or
        weighting, or a weighting the estimator does not take.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.step import estimate, plan_step
    >>> plan = plan_step([[0.2, 0.8, 0.5, 0.5]], [[10.0, 20.0, 30.0, 40.0]], [[False] * 4],
    ...                  budget_ratio=1.0, rng=0)    # the whole budget: every pi = 1
    >>> est = estimate(plan, [[1.0, 0.0, 0.0, 1.0]])
    >>> est.advantages[0].tolist()                   # 1/(2M) sum_j (r_i - r_j), M = 6
    [0.16666666666666666, -0.16666666666666666, -0.16666666666666666, 0.16666666666666666]
    """
    if not isinstance(plan, StepPlan):
        raise TypeError(f"plan must be a pairht.step.StepPlan; got {type(plan).__name__}")
    name = ESTIMATORS.check("estimator", plan.estimator if estimator is None else estimator)
    caps = ESTIMATORS.capabilities(name)
    if caps.exact_weights_only and weighting != "exact":
        raise ValueError(f"estimator {name!r} has exact weights only; got "
                         f"weighting={weighting!r}")
    r = np.asarray(rewards, dtype=np.float64)
    if r.shape != plan.shape:
        raise ValueError(f"rewards must have the plan's shape (B, G) = {plan.shape}; got "
                         f"{r.shape}")
    out = ESTIMATORS[name](plan, r, weighting=weighting, w_max=w_max, rng=rng,
                           **estimator_options)
    # standardised over every generated reward (the plan's J), pruned or not
    adv = standardise(out.advantages, r, plan.selected, scale_rewards)
    logged = {**_logged(plan, out), **out.logged}
    if suffix_tokens is not None:
        logged.update(_token_logs(plan, np.asarray(suffix_tokens)))
    return dataclasses.replace(out, advantages=adv, logged=logged)


def _logged(plan: StepPlan, out: StepEstimate) -> dict[str, float]:
    G = plan.shape[1]
    return {
        "completed": float(plan.selected.sum(-1).mean()),
        "observed_edges": float(n_pairs(out.mask.sum(-1)).mean()),
        "max_weight": float(out.weights.max() * n_pairs(G)),
        "ess": float(np.mean(ess(out.weights))),
        "pi_mean": float(plan.pi.mean()),
    }


def _token_logs(plan: StepPlan, suffix: np.ndarray) -> dict[str, float]:
    """Generated tokens on the generation design (``J``, ``pi`` of the plan)."""
    t = token_counts(plan.prefix_tokens, suffix, plan.selected, plan.pi)
    G = plan.shape[1]
    share = 1.0 if plan.subset is None else plan.subset.shape[1] / G
    c_sel = float(plan.c_hat[plan.selected].sum())
    full = t.full_suffix_ht
    return {
        "prefix_tokens": t.prefix,
        "suffix_tokens": t.suffix,
        "full_suffix_tokens_ht": full,
        "suffix_fraction": t.suffix / full if full > 0 else 0.0,
        # over the HT estimate of every candidate's prefix and suffix: width "subset"
        # generates the share w/G of the prefixes
        "token_fraction": t.generated / (t.prefix / share + full),
        "cost_ratio": t.suffix / c_sel if c_sel > 0 else float("nan"),
    }


__all__ = ["ESTIMATORS", "EstimatorCapabilities", "StepEstimate", "default_estimator",
           "difference_estimate", "dppo_estimate", "estimate", "ht_estimate",
           "register_estimator", "standardise"]
