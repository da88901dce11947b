r"""The paper's regime: long answers, a short prefix, many zero-variance prompts.

:func:`paper_regime_population` draws a frozen population in the regime the PAIR paper is
written for (reasoning-length answers of about 600-8,000 tokens, a prefix of ``tau = 256``
tokens, i.e. a 5-20% share of a typical answer, 40% of the prompts near all-fail or
all-pass with rare successes) with the predictor's *within-prompt* skill as a parameter,
from none (the heads know only the prompt's difficulty) to strong; hindsight-perfect
predictions are :func:`pairht.audit.with_predictions` ``(pop, "hindsight")``.

Run as a script it prints, per budget, a markdown table of every audit row's exact MSE
relative to the best baseline (usually small-group GRPO) on the same outcomes seen by each
predictor (docs/audit.md, "The paper's regime")::

    python benchmarks/paper_regime.py             # 2 seeds x 128 prompts x G = 16 (~25 CPU-min)
    python benchmarks/paper_regime.py --quick     # 12 prompts x G = 8, budget 0.5 (CI)
    python benchmarks/paper_regime.py --rows pair_strata pair_cps   # more rows

The row ``default`` (what PAIR runs by default) comes first.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # run as a script from anywhere: audit_tables' table printer
    sys.path.insert(0, HERE)

#: Named predictor skills: the correlation ``s`` between the latent within-prompt signals
#: (success and length) and what the prefix heads see of them (see the generator).
SKILLS: dict[str, float] = {"none": 0.0, "realistic": 0.7, "strong": 0.9}
#: Columns of the table: the named skills, then hindsight-perfect predictions.
COLUMNS = (*SKILLS, "hindsight")
#: Audit rows of the table: what PAIR runs by default first, then the baselines, PAIR's rules
#: and the comparators.
ROW_KEYS = ("default", "grpo_small", "uniform_ht", "srswor", "pointwise_ht", "pair", "pair_width",
            "pair_batch", "pair_joint", "pair_dr", "pair_dr_narrow", "vip", "hora", "duet")
#: Median answer length (tokens) and the clip of answer lengths.
MEDIAN_LENGTH = 1800.0
LENGTH_RANGE = (600.0, 8000.0)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


def _centre(rate: np.ndarray, sd: float) -> np.ndarray:
    """The logit ``m`` with ``E sigmoid(m + sd Z) = rate``, ``Z ~ N(0, 1)`` (Gauss-Hermite
    quadrature, bisection on ``m``; the mean is increasing in ``m``)."""
    x, w = np.polynomial.hermite_e.hermegauss(48)
    w = w / w.sum()
    lo, hi = np.full(rate.shape, -40.0), np.full(rate.shape, 40.0)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        low = _sigmoid(mid[..., None] + sd * x) @ w < rate
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    return 0.5 * (lo + hi)


def skill_value(skill: float | str) -> float:
    """The number of a skill: a name of :data:`SKILLS` or a float in [0, 1]."""
    if isinstance(skill, str) and skill in SKILLS:
        return SKILLS[skill]
    number = isinstance(skill, (int, float, np.integer, np.floating)) \
        and not isinstance(skill, bool)
    if number and 0.0 <= float(skill) <= 1.0:  # NaN fails the comparison
        return float(skill)
    raise ValueError(f"skill must be one of {tuple(SKILLS)} or a number in [0, 1]; got {skill!r}")


def paper_regime_population(
    n_prompts: int, G: int = 16, *,
    skill: float | str = "realistic", tau: int = 256, extreme_share: float = 0.4,
    within_sd: float = 2.0, prompt_noise: float = 0.5, failure_length: float = 0.3,
    score_dim: int = 32, score_reward_corr: float = 0.5,  # as synthetic_population's scores
    rng: Any = None,
) -> Any:
    r"""A frozen population in the paper's regime, with the predictor's skill as a parameter.

    Generative model, for prompt ``q`` and candidate ``i``. Every outcome (rewards, lengths,
    scores) and every noise draw is taken in the same order whatever ``skill`` is, so one
    ``rng`` seed gives the *same* candidates seen by predictors of different skill:

    * prompt kind: near all-fail with probability ``extreme_share / 2``, near all-pass with
      probability ``extreme_share / 2``, mixed otherwise; base rate ``rate_q ~ Beta(0.5,
      16)`` (mean 0.03), ``Beta(16, 0.5)`` (mean 0.97) or ``U(0.1, 0.9)``.
    * within-prompt success signal ``z_qi ~ N(0, 1)``; true success probability given the
      prefix ``p_qi = sigmoid(m_q + within_sd z_qi)`` with ``m_q`` such that ``E_z p_qi =
      rate_q``; reward ``r ~ Bernoulli(p)``. About 30% of the prompts have all ``G = 16``
      rewards equal and 41% at most one minority outcome (a rare success or failure).
    * answer length ``L_qi = clip(1800 exp(u_q + 0.35 a_qi + 0.35 e_qi + failure_length
      (1/2 - r_qi)), 600, 8000)`` with ``u_q ~ N(0, 0.35^2)`` (the prompt's length), the
      prefix-visible length signal ``a ~ N(0, 1)`` and the invisible ``e ~ N(0, 1)``:
      median about 1,800 tokens, failing answers ``exp(failure_length)`` times longer.
    * prefix ``prefix_len = tau + U{0..15}`` (snapping to a line end); no prefix finishes
      (``L >= 600 > tau + 15``, needs ``tau <= 584``); suffix tokens ``C = L - prefix_len``.
    * predictions of skill ``s`` (:data:`SKILLS`: ``none`` 0, ``realistic`` 0.7, ``strong``
      0.9): the heads see each latent signal through noise, ``z~ = s z + sqrt(1 - s^2) n``
      and ``a~ = s a + sqrt(1 - s^2) n'`` (correlation ``s``), and know the prompt's rate
      and length up to noise, ``eta_q, eta'_q ~ N(0, prompt_noise^2)``:
      ``p_hat = sigmoid(m_q + eta_q + within_sd s z~)`` (``s z~ = E[z | z~]``)
      and ``c_hat = L_hat - prefix_len`` with ``L_hat = clip(1800 exp(u_q + 0.3 eta'_q
      + 0.35 s a~ + failure_length (1/2 - p_hat) + v / 2), 600, 8000)``, ``v = 0.35^2 (2 -
      s^2)`` (the unexplained log-length variance: ``L_hat`` estimates a mean). ``s = 0``:
      no within-prompt skill (every candidate of a prompt gets the same ``p_hat``); ``s =
      1``: the true ``p_qi`` up to the prompt-level noise. Within-prompt Brier skill and AUC
      (:func:`pairht.audit.predictions.within_prompt_skill`) on a large draw: 0 and 0.5
      (none), 0.14 and 0.76 (realistic), 0.26 and 0.83 (strong), 0.33 and 0.87 (``s = 1``).
    * scores on a ``score_dim`` parameter block, as in
      :func:`pairht.audit.synthetic_population`: ``s_qi = sqrt(L_qi / 1800) (e_qi / sqrt(d)
      + score_reward_corr (r_qi - rbar_q) w_q)``, ``e ~ N(0, I_d)``, unit ``w_q``; ``m_hat =
      sqrt(L_hat / 1800)``.

    Parameters
    ----------
    n_prompts, G : int
        Prompts ``P >= 1`` and candidates per prompt ``G >= 2``.
    skill : str or float
        A name of :data:`SKILLS` or ``s`` in [0, 1].
    tau : int
        Prefix checkpoint, 0 <= tau <= 584 (so that no prefix finishes).
    extreme_share : float
        Share of near all-fail plus near all-pass prompts, in [0, 1].
    within_sd, prompt_noise, failure_length : float
        Spread of the within-prompt success logit, noise of the prompt-level estimates,
        log-length gap of failing answers (each finite, >= 0).
    score_dim : int
        Parameter-block size ``d >= 1``.
    score_reward_corr : float
        Weight of the reward-aligned score component (finite).
    rng : int, Generator or None

    Returns
    -------
    Population
        ``meta["source"] = "benchmarks/paper_regime.py"`` with every argument.

    Raises
    ------
    ValueError
        Naming the argument, for any value outside its range.

    Examples
    --------
    >>> pop = paper_regime_population(4, 8, skill="none", rng=0)
    >>> pop.p_hat.shape, bool((pop.p_hat == pop.p_hat[:, :1]).all())
    ((4, 8), True)
    """
    from pairht._validation import as_generator
    from pairht.audit import Population

    for name, value, lo, hi in (("n_prompts", n_prompts, 1, None), ("G", G, 2, None),
                                ("tau", tau, 0, 584), ("score_dim", score_dim, 1, None)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo \
                or (hi is not None and value > hi):
            rng_txt = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise ValueError(f"{name} must be an int {rng_txt}; got {value!r}")
    s = skill_value(skill)
    for name, x in (("extreme_share", extreme_share), ("within_sd", within_sd),
                    ("prompt_noise", prompt_noise), ("failure_length", failure_length),
                    ("score_reward_corr", score_reward_corr)):
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
                or not np.isfinite(x) or (x < 0 and name != "score_reward_corr"):
            raise ValueError(f"{name} must be a finite number"
                             f"{'' if name == 'score_reward_corr' else ' >= 0'}; got {x!r}")
    if extreme_share > 1:
        raise ValueError(f"extreme_share must lie in [0, 1]; got {extreme_share!r}")
    gen = as_generator(rng)
    P, d = int(n_prompts), int(score_dim)
    # Outcomes.
    kind = gen.random(P)
    fail, passing = kind < extreme_share / 2, (kind >= extreme_share / 2) & (kind < extreme_share)
    rate = np.where(fail, gen.beta(0.5, 16.0, P),
                    np.where(passing, gen.beta(16.0, 0.5, P), gen.uniform(0.1, 0.9, P)))
    rate = np.clip(rate, 1e-6, 1.0 - 1e-6)[:, None]
    z = gen.normal(size=(P, G))
    centre = _centre(rate, within_sd)
    p_true = _sigmoid(centre + within_sd * z)
    r = (gen.random((P, G)) < p_true).astype(np.float64)
    u = gen.normal(0.0, 0.35, (P, 1))
    a, e = gen.normal(size=(P, G)), gen.normal(size=(P, G))
    lo_len, hi_len = LENGTH_RANGE
    length = np.clip(MEDIAN_LENGTH * np.exp(u + 0.35 * a + 0.35 * e
                                            + failure_length * (0.5 - r)), lo_len, hi_len)
    length = np.round(length)
    plen = tau + gen.integers(0, 16, (P, G))
    costs = length - plen
    w = gen.normal(size=(P, 1, d))
    w /= np.linalg.norm(w, axis=2, keepdims=True)
    eps = gen.normal(size=(P, G, d)) / np.sqrt(d)
    contrast = (r - r.mean(axis=1, keepdims=True))[:, :, None]
    scores = np.sqrt(length / MEDIAN_LENGTH)[:, :, None] * (eps + score_reward_corr * contrast * w)
    # Predictions: the same noise draws at every skill.
    eta, eta_c = gen.normal(0.0, prompt_noise, (P, 1)), gen.normal(0.0, prompt_noise, (P, 1))
    n_z, n_a = gen.normal(size=(P, G)), gen.normal(size=(P, G))
    keep = np.sqrt(1.0 - s * s)
    z_seen, a_seen = s * z + keep * n_z, s * a + keep * n_a
    p_hat = _sigmoid(centre + eta + within_sd * s * z_seen)
    unexplained = 0.35**2 * (2.0 - s * s)
    len_hat = np.clip(MEDIAN_LENGTH * np.exp(u + 0.3 * eta_c + 0.35 * s * a_seen
                                             + failure_length * (0.5 - p_hat)
                                             + unexplained / 2), lo_len, hi_len)
    meta = {"source": "benchmarks/paper_regime.py", "n_prompts": P, "G": int(G),
            "skill": skill if isinstance(skill, str) else float(s), "skill_value": s,
            "tau": int(tau), "extreme_share": float(extreme_share),
            "within_sd": float(within_sd), "prompt_noise": float(prompt_noise),
            "failure_length": float(failure_length), "score_dim": d,
            "score_reward_corr": float(score_reward_corr)}
    return Population(p_hat=p_hat, c_hat=len_hat - plen, rewards=r, costs=costs,
                      prefix_len=plen, scores=scores, m_hat=np.sqrt(len_hat / MEDIAN_LENGTH),
                      meta=meta)


def pooled(pops: list[Any]) -> Any:
    """The populations of ``pops`` (same ``G``) as one, prompts concatenated."""
    from pairht.audit import Population

    if len(pops) == 1:
        return pops[0]
    fields = ("p_hat", "c_hat", "rewards", "costs", "prefix_len", "scores", "m_hat")
    return Population(**{k: np.concatenate([getattr(p, k) for p in pops]) for k in fields},
                      meta=dict(pops[0].meta))


def populations(n_prompts: int, G: int, *, tau: int, seed: int) -> dict[str, Any]:
    """One population per column of the table (:data:`COLUMNS`), all from ``seed``: the same
    candidates, seen by predictors of each named skill and in hindsight."""
    from pairht.audit import with_predictions

    out = {name: paper_regime_population(n_prompts, G, skill=name, tau=tau, rng=seed)
           for name in SKILLS}
    out["hindsight"] = with_predictions(out["none"], "hindsight")
    return out


def _merged(results: list[Any]) -> Any:
    """One :class:`~pairht.audit.AuditResult` whose per-prompt exact MSEs are those of every
    audit in ``results`` (populations of different seeds), prompts concatenated."""
    from pairht.audit import AuditResult

    if len(results) == 1:
        return results[0]
    rows = []
    for row in results[0].rows:
        parts = [res.row(row.key) for res in results]
        merged = dataclasses.replace(row, per_prompt={}, metrics={})
        if all(p.ok and "mse_exact" in p.per_prompt for p in parts):
            merged.per_prompt["mse_exact"] = np.concatenate(
                [p.per_prompt["mse_exact"] for p in parts])
        elif not all(p.ok for p in parts):
            merged.status = next(p.status for p in parts if not p.ok)
        rows.append(merged)
    return AuditResult(rows=rows, config=results[0].config, population={})


def table_cells(pops: list[Any], budget: float, keys: list[str], *, n_boot: int,
                seed: int = 0) -> tuple[dict[str, tuple[float, float, float]], str, float]:
    """Every row's ``(ratio, low, high)`` against the best baseline at ``budget``, over the
    prompts of all ``pops`` (one audit each: a batch-level row budgets one population).

    Returns ``(cells, best_baseline_key, best_baseline_mean_mse)``.
    """
    from audit_tables import ratio_cells
    from pairht.audit import BASELINE_ROWS, AuditConfig, run_audit

    cfg = AuditConfig(budget_ratio=budget, seed=seed)
    res = _merged([run_audit(p, rows=keys, config=cfg, n_draws=0) for p in pops])
    return ratio_cells(res, tuple(k for k in BASELINE_ROWS if k in keys), n_boot=n_boot,
                       seed=seed)


def describe(pops: list[Any]) -> str:
    """The population's regime in one line: what the tests check, measured on ``pops``."""

    pop = pooled(pops)
    r, length = pop.rewards, pop.costs + pop.prefix_len
    share = pop.prefix_len / length
    minority = np.minimum(r.sum(axis=1), r.shape[1] - r.sum(axis=1))
    return (f"success rate {r.mean():.2f}; prompts with all rewards equal "
            f"{np.mean(minority == 0):.2f}, with at most one minority outcome "
            f"{np.mean(minority <= 1):.2f}; answer length median {np.median(length):.0f} "
            f"tokens (5-95%: {np.quantile(length, 0.05):.0f}-{np.quantile(length, 0.95):.0f}); "
            f"prefix share median {np.median(share):.3f}")


def row_keys(extra: list[str] | None = None) -> list[str]:
    """:data:`ROW_KEYS` plus ``extra``; registered rows only, each once."""
    from pairht.audit import ROWS

    keys = [*ROW_KEYS, *(extra or [])]
    unknown = [k for k in (extra or []) if k not in ROWS]
    if unknown:
        raise ValueError(f"--rows: unknown audit rows {unknown}; registered: {list(ROWS)}")
    return [k for k in dict.fromkeys(keys) if k in ROWS]


def main(argv: list[str] | None = None) -> int:
    from audit_tables import print_table
    from pairht.audit.predictions import within_prompt_skill

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budgets", type=float, nargs="+", default=None,
                    help="budget ratios (default 0.25 0.5; --quick: 0.5)")
    ap.add_argument("--prompts", type=int, default=None, help="prompts per population "
                    "(default 128; --quick: 12)")
    ap.add_argument("--G", type=int, default=None, help="candidates per prompt (default 16; "
                    "--quick: 8)")
    ap.add_argument("--tau", type=int, default=256)
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="population seeds, prompts pooled (default 0 1; --quick: 0)")
    ap.add_argument("--rows", nargs="+", default=[], help="audit rows added to the table")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--quick", action="store_true",
                    help="12 prompts x G = 8, one seed, budget 0.5 (seconds; CI)")
    args = ap.parse_args(argv)
    quick = {"budgets": [0.5], "prompts": 12, "G": 8, "seeds": [0]}
    full = {"budgets": [0.25, 0.5], "prompts": 128, "G": 16, "seeds": [0, 1]}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    keys = row_keys(args.rows)
    t0 = time.perf_counter()
    per_seed = [populations(args.prompts, args.G, tau=args.tau, seed=s) for s in args.seeds]
    cols = {name: [pops[name] for pops in per_seed] for name in COLUMNS}
    print(f"Population: {len(args.seeds)} x {args.prompts} prompts x G = {args.G}, "
          f"tau = {args.tau}; {describe(cols['none'])}.")
    skills = []
    for name in COLUMNS:
        m = within_prompt_skill(pooled(cols[name]))
        skills.append(f"{name} (s = {SKILLS.get(name, 'n/a')}): Brier {m['brier']:.2f}, "
                      f"AUC {m['auc']:.2f}")
    print("Within-prompt skill of p_hat: " + "; ".join(skills) + ".")
    for b in args.budgets:
        tb = time.perf_counter()
        table, foot = {}, []
        for name in COLUMNS:
            cells, best, best_mse = table_cells(cols[name], b, keys, n_boot=args.n_boot)
            table[name] = cells
            foot.append(f"{name}: best baseline {best} (mean exact MSE {best_mse:.4g})")
        print(f"\n### Budget {b}: exact MSE / best baseline's, 95% bootstrap over prompts\n")
        print_table(table, foot)
        print(f"(budget {b}: {time.perf_counter() - tb:.0f} s)", file=sys.stderr)
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
