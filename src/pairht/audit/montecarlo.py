r"""Monte Carlo replay of the audit rows: many design draws per prompt, vectorised.

Every variant's estimate is ``hat g = sum_i A_i s_i`` (``A`` the pair advantages), so a batch
of ``n`` draws is one ``(n, G) @ (G, d')`` product on the reduced scores ``L``. For the
*linear* variants (``W_ij = J_i J_j w_ij`` with ``w`` fixed by the design: exact HT,
clipped, marginal-only, unweighted) the advantages are bilinear in the mask,

.. math:: A_i(J) = J_i \sum_j J_j C_{ij},

and ``C`` is read off :func:`pairht.estimators.pair_advantages` evaluated on the ``M``
two-vertex masks (so the estimator's formula is never re-implemented here); a numba kernel
then visits only the selected candidates of each draw. Ratio variants (Hajek, observed
average) take ``W`` from :func:`pairht.estimators.edge_weights` on the batched masks and
form ``sum_{i<j} W_ij h_ij`` with ``h`` from :func:`pairht.estimators.pair_kernel` (the
definition of every variant's gradient).

Per-draw quantities (averaged per prompt, then over prompts):

* squared error ``||hat g - g||^2`` (trace MSE) and ``cos(hat g, g)`` (0 when ``hat g = 0``;
  prompts with ``g = 0`` are left out of cosine averages);
* completed vertices ``sum_i J_i``, observed edges (induced ``K (K - 1) / 2`` for vertex
  designs, drawn edges for direct edge sampling), suffix tokens ``sum_i J_i C_i``;
* relative edge weights ``w_e = M W_e`` of the observed edges (1 for the full graph): their
  Kish ESS ``(sum w)^2 / sum w^2`` (as :func:`pairht.estimators.ess`) and maximum.

Standard errors are ``sd / sqrt(n)`` per prompt, combined over independent prompts.
Consistency with the exact moments is tested at level ``alpha``: the mean estimate against
``g + b_exact`` by a Hotelling-type chi-square (sum over prompts of ``n d^T S^+ d``, ``S``
the sample covariance of the draws, degrees of freedom its rank), and every scalar metric
with an exact value by a two-sided z-test.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from scipy import stats

from pairht.audit.base import Plan, is_linear
from pairht.audit.exact import (
    ExactMoments,
    _variant_kwargs,
    conditional_parts,
    cosine,
    difference_baselines,
    edge_terms,
    informative,
)
from pairht.audit.population import Population
from pairht.estimators import (
    difference_advantages,
    edge_weights,
    n_pairs,
    pair_advantages,
    pair_kernel,
)
from pairht.estimators.variants import inverse_on


@dataclass
class Draws:
    """``n`` Monte Carlo replays of one row on one prompt (arrays of length ``n``)."""

    est: np.ndarray  # (n, d') gradient estimates in reduced-score coordinates
    vertices: np.ndarray
    edges: np.ndarray
    tokens: np.ndarray
    ess: np.ndarray  # Kish ESS of the observed edge weights (0 without an edge)
    max_w: np.ndarray  # largest relative weight M W_e of an observed edge (NaN without one)
    sample_seconds: float


@numba.njit(cache=True)
def _matrix_weight_stats(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kish ESS and max over the nonzero upper-triangle entries of each ``W[k]`` (n, G, G)."""
    n, G, _ = W.shape
    ess = np.zeros(n)
    mx = np.full(n, np.nan)
    for k in range(n):
        tot = 0.0
        sq = 0.0
        best = -np.inf
        for i in range(G):
            for j in range(i + 1, G):
                x = W[k, i, j]
                if x != 0.0:
                    tot += x
                    sq += x * x
                    if x > best:
                        best = x
        if sq > 0.0:
            ess[k] = tot * tot / sq
            mx[k] = best
    return ess, mx


@numba.njit(cache=True)
def _bilinear_draws(masks: np.ndarray, C: np.ndarray, L: np.ndarray, w: np.ndarray,
                    costs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per draw: estimate, suffix tokens, and ESS and max of the observed relative weights.

    ``est_k = sum_{i in J_k} A_i L_i`` with ``A_i = sum_{j in J_k} C_ij``; ESS and max over
    the observed edges ``i < j`` of ``w_ij``. One pass over the selected candidates of each
    draw (about ``G/2``): ``O(m^2 + m d)`` per draw, where the dense ``J * (J @ C^T) @ L``
    costs ``O(G^2 + G d)`` and needs ``(n, G)`` temporaries.
    """
    n, G = masks.shape
    d = L.shape[1]
    est = np.zeros((n, d))
    tokens = np.zeros(n)
    ess = np.zeros(n)
    mx = np.full(n, np.nan)
    idx = np.empty(G, dtype=np.int64)
    for k in range(n):
        m = 0
        t = 0.0
        for i in range(G):
            if masks[k, i]:
                idx[m] = i
                m += 1
                t += costs[i]
        tokens[k] = t
        tot = 0.0
        sq = 0.0
        best = -np.inf
        for a in range(m):
            i = idx[a]
            adv = 0.0
            for b in range(m):
                adv += C[i, idx[b]]
            for b in range(a + 1, m):
                x = w[i, idx[b]]
                tot += x
                sq += x * x
                if x > best:
                    best = x
            if adv != 0.0:
                for c in range(d):
                    est[k, c] += adv * L[i, c]
        if sq > 0.0:
            ess[k] = tot * tot / sq
            mx[k] = best
    return est, tokens, ess, mx


@numba.njit(cache=True)
def _rows_times(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x @ y`` skipping zero entries of ``x`` (sparse advantages or edge indicators)."""
    n, G = x.shape
    d = y.shape[1]
    out = np.zeros((n, d))
    for k in range(n):
        for i in range(G):
            v = x[k, i]
            if v != 0.0:
                for c in range(d):
                    out[k, c] += v * y[i, c]
    return out


@numba.njit(cache=True)
def _draw_moments(est: np.ndarray, g: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean and covariance (``ddof = 1``, two-pass) of the draws, and per draw the squared
    error ``||est - g||^2`` and ``cos(est, g)`` (0 when either vector is 0)."""
    n, d = est.shape
    mean = np.zeros(d)
    sq = np.empty(n)
    cos = np.empty(n)
    gn = 0.0
    for c in range(d):
        gn += g[c] * g[c]
    gn = np.sqrt(gn)
    for k in range(n):
        e2 = 0.0
        en = 0.0
        dot = 0.0
        for c in range(d):
            x = est[k, c]
            mean[c] += x
            e2 += (x - g[c]) ** 2
            en += x * x
            dot += x * g[c]
        sq[k] = e2
        den = np.sqrt(en) * gn
        cos[k] = dot / den if den > 0.0 else 0.0
    mean /= n
    cov = np.zeros((d, d))
    dev = np.empty(d)
    for k in range(n):
        for c in range(d):
            dev[c] = est[k, c] - mean[c]
        for a in range(d):
            da = dev[a]
            if da != 0.0:
                for b in range(a, d):
                    cov[a, b] += da * dev[b]
    for a in range(d):
        for b in range(a, d):
            cov[a, b] /= max(n - 1, 1)
            cov[b, a] = cov[a, b]
    return mean, cov, sq, cos


@numba.njit(cache=True)
def _edge_draws(take: np.ndarray, iu: np.ndarray, ju: np.ndarray, y: np.ndarray,
                inv: np.ndarray, costs: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                           np.ndarray]:
    """Direct edge sampling, per draw: estimate ``sum_e I_e y_e``, touched vertices, drawn
    edges, suffix tokens of the touched vertices, and ESS and max of the drawn ``1/q_e``."""
    n, M = take.shape
    G = costs.shape[0]
    d = y.shape[1]
    est = np.zeros((n, d))
    verts = np.zeros(n)
    edges = np.zeros(n)
    tokens = np.zeros(n)
    ess = np.zeros(n)
    mx = np.full(n, np.nan)
    touched = np.zeros(G, dtype=np.bool_)
    for k in range(n):
        touched[:] = False
        tot = 0.0
        sq = 0.0
        best = -np.inf
        cnt = 0
        for e in range(M):
            if take[k, e]:
                cnt += 1
                touched[iu[e]] = True
                touched[ju[e]] = True
                x = inv[e]
                tot += x
                sq += x * x
                if x > best:
                    best = x
                for c in range(d):
                    est[k, c] += y[e, c]
        edges[k] = cnt
        t = 0.0
        v = 0
        for i in range(G):
            if touched[i]:
                v += 1
                t += costs[i]
        verts[k] = v
        tokens[k] = t
        if sq > 0.0:
            ess[k] = tot * tot / sq
            mx[k] = best
    return est, verts, edges, tokens, ess, mx


def pair_coefficients(rewards: np.ndarray, kwargs: dict[str, Any],
                      observed: np.ndarray | None = None) -> np.ndarray:
    r"""``C`` with ``A_i(J) = J_i sum_j J_j C_ij`` for a linear variant, shape ``(G, G)``.

    ``C_ij`` is the advantage of ``i`` when exactly ``{i, j}`` is completed, read from
    :func:`pairht.estimators.pair_advantages` on the ``M`` two-vertex masks; with
    ``observed`` (``(G, G)`` bool), only on the pairs a design can observe (``C_ij = 0`` on
    the others, which its draws never hold).
    """
    G = rewards.shape[0]
    iu, ju = np.triu_indices(G, k=1)
    if observed is not None:
        keep = observed[iu, ju]
        iu, ju = iu[keep], ju[keep]
    masks = np.zeros((iu.size, G), dtype=bool)
    masks[np.arange(iu.size), iu] = True
    masks[np.arange(iu.size), ju] = True
    adv = pair_advantages(rewards, masks, **kwargs)
    C = np.zeros((G, G))
    C[iu, ju] = adv[np.arange(iu.size), iu]
    C[ju, iu] = adv[np.arange(iu.size), ju]
    return C


def _vertex_draws(masks: np.ndarray, est: np.ndarray, tokens: np.ndarray, ess: np.ndarray,
                  max_w: np.ndarray, sample_seconds: float) -> Draws:
    """:class:`Draws` of a vertex design: ``K`` completed vertices induce ``n_pairs(K)`` edges."""
    K = masks.sum(axis=1)
    return Draws(est=est, vertices=K.astype(np.float64), edges=n_pairs(K).astype(np.float64),
                 tokens=tokens, ess=ess, max_w=max_w, sample_seconds=sample_seconds)


def draw_vertex_row(row: Any, plan: Plan, pop: Population, L: np.ndarray, q: int, n: int,
                    rng: np.random.Generator, chunk: int = 4096) -> Draws:
    """``n`` replays of a vertex row on prompt ``q`` (see the module docstring)."""
    assert plan.designs is not None and plan.joint is not None  # vertex rows plan both
    design = plan.designs[q]
    G = pop.group_size
    M = n_pairs(G)
    t0 = time.perf_counter()
    masks = design.sample(rng, size=n)
    sample_seconds = time.perf_counter() - t0
    r = pop.rewards[q]
    kwargs = _variant_kwargs(row.weighting, row.w_max, plan.pi[q], plan.joint[q])
    if is_linear(row.weighting):
        C = pair_coefficients(r, kwargs)
        w = M * edge_weights(np.ones(G, dtype=bool), **kwargs)
        est, tokens, ess, max_w = _bilinear_draws(masks, C, np.ascontiguousarray(L[q]), w,
                                                  plan.cost[q])
    else:
        # Ratio variants: W depends on the whole mask. Their estimate is, by definition,
        # sum_{i<j} W_ij h_ij = (1/2) sum_{i,j} W_ij h_ij, with h from pair_kernel.
        # Draws repeat masks (the support has at most 2**G), so W is evaluated once per
        # distinct mask and the per-draw values are gathered back.
        h = pair_kernel(r, L[q]).reshape(G * G, -1)
        if G <= 62:
            codes = masks.astype(np.int64) @ (np.int64(1) << np.arange(G, dtype=np.int64))
            _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
            distinct = masks[first]
        else:  # pragma: no cover - no int64 code; evaluate every draw
            distinct, inverse = masks, np.arange(n)
        u = distinct.shape[0]
        est_u = np.empty((u, L.shape[2]))
        ess_u = np.empty(u)
        max_u = np.empty(u)
        for lo in range(0, u, chunk):
            W = M * edge_weights(distinct[lo:lo + chunk], **kwargs)
            est_u[lo:lo + chunk] = _rows_times(W.reshape(W.shape[0], G * G), h) / (2.0 * M)
            ess_u[lo:lo + chunk], max_u[lo:lo + chunk] = _matrix_weight_stats(W)
        est, ess, max_w = est_u[inverse.ravel()], ess_u[inverse.ravel()], max_u[inverse.ravel()]
        tokens = _rows_times(masks.astype(np.float64), plan.cost[q][:, None])[:, 0]
    return _vertex_draws(masks, est, tokens, ess, max_w, sample_seconds)


def draw_edge_row(plan: Plan, pop: Population, L: np.ndarray, q: int, n: int,
                  rng: np.random.Generator) -> Draws:
    """``n`` replays of direct edge sampling on prompt ``q``: ``hat g = sum_e I_e h_e/(M q_e)``."""
    iu, ju = np.triu_indices(pop.group_size, k=1)
    assert plan.q is not None  # edge rows always plan q
    qe, y = edge_terms(pop.rewards[q], L[q], plan.q[q])
    t0 = time.perf_counter()
    take = rng.random((n, qe.size)) < qe
    sample_seconds = time.perf_counter() - t0
    est, verts, edges, tokens, ess, max_w = _edge_draws(take, iu, ju, y, 1.0 / qe,
                                                        plan.cost[q])
    return Draws(est=est, vertices=verts, edges=edges, tokens=tokens, ess=ess, max_w=max_w,
                 sample_seconds=sample_seconds)


def draw_conditional_row(row: Any, plan: Plan, pop: Population, L: np.ndarray, q: int,
                         n: int, rng: np.random.Generator) -> Draws:
    """``n`` replays of conditional HT on a :class:`~pairht.designs.MixedSize` design.

    Each draw is weighted as :func:`pairht.audit.exact.conditional_parts` says: with the
    exact HT weights of the component it came from (read off its size), or of the mixture,
    or estimates 0 (small-group GRPO with a single completion).
    """
    assert plan.designs is not None  # vertex rows always plan designs
    design = plan.designs[q]
    t0 = time.perf_counter()
    masks = design.sample(rng, size=n)
    sample_seconds = time.perf_counter() - t0
    parts = conditional_parts(design, row.empty_below_two)
    if len(parts) == 1 and parts[0][1] is design:
        which = np.zeros(n, dtype=np.int64)
        samplers = [design]
    else:
        which = design.component_of(masks)
        samplers = list(design.components)
    r = pop.rewards[q]
    est = np.zeros((n, L.shape[2]))
    tokens = _rows_times(masks.astype(np.float64), plan.cost[q][:, None])[:, 0]
    ess = np.zeros(n)
    max_w = np.full(n, np.nan)
    for _, sampler, weighter in parts:
        sel = which == samplers.index(sampler)
        if weighter is None or not sel.any():
            continue
        joint = weighter.joint()
        # Pairs a component never observes (joint 0) get coefficient and weight 0: its draws
        # never hold them. (The joint itself stays a valid design joint for the estimators.)
        seen = (joint > 0.0) & ~np.eye(joint.shape[-1], dtype=bool)
        C = pair_coefficients(r, {"weighting": "exact", "joint": joint}, observed=seen)
        w = inverse_on(joint, seen)  # M W_ij = 1 / rho_ij
        est[sel], _, ess[sel], max_w[sel] = _bilinear_draws(
            np.ascontiguousarray(masks[sel]), C, np.ascontiguousarray(L[q]), w, plan.cost[q])
    return _vertex_draws(masks, est, tokens, ess, max_w, sample_seconds)


def draw_difference_row(plan: Plan, pop: Population, L: np.ndarray, q: int, n: int,
                        rng: np.random.Generator, chunk: int = 4096) -> Draws:
    """``n`` replays of a difference-estimator row on prompt ``q``: ``sum_i A_i L_i`` with
    ``A`` from :func:`pairht.estimators.difference.difference_advantages` (the predictions as
    baselines); tokens and edge-weight statistics as the HT row on the same design."""
    assert plan.designs is not None and plan.joint is not None  # vertex rows plan both
    G, M = pop.group_size, n_pairs(pop.group_size)
    t0 = time.perf_counter()
    masks = plan.designs[q].sample(rng, size=n)
    sample_seconds = time.perf_counter() - t0
    r = pop.rewards[q]
    kwargs = _variant_kwargs("exact", None, plan.pi[q], plan.joint[q])
    w = M * edge_weights(np.ones(G, dtype=bool), **kwargs)
    _, tokens, ess, max_w = _bilinear_draws(masks, pair_coefficients(r, kwargs),
                                            np.ascontiguousarray(L[q]), w, plan.cost[q])
    base = difference_baselines(pop)[q]
    est = np.empty((n, L.shape[2]))
    for lo in range(0, n, chunk):
        m = masks[lo:lo + chunk]
        est[lo:lo + chunk] = difference_advantages(np.where(m, r, 0.0), m, plan.joint[q],
                                                   base) @ L[q]
    return _vertex_draws(masks, est, tokens, ess, max_w, sample_seconds)


def draw_two_stage_row(plan: Plan, pop: Population, L: np.ndarray, q: int, n: int,
                       rng: np.random.Generator) -> Draws:
    """``n`` replays of a two-stage row on prompt ``q``: a uniform subset per draw (the
    multinomial counts of ``n`` uniform picks), then the inner row's replay on it.

    The estimates are the inner row's estimates of the subsets' pair averages, in the
    population's coordinates (:class:`pairht.audit.two_stage.TwoStage` keeps them there), so
    they are draws of the two-stage estimator of prompt ``q``'s target."""
    ts = plan.stages
    counts = rng.multinomial(n, np.full(ts.n_subsets, 1.0 / ts.n_subsets))
    parts = [row_draws(ts.inner, ts.plan, ts.sub, ts.L, q * ts.n_subsets + s, int(k), rng)
             for s, k in enumerate(counts) if k]

    def cat(field: str) -> np.ndarray:
        return np.concatenate([getattr(d, field) for d in parts])

    return Draws(est=cat("est"), vertices=cat("vertices"), edges=cat("edges"),
                 tokens=cat("tokens"), ess=cat("ess"), max_w=cat("max_w"),
                 sample_seconds=sum(d.sample_seconds for d in parts))


def row_draws(row: Any, plan: Plan, pop: Population, L: np.ndarray, q: int, n: int,
              rng: np.random.Generator) -> Draws:
    """``n`` replays of any row on prompt ``q``, by the estimator it declares."""
    if row.estimator == "two_stage":
        return draw_two_stage_row(plan, pop, L, q, n, rng)
    if row.estimator == "difference":
        return draw_difference_row(plan, pop, L, q, n, rng)
    if row.estimator == "edge":
        return draw_edge_row(plan, pop, L, q, n, rng)
    if row.estimator == "conditional_ht":
        return draw_conditional_row(row, plan, pop, L, q, n, rng)
    return draw_vertex_row(row, plan, pop, L, q, n, rng)


@dataclass
class PromptSummary:
    """Means, variances and the chi-square contribution of one prompt's draws."""

    n: int
    mean_est: np.ndarray
    sq_err: tuple[float, float]  # (mean, variance) of ||hat g - g||^2
    cos: tuple[float, float]
    vertices: tuple[float, float]
    edges: tuple[float, float]
    tokens: tuple[float, float]
    ess: float
    ess_ratio: float
    max_w_mean: float
    max_w_max: float
    chi2: float
    df: int
    exact_mismatch: bool
    sample_seconds: float


def _mv(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.var(ddof=1)) if x.size > 1 else 0.0


def summarise(d: Draws, g: np.ndarray, exact_mean: np.ndarray | None) -> PromptSummary:
    """Per-prompt summary of ``d`` against target ``g`` and exact mean ``g + b`` (or None)."""
    n = d.est.shape[0]
    mean, cov, sq, cos = _draw_moments(np.ascontiguousarray(d.est), g)
    chi2, df, mismatch = 0.0, 0, False
    if exact_mean is not None:
        delta = mean - exact_mean
        lam, vec = np.linalg.eigh(cov)
        scale = max(float(np.abs(d.est).max(initial=0.0)), float(np.abs(exact_mean).max()),
                    1e-300)
        # Directions whose spread is rounding noise (sd below 1e-10 of the largest estimate,
        # or below 1e-6 of the largest sd) carry no information: the estimate is constant
        # there and must equal the exact mean to rounding.
        floor = max(1e-12 * float(lam[-1]), (1e-10 * scale) ** 2)
        keep = lam > floor
        proj = vec.T @ delta
        df = int(keep.sum())
        chi2 = float(n * np.sum(proj[keep] ** 2 / lam[keep]))
        mismatch = bool(np.any(np.abs(proj[~keep]) > 1e-8 * scale))
    has_edge = d.ess > 0
    ess = float(d.ess[has_edge].mean()) if has_edge.any() else 0.0
    ratio = float((d.ess[has_edge] / d.edges[has_edge]).mean()) if has_edge.any() else 0.0
    return PromptSummary(
        n=n, mean_est=mean, sq_err=_mv(sq), cos=_mv(cos),
        vertices=_mv(d.vertices), edges=_mv(d.edges), tokens=_mv(d.tokens), ess=ess,
        ess_ratio=ratio,
        max_w_mean=float(np.nanmean(d.max_w)) if has_edge.any() else float("nan"),
        max_w_max=float(np.nanmax(d.max_w)) if has_edge.any() else float("nan"),
        chi2=chi2, df=df, exact_mismatch=mismatch, sample_seconds=d.sample_seconds,
    )


def mc_summary(per_prompt: list[PromptSummary], g: np.ndarray, pop: Population,
               mom: ExactMoments | None, exact: dict[str, float],
               alpha: float, plan: Plan) -> tuple[dict[str, float], list[str]]:
    """Aggregate prompt summaries; test them against the exact metrics at level ``alpha``.

    Returns ``(metrics, flags)``: metrics ``*_mc`` and ``*_mc_se`` (see
    :func:`pairht.audit.exact.exact_summary` for the aggregation over prompts), ``cos_mc``
    (mean over informative prompts of ``E[cos(hat g, g)]``), ``cos_mean_mc`` (cosine of the
    mean estimate), ``bias_mc = mean_q ||mean_est_q - g_q||`` and ``bias_pvalue``; flags name
    each failed test.
    """
    P = len(per_prompt)
    n = per_prompt[0].n
    keep = informative(g)
    mean_est = np.stack([s.mean_est for s in per_prompt])
    out: dict[str, float] = {
        "bias_mc": float(np.linalg.norm(mean_est - g, axis=1).mean()),
        "cos_mean_mc": float(cosine(mean_est, g)[keep].mean()) if keep.any() else float("nan"),
    }

    def agg(name: str, scale: float, subset: np.ndarray | None = None) -> None:
        rows = [s for s, k in zip(per_prompt, subset if subset is not None else [True] * P) if k]
        if not rows:
            out[f"{name}_mc"] = out[f"{name}_mc_se"] = float("nan")
            return
        m = np.array([getattr(s, name)[0] for s in rows])
        v = np.array([getattr(s, name)[1] for s in rows])
        out[f"{name}_mc"] = float(m.sum() / scale)
        out[f"{name}_mc_se"] = float(np.sqrt(v.sum() / n) / scale)

    agg("sq_err", P)
    out["mse_mc"], out["mse_mc_se"] = out.pop("sq_err_mc"), out.pop("sq_err_mc_se")
    agg("cos", int(keep.sum()), keep)
    agg("vertices", P)
    agg("edges", P)
    agg("tokens", float(plan.token_scale))
    out["ess_mc"] = float(np.mean([s.ess for s in per_prompt]))
    out["ess_ratio_mc"] = float(np.mean([s.ess_ratio for s in per_prompt]))
    out["max_weight_mc"] = float(np.nanmean([s.max_w_mean for s in per_prompt]))
    out["max_weight_max"] = float(np.nanmax([s.max_w_max for s in per_prompt]))
    flags: list[str] = []
    z_crit = float(stats.norm.isf(alpha / 2.0))
    for name in ("mse", "vertices", "edges", "tokens"):
        ex, mc, se = exact.get(f"{name}_exact", np.nan), out[f"{name}_mc"], out[f"{name}_mc_se"]
        # Differences at float64 rounding level (sums of ~1e5 terms) are not evidence.
        slack = 1e-12 * max(abs(ex), 1.0) if np.isfinite(ex) else 0.0
        gap = max(abs(mc - ex) - slack, 0.0)
        z = gap / se * np.sign(mc - ex) if se > 0 else (0.0 if gap == 0.0 else np.inf)
        out[f"{name}_z"] = float(z) if np.isfinite(ex) else float("nan")
        if np.isfinite(ex) and abs(z) > z_crit:
            flags.append(f"{name}: MC {mc:.6g} vs exact {ex:.6g} (z = {z:.2f})")
    out["bias_pvalue"] = float("nan")
    if mom is not None and mom.bias is not None:
        chi2 = sum(s.chi2 for s in per_prompt)
        df = sum(s.df for s in per_prompt)
        p = float(stats.chi2.sf(chi2, df)) if df > 0 else 1.0
        if any(s.exact_mismatch for s in per_prompt):
            p = 0.0
        out["bias_pvalue"] = p
        if p < alpha:
            flags.append(f"bias: MC mean inconsistent with exact bias (chi2 = {chi2:.1f}, "
                         f"df = {df}, p = {p:.2g})")
    return out, flags
