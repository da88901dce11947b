r"""Exact audit metrics from inclusion probabilities: no sampling.

For one prompt with target ``g = g_pair`` and an estimator ``hat g`` whose design expectation
is ``g + b`` (``b`` the conditional bias) and whose design covariance has trace ``T``:

* bias norm ``||b||``;
* trace MSE ``E||hat g - g||^2 = ||b||^2 + T``;
* cosine of the mean estimate to the target ``cos(g + b, g)`` (the *exact cosine*; the
  Monte Carlo ``E[cos(hat g, g)]`` is a different, draw-level quantity, see
  :mod:`pairht.audit.montecarlo`);
* expected completed vertices ``sum_i pi_i``, observed edges ``sum_{i<j} rho_ij`` and suffix
  tokens ``sum_i pi_i C_i`` (realised costs ``C``).

``b`` comes from :func:`pairht.estimators.conditional_bias` and ``T`` from
:func:`pairht.estimators.design_covariance` (the Horvitz-Thompson covariance, Eq.
general-covariance, from inclusion probabilities up to order four). Ratio estimators (Hajek,
observed average) have no closed form: their mean and covariance are computed by enumerating
``design.support()`` (every sample and its probability) when ``2**G <= enum_limit``, and are
``n/a`` otherwise. Direct edge sampling has independent edges, so its covariance is the
Poisson-sampling HT variance of a total, ``sum_e (1 - q_e)/q_e ||h_e / M||^2``.

All metrics are computed on the reduced scores ``L`` (``L L^T = K``, see
:meth:`~pairht.audit.population.Population.reduced_scores`): they depend on inner products
of scores only.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairht.audit.base import AuditConfig, Plan, finished_mask, is_linear, whole_tokens
from pairht.audit.population import Population
from pairht.designs import Bernoulli
from pairht.estimators import (
    VARIANTS,
    bernoulli_difference_trace,
    conditional_bias,
    design_covariance,
    difference_coefficients,
    difference_moments,
    edge_weights,
    n_pairs,
    pair_advantages,
    pair_gradient,
    pair_kernel,
    prediction_baselines,
    target_coefficients,
)


@dataclass
class ExactMoments:
    """Exact per-prompt moments of one row (``None`` where no exact value exists).

    Attributes
    ----------
    bias : (P, d') array or None
        Conditional bias ``E[hat g] - g`` per prompt, in reduced-score coordinates.
    trace_cov : (P,) array or None
        Trace of the design covariance per prompt.
    vertices, edges, tokens : (P,) arrays
        Expected completed vertices, observed edges and realised suffix tokens.
    method : str
        ``"closed form"``, ``"enumeration"`` or ``"n/a"`` (how bias and covariance were had).
    """

    bias: np.ndarray | None
    trace_cov: np.ndarray | None
    vertices: np.ndarray
    edges: np.ndarray
    tokens: np.ndarray
    method: str


def _design_trace(rewards: np.ndarray, L: np.ndarray, design: Any, weighting: str,
                  w_max: float | None) -> float | None:
    """Trace of the design covariance via ``estimators.design_covariance``, or None.

    Returns None when the estimators' function does not support this weighting (then the
    caller enumerates), so that no second copy of the covariance formula lives here.
    """
    dc = design_covariance
    params = inspect.signature(dc).parameters
    kwargs: dict[str, Any] = {}
    if weighting != "exact" and "weighting" not in params:
        # A linear variant whose weights equal the HT weights on every edge (marginal-only
        # under the Bernoulli design) is the same estimator on every sample.
        joint = design.joint()
        ones = np.ones(design.n_units, dtype=bool)
        mine = edge_weights(ones, **_variant_kwargs(weighting, w_max, design.pi, joint))
        ht = edge_weights(ones, joint, weighting="exact")
        if not np.allclose(mine, ht, rtol=1e-14, atol=0.0):
            return None
    elif weighting != "exact":
        kwargs["weighting"] = weighting
        if w_max is not None:
            kwargs["w_max"] = w_max
    out = dc(rewards, L, design, full=False, **kwargs)
    return float(out.trace)


def enumerate_moments(design: Any, rewards: np.ndarray, L: np.ndarray, *, weighting: str,
                      w_max: float | None = None, chunk: int = 4096) -> tuple[np.ndarray, float]:
    r"""Exact mean and covariance trace of a variant's estimate by enumerating the design.

    ``E[hat g] = sum_s P(s) L^T A(s)`` and ``T = sum_s P(s) ||L^T A(s) - E[hat g]||^2`` over
    every sample ``s`` of ``design.support()``, with advantages ``A(s)`` from
    :func:`pairht.estimators.pair_advantages`.

    Parameters
    ----------
    design : Design with ``n_units = G``
    rewards : (G,) array
    L : (G, d') reduced scores
    weighting, w_max : the variant (see :func:`pairht.estimators.edge_weights`)
    chunk : masks processed at once

    Returns
    -------
    mean : (d',) array
    trace : float
    """
    masks, probs = design.support(max_units=design.n_units)
    joint = design.joint()
    kwargs = _variant_kwargs(weighting, w_max, design.pi, joint)
    est = np.empty((masks.shape[0], L.shape[1]))
    for lo in range(0, masks.shape[0], chunk):
        adv = pair_advantages(rewards, masks[lo:lo + chunk], **kwargs)
        est[lo:lo + chunk] = adv @ L
    mean = probs @ est
    dev = est - mean
    return mean, float(probs @ np.einsum("kd,kd->k", dev, dev))


def _variant_kwargs(weighting: str, w_max: float | None, pi: np.ndarray,
                    joint: np.ndarray) -> dict[str, Any]:
    """Keyword arguments of ``edge_weights`` / ``pair_advantages`` for a variant."""
    v = VARIANTS[weighting]
    kwargs: dict[str, Any] = {"weighting": weighting}
    if v.uses_joint:
        kwargs["joint"] = joint
    if v.needs_pi:
        kwargs["pi"] = pi
    if v.needs_w_max:
        kwargs["w_max"] = w_max
    return kwargs


def expected_counts(plan: Plan, joint: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Per prompt, expected completed vertices ``sum_i pi_i``, observed edges
    ``sum_{i<j} rho_ij`` and suffix tokens ``sum_i pi_i C_i`` of a vertex design, each ``(P,)``.
    """
    vertices = plan.pi.sum(axis=1)
    edges = (joint.sum(axis=(1, 2)) - np.trace(joint, axis1=1, axis2=2)) / 2.0
    return vertices, edges, expected_tokens(plan)


def expected_tokens(plan: Plan) -> np.ndarray:
    """Expected realised suffix tokens per prompt, ``sum_i pi_i C_i``, ``(P,)``."""
    return (plan.pi * plan.cost).sum(axis=1)


def tied_prompts(rewards: np.ndarray) -> np.ndarray:
    """Prompts whose ``G`` rewards are all equal, ``(P,)`` bool: every pair term of such a
    prompt is zero, so are its target and any pair estimate of it, on every sample.

    Examples
    --------
    >>> tied_prompts(np.array([[1.0, 1.0], [0.0, 1.0]])).tolist()
    [True, False]
    """
    return np.all(rewards == rewards[:, :1], axis=1)


def vertex_row_moments(row: Any, plan: Plan, pop: Population, L: np.ndarray,
                       cfg: AuditConfig) -> ExactMoments:
    """Exact moments of a :class:`~pairht.audit.rows.VertexRow` on every prompt."""
    joint, designs = plan.joint, plan.designs
    assert joint is not None and designs is not None  # vertex rows always plan both
    G = pop.group_size
    vertices, edges, tokens = expected_counts(plan, joint)
    P, d = L.shape[0], L.shape[2]
    bias = np.empty((P, d))
    trace = np.empty(P)
    linear = is_linear(row.weighting)
    can_enumerate = 2**G <= cfg.enum_limit
    method = "closed form" if linear else ("enumeration" if can_enumerate else "n/a")
    if method == "n/a":
        return ExactMoments(None, None, vertices, edges, tokens, method)
    # A prompt whose rewards are all equal has every pair term zero: the target and every
    # sample's estimate are 0, so its bias and trace are exactly 0 (no design moments needed;
    # the fourth-order inclusions of a fixed-size design are most of an audit's time).
    tied = tied_prompts(pop.rewards)
    bias[tied], trace[tied] = 0.0, 0.0
    todo = np.flatnonzero(~tied)
    if not linear:
        for q in todo:
            mean, trace[q] = enumerate_moments(designs[q], pop.rewards[q], L[q],
                                               weighting=row.weighting, w_max=row.w_max)
            bias[q] = mean - pair_gradient(pop.rewards[q], L[q])
        return ExactMoments(bias, trace, vertices, edges, tokens, method)
    for q in todo:
        bias[q] = conditional_bias(pop.rewards[q], L[q], designs[q], weighting=row.weighting,
                                   w_max=row.w_max)
    for q in todo:
        r, design = pop.rewards[q], designs[q]
        t = _design_trace(r, L[q], design, row.weighting, row.w_max)
        if t is None:
            if not can_enumerate:
                return ExactMoments(bias, None, vertices, edges, tokens,
                                    "closed form (bias only)")
            method = "closed form + enumeration"
            _, t = enumerate_moments(design, r, L[q], weighting=row.weighting, w_max=row.w_max)
        trace[q] = t
    return ExactMoments(bias, trace, vertices, edges, tokens, method)


def difference_baselines(pop: Population) -> np.ndarray:
    """Baselines of the difference estimator, ``(P, G)``: the predictions ``p_hat`` of the
    unfinished candidates, the known reward of the finished ones (fixed before the draw)."""
    return prediction_baselines(pop.p_hat, pop.rewards, finished_mask(pop))


def difference_row_moments(plan: Plan, pop: Population, L: np.ndarray) -> ExactMoments:
    """Exact moments of a row with the difference estimator (``estimator = "difference"``),
    from :func:`pairht.estimators.difference.difference_moments` on every prompt."""
    joint, designs = plan.joint, plan.designs
    assert joint is not None and designs is not None  # vertex rows always plan both
    vertices, edges, tokens = expected_counts(plan, joint)
    base = difference_baselines(pop)
    P, d = L.shape[0], L.shape[2]
    if all(isinstance(x, Bernoulli) for x in designs):
        # Bernoulli (pair_dr's design): the closed form, batched over prompts (the general
        # path needs fourth-order inclusions, ~8 ms a group at G = 12 in a profile; two-stage
        # rows run it on every subset of every prompt)
        pi = np.diagonal(joint, axis1=1, axis2=2)
        a = difference_coefficients(pop.rewards, base, joint)
        mean = np.einsum("pij,pij->pi", a, joint)
        bias = np.einsum("pi,pid->pd", mean - target_coefficients(pop.rewards), L)
        trace = bernoulli_difference_trace(pop.rewards, base, pi, L @ np.swapaxes(L, 1, 2))
        return ExactMoments(bias, trace, vertices, edges, tokens, "closed form (Bernoulli)")
    bias, trace = np.empty((P, d)), np.empty(P)
    for q in range(P):
        mom = difference_moments(pop.rewards[q], base[q], designs[q])
        bias[q] = mom.bias(L[q])
        trace[q] = mom.trace(L[q] @ L[q].T)
    return ExactMoments(bias, trace, vertices, edges, tokens, "closed form")


def edge_terms(rewards: np.ndarray, L: np.ndarray, q: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    r"""Edge probabilities ``q_e`` and HT terms ``y_e = h_e / (M q_e)`` of direct edge sampling.

    The one implementation of the edge-sampling coefficient ``1 / (M q_e)``; edges ``e = (i,
    j)`` run over the upper triangle ``i < j`` in :func:`numpy.triu_indices` order, and
    ``h`` is :func:`pairht.estimators.pair_kernel`.

    Parameters
    ----------
    rewards : (..., G) array
    L : (..., G, d') reduced scores
    q : (..., G, G) edge inclusion probabilities, positive off the diagonal

    Returns
    -------
    qe : (..., M) array
    y : (..., M, d') array
    """
    G = rewards.shape[-1]
    iu, ju = np.triu_indices(G, k=1)
    qe = q[..., iu, ju]
    y = pair_kernel(rewards, L)[..., iu, ju, :] / (n_pairs(G) * qe)[..., None]
    return qe, y


def edge_row_moments(plan: Plan, pop: Population, L: np.ndarray) -> ExactMoments:
    r"""Exact moments of direct edge sampling (independent ``I_e ~ Bernoulli(q_e)``).

    ``hat g = sum_e I_e y_e`` with ``y_e = h_e / (M q_e)``: mean ``sum_e q_e y_e`` and
    covariance trace ``sum_e q_e (1 - q_e) ||y_e||^2`` (independent terms). The mean is
    computed, not assumed, so the reported bias is the arithmetic's.
    """
    assert plan.q is not None  # edge rows always plan q
    qe, y = edge_terms(pop.rewards, L, plan.q)
    mean = np.einsum("pe,ped->pd", qe, y)
    bias = mean - pair_gradient(pop.rewards, L)
    trace = np.einsum("pe,pe->p", qe * (1.0 - qe), np.einsum("ped,ped->pe", y, y))
    return ExactMoments(bias, trace, plan.pi.sum(axis=1), qe.sum(axis=1), expected_tokens(plan),
                        "closed form")


def component_size(design: Any) -> int:
    """The fixed sample size of one component of a :class:`~pairht.designs.MixedSize`."""
    return round(float(design.pi.sum()))


def conditional_parts(design: Any, empty_below_two: bool) -> list[tuple[float, Any, Any]]:
    r"""How conditional HT weighs the samples of a :class:`~pairht.designs.MixedSize` design.

    Returns ``(probability, sampler, weighter)`` triples: samples of ``sampler`` (a component,
    identified by its size) are weighted with the exact HT weights of ``weighter``'s joints,
    or estimate 0 when ``weighter`` is None. Per component when every component observes
    every pair with positive probability (then each conditional estimate is unbiased);
    otherwise -- a component with fewer than two unfinished candidates cannot observe every
    pair -- the mixture's own joints for every sample (``[(1, design, design)]``, unbiased).
    ``empty_below_two`` (small-group GRPO) keeps the per-component rule and gives a
    component of fewer than two samples the estimate 0, as GRPO does with one completion.
    """
    if not hasattr(design, "components"):  # one design, no sizes to condition on (Bernoulli)
        return [(1.0, design, design)]
    parts = [(w, c) for w, c in zip(design.weights, design.components)
             if c is not None and w > 0.0]
    if empty_below_two:
        return [(w, c, c if component_size(c) >= 2 else None) for w, c in parts]
    if all(component_size(c) >= 2 and c.all_pairs_positive() for _, c in parts):
        return [(w, c, c) for w, c in parts]
    return [(1.0, design, design)]


def conditional_moments(row: Any, plan: Plan, pop: Population, L: np.ndarray) -> ExactMoments:
    r"""Exact moments of conditional HT on :class:`~pairht.designs.MixedSize` designs.

    With the parts of :func:`conditional_parts`, part ``c`` (probability ``w_c``) has bias
    ``b_c`` (:func:`pairht.estimators.conditional_bias` with its weighter's joints; ``-g``
    for the estimate 0) and covariance trace ``T_c``
    (:func:`pairht.estimators.design_covariance`; 0 for the estimate 0). Then
    ``E[hat g] - g = sum_c w_c b_c`` and ``E||hat g - g||^2 = sum_c w_c (||b_c||^2 + T_c)``
    (the reported trace is this minus the squared bias: within plus between parts).
    """
    joint, designs = plan.joint, plan.designs
    assert joint is not None and designs is not None  # vertex rows always plan both
    P, d = L.shape[0], L.shape[2]
    g = pair_gradient(pop.rewards, L)
    bias = np.zeros((P, d))
    mse = np.zeros(P)
    vertices, edges, tokens = expected_counts(plan, joint)
    empty = row.empty_below_two
    for q in range(P):
        for w, comp, weighter in conditional_parts(designs[q], empty):
            if weighter is None:
                b, t = -g[q], 0.0
            else:
                b = conditional_bias(pop.rewards[q], L[q], comp, weighting="exact")
                t = float(design_covariance(pop.rewards[q], L[q], comp, full=False).trace)
            bias[q] += w * b
            mse[q] += w * (float(b @ b) + t)
    trace = np.maximum(mse - np.einsum("pd,pd->p", bias, bias), 0.0)
    return ExactMoments(bias, trace, vertices, edges, tokens, "closed form (per component)")


def two_stage_row_moments(ts: Any, pop: Population, L: np.ndarray) -> ExactMoments:
    r"""Exact moments of a two-stage row (:mod:`pairht.audit.two_stage`), by enumerating its
    ``C(G, w)`` subsets ``S``: with the inner row's exact bias ``b_S`` and covariance trace
    ``T_S`` on ``S``, the bias is ``mean_S (g_S + b_S) - g`` and the MSE
    ``mean_S (||g_S + b_S - g||^2 + T_S)``; counts and tokens are the subsets' means.

    ``ts`` is the row's :class:`pairht.audit.two_stage.TwoStage` (``plan.stages``)."""
    inner = row_moments(ts.inner, ts.plan, ts.sub, ts.L, ts.config)
    P, n = pop.n_prompts, ts.n_subsets

    def per_prompt(a: np.ndarray) -> np.ndarray:
        return a.reshape(P, n).mean(axis=1)

    method = f"enumeration of the C(G, {ts.width}) subsets; {inner.method} within"
    if inner.bias is None or inner.trace_cov is None:
        return ExactMoments(None, None, per_prompt(inner.vertices), per_prompt(inner.edges),
                            per_prompt(inner.tokens), method)
    g = pair_gradient(pop.rewards, L)
    g_sub = pair_gradient(ts.sub.rewards, ts.L).reshape(P, n, -1)
    off = g_sub + inner.bias.reshape(P, n, -1) - g[:, None, :]
    bias = off.mean(axis=1)
    mse = (np.einsum("psd,psd->ps", off, off) + inner.trace_cov.reshape(P, n)).mean(axis=1)
    trace = np.maximum(mse - np.einsum("pd,pd->p", bias, bias), 0.0)
    return ExactMoments(bias, trace, per_prompt(inner.vertices), per_prompt(inner.edges),
                        per_prompt(inner.tokens), method)


def row_moments(row: Any, plan: Plan, pop: Population, L: np.ndarray,
                cfg: AuditConfig) -> ExactMoments:
    """Exact moments of any row, by the estimator it declares (``row.estimator``)."""
    if row.estimator == "two_stage":
        return two_stage_row_moments(plan.stages, pop, L)
    if row.estimator == "edge":
        return edge_row_moments(plan, pop, L)
    if row.estimator == "conditional_ht":
        if row.weighting != "exact":
            raise ValueError(f"conditional_ht takes exact HT weights only; row {row.key!r} "
                             f"has weighting {row.weighting!r}")
        return conditional_moments(row, plan, pop, L)
    if row.estimator == "difference":
        return difference_row_moments(plan, pop, L)
    if row.estimator != "ht":
        raise ValueError(f"row {row.key!r}: unknown estimator {row.estimator!r}")
    return vertex_row_moments(row, plan, pop, L, cfg)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine ``<a, b> / (||a|| ||b||)``, defined as 0 when either vector is 0."""
    num = np.einsum("...d,...d->...", a, b)
    den = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def informative(g: np.ndarray) -> np.ndarray:
    """Prompts whose target is nonzero (cosines are averaged over these only), (P,) bool."""
    scale = max(float(np.abs(g).max(initial=0.0)), 1e-300)
    return np.linalg.norm(g, axis=-1) > 1e-12 * scale


def exact_summary(mom: ExactMoments, g: np.ndarray, pop: Population,
                  plan: Plan) -> dict[str, float]:
    """Aggregate exact per-prompt moments over prompts (means; tokens pooled).

    ``bias_exact = mean_q ||b_q||``, ``mse_exact = mean_q (||b_q||^2 + T_q)``,
    ``cos_mean_exact = mean over prompts with g_q != 0 of cos(g_q + b_q, g_q)``,
    ``vertices/edges_exact = mean_q``, ``tokens_exact = sum_q E[sum_i J_qi cost_qi] /
    token_scale`` (realised suffix tokens over the full cost; finished candidates cost 0),
    ``generated_exact = (prefix_tokens + sum_q E[sum_i J_qi cost_qi]) / sum (prefix + C)``
    (every generated token, comparable with small-group GRPO). Missing values are NaN.
    """
    nan = float("nan")
    out = {
        "vertices_exact": float(mom.vertices.mean()),
        "edges_exact": float(mom.edges.mean()),
        "tokens_exact": float(mom.tokens.sum() / plan.token_scale),
        "generated_exact": float((plan.prefix_tokens + mom.tokens.sum()) / whole_tokens(pop)),
        "bias_exact": nan, "mse_exact": nan, "cos_mean_exact": nan,
    }
    if mom.bias is not None:
        b2 = np.einsum("pd,pd->p", mom.bias, mom.bias)
        out["bias_exact"] = float(np.sqrt(b2).mean())
        keep = informative(g)
        if keep.any():
            out["cos_mean_exact"] = float(cosine(g + mom.bias, g)[keep].mean())
        if mom.trace_cov is not None:
            out["mse_exact"] = float((b2 + mom.trace_cov).mean())
    return out
