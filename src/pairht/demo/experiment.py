r"""The compute-matched comparison: PAIR against what a user would run instead, over seeds.

``pairht experiment`` / ``python benchmarks/compute_matched.py`` trains the same warm-started
tiny policy with every *arm* on the same prompts, verifier, optimiser and token accounting, for
several seeds, and writes a markdown report with figures:

* ``grpo`` -- full-group Dr. GRPO (unstandardised, one epoch: the RLOO update), G candidates;
* ``grpo_small`` -- the same with ``G'`` candidates, ``G'`` chosen so its generated tokens match
  PAIR's *total* generated tokens (PAIR's prefix tokens counted) in the same seed;
* ``pair`` -- :class:`pairht.trl.PairGRPOTrainer`, exact mode, its default design;
* ``pair_fixed`` -- the same with a fixed-size design (conditional Poisson);
* further arms that need only :class:`~pairht.trl.PairGRPOConfig` options, registered in
  :data:`ARMS`: ``uniform``, ``pointwise``, ``adaptive_unweighted``, ``pair_skill_shrink``,
  and the paper's comparators as allocators of the
  same step (``vip``, ``hora``, ``duet``, ``dppo``; :mod:`pairht.comparators`) and
  ``pair_joint`` (one budget across prompts and within groups), ``pair_strata`` (the
  heads' predicted successes and failures as strata) and ``pair_dr`` (the difference
  estimator at Neyman's allocation), and ``pair_dr_narrow`` (the same on a uniform subset of
  candidates only, ``width="subset"`` at the audit's width rule). They run in the same trainer,
  with the same prefix phase, budget ratio and token accounting as ``pair``.

Reported per arm (mean over seeds, with 95% intervals from a paired bootstrap over seeds and
held-out prompts): final held-out accuracy and its difference to ``grpo``; generated tokens and
training wall-clock; the area under accuracy-vs-tokens over the token range every arm reached
(the mean accuracy an arm holds while spending the same tokens); tokens and seconds to a fixed
accuracy. The report ranks the arms at *equal generated tokens*: held-out accuracy read off
each run's curve at the fewest tokens any run spent, with 95% intervals over seeds, and gives
each arm's per-step time split. The default task is the long chains of
:mod:`pairht.demo.chain` (``chain_long``: responses of 64-124 tokens, ``tau = 8``): no
candidate ends inside the prefix and a first-line slip, which the prefix shows, decides most
failures.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from pairht.comparators import COMPARATORS
from pairht.demo import demo, toy
from pairht.demo.tasks import RunSettings, get_task
from pairht.demo.warm_cache import warm_model
from pairht.step import ALLOCATORS

__all__ = ["ARMS", "COMPARATOR_ARMS", "Arm", "ArmRun", "ExperimentResult", "run_experiment"]


@dataclass(frozen=True)
class Arm:
    """One arm: a plain GRPO run (``kind="grpo"``, ``matched`` = group size chosen to match
    PAIR's tokens) or a ``PairGRPOTrainer`` run with extra config ``options``."""

    kind: str
    options: dict[str, Any] = field(default_factory=dict)
    matched: bool = False
    description: str = ""


def _allocator_arms(**descriptions: str) -> dict[str, Arm]:
    """Arms that run PAIR's trainer with one continuation rule each, named for the rule
    (checked against :data:`pairht.step.ALLOCATORS`, the registry of rules)."""
    return {name: Arm("pair", {"allocator": ALLOCATORS.check("arm", name)}, description=text)
            for name, text in descriptions.items()}


#: The registry of arms: the only source of arm names (CLI, report, tests).
ARMS: dict[str, Arm] = {
    "grpo": Arm("grpo", description="full-group Dr. GRPO (RLOO update), G candidates"),
    "grpo_small": Arm(
        "grpo", matched=True,
        description="Dr. GRPO with G' candidates, G' matching PAIR's total generated tokens",
    ),
    "default": Arm(
        "pair", {"width": "auto"},
        description="PAIR's default (width 'auto'): small-group GRPO or the difference "
                    "estimator at a narrower or full prefix width, chosen from the run's own "
                    "audits (their tokens counted)",
    ),
    "pair": Arm("pair", description="PAIR, exact mode, default design, prefixes for all G"),
    "pair_fixed": Arm(
        "pair", {"design": "conditional_poisson"},
        description="PAIR, exact mode, fixed-size conditional Poisson design named explicitly "
                    "(the trainer's default design: the same run as 'pair')",
    ),
    "pair_skill_shrink": Arm(
        "pair", {"shrink_by": "skill"},
        description="PAIR with predictions shrunk by the heads' Brier skill / R^2 (the default "
                    "before the reliability slope): shows what the slope changed",
    ),
    **_allocator_arms(
        uniform="uniform continuation among unfinished candidates (finished kept free)",
        pointwise="pointwise p(1-p) continuation probabilities",
    ),
    # The same update as exact mode (one epoch, Dr. GRPO loss, no standardisation, no KL: the
    # shared settings) with weights 1/M on the observed pairs; mode="exact" refuses a biased
    # weighting, so it runs as "practical" with those settings.
    "adaptive_unweighted": Arm(
        "pair", {"mode": "practical", "weighting": "unweighted"},
        description="PAIR's design, observed pairs weighted 1/M (no inverse inclusion "
                    "probabilities: biased toward the continued candidates)",
    ),
    # The paper's comparators (issue 16), same trainer and token accounting; the prompt-level
    # rules read the trainer's per-prompt history of observed rewards (pairht.torch.history).
    **_allocator_arms(
        vip="VIP: GP-predicted success, variance-minimising group sizes (SRSWOR)",
        hora="HORA: rollouts maximising posterior hit utility (SRSWOR)",
        duet="DUET phase 1: rollouts proportional to pbar(1-pbar) (SRSWOR; no abort)",
        dppo="DPPO: every candidate completed, then pruned after rewards with "
             "inverse-keep-probability weights (saves update compute, not generation)",
        pair_joint="PAIR with one budget split across prompts, then PAIR within each group",
        pair_strata="PAIR's predicted successes and failures as two strata, SRSWOR within "
                    "each at Neyman's sizes (the audit's best rule on the long chains at "
                    "budget 0.5)",
        pair_dr="the difference estimator (HT advantages with the heads' predictions as "
                "baselines) at Neyman's allocation, one budget for the batch",
    ),
    # prefix_group_size NARROW: resolved per seed by _narrow_size (the audit's width rule on
    # a pilot's lengths), since G' depends on the task's lengths
    "pair_dr_narrow": Arm(
        "pair", {"width": "subset", "allocator": "pair_dr", "prefix_group_size": "narrow"},
        description="pair_dr on a uniform subset of candidates only (width 'subset'), its "
                    "size the audit's narrow_width: half way from G to the G' of small-group "
                    "GRPO at the same tokens (G' from a pilot's mean length)",
    ),
}

#: The placeholder of ``prefix_group_size`` an arm resolves per seed (:func:`_narrow_size`).
NARROW = "narrow"

#: The comparator arms (``--arms comparators`` in the CLI): the arms of :data:`ARMS` whose
#: allocator is one of :data:`pairht.comparators.COMPARATORS`, in :data:`ARMS` order.
COMPARATOR_ARMS = tuple(name for name, arm in ARMS.items()
                        if arm.options.get("allocator") in COMPARATORS)

#: What ``pairht experiment`` runs without ``--arms``: full and small-group GRPO, PAIR, and the
#: two prefix baselines a user would try (uniform among unfinished, PAIR's design unweighted).
#: ``pair_fixed`` is left out: with the fixed-size default it is the same run as ``pair``.
DEFAULT_ARMS = ("grpo", "grpo_small", "pair", "uniform", "adaptive_unweighted")


@dataclass
class ArmRun:
    """One (arm, seed) training run: its curve and per-prompt final held-out success."""

    arm: str
    seed: int
    group_size: int
    result: demo.MethodResult
    final_by_item: list[float]


@dataclass
class ExperimentResult:
    """All runs, the summary rows, and where the report and figures went."""

    runs: list[ArmRun]
    summary: list[dict[str, Any]]
    report_path: Path
    figure_paths: list[Path]
    settings: dict[str, Any]


def _check_arms(arms: Sequence[str]) -> list[str]:
    arms = list(arms)
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        raise ValueError(f"arms must be a non-empty subset of {sorted(ARMS)}; got {arms!r}")
    if "grpo_small" in arms and not any(ARMS[a].kind == "pair" for a in arms):
        raise ValueError("arms: grpo_small matches PAIR's tokens, so a PAIR arm must run too")
    return arms


def _bootstrap(values: np.ndarray, n: int, seed: int) -> tuple[float, float]:
    """Percentile 95% interval of the mean over the leading two axes (seeds, prompts),
    resampling seeds and, within each, prompts (paired: the same indices for every arm).

    Hand-written because the resampling is two-level (prompts nested in seeds), which
    :func:`scipy.stats.bootstrap` does not do: it resamples the observations of one axis.
    """
    gen = np.random.default_rng(seed)
    s, m = values.shape
    means = np.empty(n)
    for b in range(n):
        si = gen.integers(s, size=(s,))  # a tuple size: numpy's stubs then type an array
        pi = gen.integers(m, size=(s, m))
        means[b] = values[si[:, None], pi].mean()
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def _auc(xs: Sequence[float], ys: Sequence[float], upto: float) -> float:
    """Mean of the piecewise-linear curve ``y(x)`` over ``[0, upto]`` (trapezoid)."""
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    if not upto > 0:
        return math.nan
    grid = np.linspace(0.0, upto, 201)
    v = np.interp(grid, x, y)
    return float(((v[1:] + v[:-1]) / 2 * np.diff(grid)).sum() / upto)


def _seed_interval(values: Sequence[float] | np.ndarray, n: int, seed: int
                   ) -> tuple[float, float]:
    """Percentile 95% bootstrap interval of the mean over seeds (one value per seed); NaN
    with fewer than two seeds, where resampling seeds says nothing about their spread."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return math.nan, math.nan
    res = stats.bootstrap((v,), np.mean, n_resamples=n, method="percentile",
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _at_tokens(xs: Sequence[float], ys: Sequence[float], tokens: float) -> float:
    """Held-out accuracy of a run when it had generated ``tokens`` tokens: its curve
    ``y(x)`` linearly interpolated between evaluations (``tokens`` within the curve's range)."""
    return float(np.interp(tokens, np.asarray(xs, np.float64), np.asarray(ys, np.float64)))


def _nanmean(values: Sequence[float]) -> float:
    """Mean of the finite values; nan when there are none (an arm that never got there)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else math.nan


def _first_reach(xs: Sequence[float], ys: Sequence[float], target: float) -> float:
    """Smallest x at which the linearly interpolated curve reaches ``target`` (nan if never)."""
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if y0 >= target:
            return float(x0)
        if y1 >= target:
            return float(x0 + (target - y0) / (y1 - y0) * (x1 - x0))
    return float(xs[-1]) if ys and ys[-1] >= target else math.nan


def run_experiment(
    arms: Sequence[str] = DEFAULT_ARMS,
    seeds: Sequence[int] = (0, 1, 2),
    settings: RunSettings | None = None,
    *,
    epochs: int = 1,
    out_dir: str | os.PathLike = "experiment-out",
    bootstrap: int = 2000,
    progress: bool = True,
) -> ExperimentResult:
    r"""Run every arm for every seed; write ``report.md``, ``runs.json`` and two figures.

    Parameters
    ----------
    arms : names in :data:`ARMS`
    seeds : ints
        Each seed fixes the warm start, prompt order, sampling and designs; arms share them.
    settings : RunSettings, optional
        Task, steps, group size, PAIR's ``tau`` and budget ratio, learning rate, warm-up and
        evaluation period, as in :func:`pairht.demo.demo.run_comparison`
        (:class:`pairht.demo.tasks.RunSettings`: ``None`` fields are the task's,
        :data:`pairht.demo.tasks.TASK_DEFAULTS`; ``eval_every`` ``max(1, steps // 5)``).
        The warm start is cached on disk under ``$PAIRHT_CACHE`` (default
        ``~/.cache/pairht``).
    epochs : int
        Passes over the training prompts: ``ceil(steps * prompts_per_step / epochs)`` distinct
        prompts, each seen ``epochs`` times. With 1 (default) every prompt is seen once, so the
        per-prompt history that VIP and HORA plan from (``pairht.torch.history``) is always empty
        and they plan as if every prompt were new; ``epochs >= 2`` lets it accumulate.
    bootstrap : int
        Bootstrap resamples for the intervals.

    Returns
    -------
    ExperimentResult
    """
    arms = _check_arms(arms)
    run = (settings or RunSettings()).resolved(evaluations=5)
    the_task = get_task(run.task)
    steps, prompts_per_step, warmup_steps, tau, learning_rate = (
        run.steps, run.prompts_per_step, run.warmup_steps, run.tau, run.learning_rate)
    assert steps is not None and prompts_per_step is not None and warmup_steps is not None \
        and tau is not None and learning_rate is not None  # resolved
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an int >= 1 (passes over the training prompts); got "
                         f"{epochs!r}")
    visits = steps * prompts_per_step
    cfg = toy.ToyModelConfig(max_positions=run.max_positions)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: one thread is fastest and fair to every arm
    # PAIR arms first, so grpo_small can match the tokens PAIR spent in the same seed.
    order = sorted(arms, key=lambda a: (ARMS[a].kind != "pair", ARMS[a].matched))
    runs: list[ArmRun] = []
    try:
        for seed in seeds:
            base = warm_model(the_task, seed, warmup_steps, cfg)
            tok = toy.make_tokenizer(the_task)
            dataset = the_task.dataset(math.ceil(visits / epochs), rng=seed, split="train")
            pair_tokens: dict[str, int] = {}
            grpo_tokens: int | None = None
            for arm_name in order:
                arm = ARMS[arm_name]
                g = run.num_generations
                if arm.matched:
                    # G' so that G' * (GRPO tokens per candidate) = PAIR's total tokens; measured
                    # from the full-group run of this seed when there is one, else a pilot.
                    full: float | None = grpo_tokens
                    if full is None:
                        full = _full_group_tokens(base, tok, dataset, the_task, seed, g,
                                                  prompts_per_step, visits)
                    spent = pair_tokens.get("pair", float(np.mean(list(pair_tokens.values()))))
                    g = max(2, round(run.num_generations * spent / full))
                kwargs = demo.trainer_kwargs(
                    out / f"{arm_name}-s{seed}", steps=steps, seed=seed, num_generations=g,
                    prompts_per_step=prompts_per_step, learning_rate=learning_rate,
                    max_completion_length=the_task.max_new_tokens,
                )
                model = copy.deepcopy(base)
                if arm.kind == "grpo":
                    res = demo._run_grpo(
                        model, tok, dataset, kwargs, steps=steps, eval_every=run.eval_every,
                        eval_seed=seed + 1, progress=progress, task=the_task, name=arm_name,
                    )
                    if not arm.matched:
                        grpo_tokens = res.generated_tokens
                else:
                    options = dict(arm.options)
                    if options.get("prefix_group_size") == NARROW:
                        options["prefix_group_size"] = _narrow_size(
                            _full_group_tokens(base, tok, dataset, the_task, seed, g,
                                               prompts_per_step, visits) / (g * visits),
                            g, tau, run.budget_ratio)
                    res = demo._run_pair(
                        model, tok, dataset, kwargs, tau=tau, snap_window=run.snap_window,
                        budget_ratio=run.budget_ratio, pair_options=options, steps=steps,
                        eval_every=run.eval_every, eval_seed=seed + 1, progress=progress,
                        task=the_task, name=arm_name,
                    )
                    pair_tokens[arm_name] = res.generated_tokens
                by_item = toy.success_by_item(model, tok, split="eval", samples_per_prompt=8,
                                              seed=seed + 1, task=the_task)
                runs.append(ArmRun(arm_name, seed, g, res, [float(v) for v in by_item]))
    finally:
        torch.set_num_threads(threads)
    logged = dict(
        **asdict(run), arms=arms, seeds=seeds, epochs=epochs, bootstrap=bootstrap,
        eval=f"held-out success, {len(the_task.eval_items)} prompts x 8 samples at T=1",
    )
    summary = summarise(runs, arms, seeds, bootstrap=bootstrap)
    table = {"settings": logged, "summary": summary,
             "runs": [{**asdict(r), "result": asdict(r.result)} for r in runs]}
    figures = _plot(table, out)
    report = out / "report.md"
    report.write_text(render_report(summary, logged, figures))
    (out / "runs.json").write_text(json.dumps(table, indent=2))
    return ExperimentResult(runs, summary, report, figures, logged)


def _narrow_size(mean_length: float, g: int, tau: int, budget_ratio: float) -> int:
    r"""The audit's width rule (:func:`pairht.audit.two_stage.narrow_width`) for a task whose
    responses average ``mean_length`` tokens: ``G' = G (P + b C) / (P + C)`` per candidate,
    with prefix ``P = min(tau, L)`` and suffix ``C = L - P`` (every candidate unfinished
    after the prefix: an approximation where many end inside it).

    Examples
    --------
    >>> _narrow_size(94.0, 8, 8, 0.5)  # the long chains: G' = 4.34, half way to 8
    6
    """
    from pairht.audit.two_stage import narrow_width

    prefix = min(float(tau), mean_length)
    g_prime = g * (prefix + budget_ratio * (mean_length - prefix)) / mean_length
    return narrow_width(g, g_prime)


def _full_group_tokens(base, tok, dataset, task, seed, g, prompts_per_step,
                       visits: int | None = None) -> float:
    """Generated tokens of a full group over the whole run, estimated from one batch (a pilot
    without training), scaled to the run's prompt visits (``visits``; default one pass over
    ``dataset``)."""
    import torch

    prompts = [dataset[i]["prompt"] for i in range(min(len(dataset), prompts_per_step))]
    enc = tok(prompts, return_tensors="pt", padding=True)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        out = base.generate(**enc, do_sample=True, num_return_sequences=g,
                            max_new_tokens=task.max_new_tokens,
                            pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    new = out[:, enc["input_ids"].shape[1]:]
    ended = (new == tok.eos_token_id).int()
    lengths = torch.where(ended.any(1), ended.argmax(1) + 1, torch.tensor(new.shape[1]))
    return float(lengths.float().mean()) * g * (len(dataset) if visits is None else visits)


def summarise(
    runs: Sequence[ArmRun], arms: Sequence[str], seeds: Sequence[int], *, bootstrap: int = 2000
) -> list[dict[str, Any]]:
    """One row per arm: means over seeds and paired-bootstrap 95% intervals (see module doc)."""
    by = {(r.arm, r.seed): r for r in runs}
    upto = min(r.result.curve[-1][1] for r in runs)
    wall_upto = min(r.result.wall[-1] for r in runs if r.result.wall)
    initial = float(np.mean([by[(arms[0], s)].result.initial_reward for s in seeds]))
    best = max(float(np.mean([by[(a, s)].result.final_reward for s in seeds])) for a in arms)
    target = initial + 0.5 * (best - initial)
    ref = "grpo" if "grpo" in arms else arms[0]

    def at_equal(arm: str) -> np.ndarray:  # per seed: accuracy after `upto` tokens
        return np.array([_at_tokens([c[1] for c in by[(arm, s)].result.curve],
                                    [c[2] for c in by[(arm, s)].result.curve], upto)
                         for s in seeds])

    ref_eq = at_equal(ref)
    rows = []
    for a in arms:
        finals = np.array([by[(a, s)].final_by_item for s in seeds])
        ref_f = np.array([by[(ref, s)].final_by_item for s in seeds])
        res = [by[(a, s)].result for s in seeds]
        eq = at_equal(a)
        aucs = [_auc([c[1] for c in r.curve], [c[2] for c in r.curve], upto) for r in res]
        rows.append(dict(
            arm=a,
            group_size=int(np.mean([by[(a, s)].group_size for s in seeds])),
            final=float(finals.mean()),
            final_ci=_bootstrap(finals, bootstrap, 0),
            delta_vs_ref=float((finals - ref_f).mean()),
            delta_ci=_bootstrap(finals - ref_f, bootstrap, 1),
            tokens=float(np.mean([r.generated_tokens for r in res])),
            prefix_tokens=float(np.mean([r.prefix_tokens for r in res])),
            seconds=float(np.mean([r.seconds for r in res])),
            auc_tokens=float(np.mean(aucs)),
            auc_tokens_ci=_seed_interval(aucs, bootstrap, 2),
            equal_tokens=float(upto),
            acc_at_equal_tokens=float(eq.mean()),
            acc_at_equal_tokens_ci=_seed_interval(eq, bootstrap, 3),
            delta_at_equal_tokens=float((eq - ref_eq).mean()),
            delta_at_equal_tokens_ci=_seed_interval(eq - ref_eq, bootstrap, 4),
            auc_wall=float(np.mean([_auc(r.wall, [c[2] for c in r.curve], wall_upto)
                                    for r in res])),
            tokens_to_target=_nanmean([_first_reach([c[1] for c in r.curve],
                                                    [c[2] for c in r.curve], target)
                                       for r in res]),
            seconds_to_target=_nanmean([_first_reach(r.wall, [c[2] for c in r.curve], target)
                                        for r in res]),
            target=target,
            reference=ref,
            # mean seconds per step of each phase (pairht.trl.timing), averaged over seeds
            time_split={k: float(np.mean([r.time_split.get(k, 0.0) for r in res]))
                        for k in sorted(set().union(*(r.time_split for r in res)))}
            if all(r.time_split for r in res) else {},
        ))
    return rows


def render_report(summary: list[dict[str, Any]], settings: dict[str, Any],
                  figures: Sequence[Path]) -> str:
    """The markdown report: settings, the summary table, and how to read it."""
    s = settings
    lines = [
        "# Compute-matched comparison",
        "",
        f"Task `{s['task']}`, seeds {s['seeds']}, {s['steps']} steps x {s['prompts_per_step']} "
        f"prompts ({s.get('epochs', 1)} pass(es) over the training prompts), "
        f"G = {s['num_generations']}, tau = {s['tau']}, budget ratio "
        f"{s['budget_ratio']}, lr {s['learning_rate']}. Evaluation: {s['eval']}. Intervals: "
        f"95% percentile bootstrap ({s['bootstrap']} resamples) over seeds and held-out "
        "prompts, paired across arms.",
        "",
        "| arm | G | final acc [95% CI] | vs " + summary[0]["reference"] + " [95% CI] | "
        "tokens | wall s | AUC(tokens) | AUC(wall) | tokens to target | s to target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary:
        lines.append(
            f"| {r['arm']} | {r['group_size']} | {r['final']:.3f} "
            f"[{r['final_ci'][0]:.3f}, {r['final_ci'][1]:.3f}] | {r['delta_vs_ref']:+.3f} "
            f"[{r['delta_ci'][0]:+.3f}, {r['delta_ci'][1]:+.3f}] | {r['tokens']:,.0f} | "
            f"{r['seconds']:.1f} | {r['auc_tokens']:.3f} | {r['auc_wall']:.3f} | "
            f"{r['tokens_to_target']:,.0f} | {r['seconds_to_target']:.1f} |"
        )
    lines += [
        "",
        f"Target accuracy for the 'to target' columns: {summary[0]['target']:.3f} (halfway from "
        "the warm start to the best arm's final mean). AUC(tokens): mean held-out accuracy over "
        "the token range every arm reached; AUC(wall): the same over training seconds.",
        "",
        *render_ranking(summary),
        *render_time_split(summary),
        *[f"![{p.stem}]({p.name})" for p in figures],
        "",
    ]
    return "\n".join(lines)


def render_time_split(summary: list[dict[str, Any]]) -> list[str]:
    """Report lines: each arm's mean milliseconds per step in each phase of
    :data:`pairht.trl.timing.PHASES` (phases exclusive; GRPO arms: TRL's trainer instrumented
    at the same seams), and its step relative to the reference arm's."""
    from pairht.trl.timing import PHASES

    rows = [r for r in summary if r.get("time_split")]
    if not rows:
        return []
    ref = next((r for r in rows if r["arm"] == rows[0]["reference"]), rows[0])
    phases = [k for k in PHASES if any(r["time_split"].get(k, 0.0) > 0 for r in rows)]
    lines = [
        "## Per-step time split",
        "",
        "Mean wall-clock milliseconds per optimizer step, by phase (exclusive; mean over steps "
        "and seeds), and the step relative to " + ref["arm"] + "'s.",
        "",
        "| phase | " + " | ".join(r["arm"] for r in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for k in (*phases, "total"):
        lines.append(f"| {k} | " + " | ".join(f"{1000 * r['time_split'].get(k, 0.0):.0f}"
                                              for r in rows) + " |")
    base = ref["time_split"]["total"]
    lines.append("| step vs " + ref["arm"] + " | " + " | ".join(
        f"{r['time_split']['total'] / base:.2f}x" if base > 0 else "n/a" for r in rows) + " |")
    return [*lines, ""]


def _ci(lo_hi: Sequence[float], fmt: str = ".3f") -> str:
    lo, hi = lo_hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "[n/a]"
    return f"[{lo:{fmt}}, {hi:{fmt}}]"


def render_ranking(summary: list[dict[str, Any]]) -> list[str]:
    """Report lines ranking the arms at equal generated tokens (best first).

    Every arm is read at the same token count ``T`` (the fewest tokens any run generated in
    total), so an arm that spends more tokens per step is judged on what it held at ``T``,
    not on its final accuracy. Ties in that accuracy are broken by ``AUC(tokens)``.
    """
    ref = summary[0]["reference"]
    ranked = sorted(summary, key=lambda r: (-r["acc_at_equal_tokens"], -r["auc_tokens"]))
    lines = [
        "## Ranking at equal generated tokens",
        "",
        f"Held-out accuracy of each arm when it had generated T = "
        f"{summary[0]['equal_tokens']:,.0f} tokens (prefix and suffix, the fewest any run spent; "
        "each run's curve interpolated between evaluations), best first. Intervals: 95% "
        "percentile bootstrap over seeds (n/a with one seed; the evaluation's own sampling "
        "noise is not in them).",
        "",
        f"| rank | arm | accuracy at T [95% CI] | vs {ref} at T [95% CI] | AUC(tokens) [95% CI] "
        "| total tokens |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(ranked, 1):
        lines.append(
            f"| {i} | {r['arm']} | {r['acc_at_equal_tokens']:.3f} "
            f"{_ci(r['acc_at_equal_tokens_ci'])} | {r['delta_at_equal_tokens']:+.3f} "
            f"{_ci(r['delta_at_equal_tokens_ci'], '+.3f')} | {r['auc_tokens']:.3f} "
            f"{_ci(r['auc_tokens_ci'])} | {r['tokens']:,.0f} |"
        )
    lines += [""]
    return lines


def _plot(table: dict[str, Any], out: Path) -> list[Path]:
    """The report's two figures, accuracy against generated tokens and against training
    seconds, drawn by :func:`pairht.figures.draw_training` from the table ``runs.json`` holds
    (the function ``pairht figures`` redraws committed tables with)."""
    from pairht.figures import draw_training

    return [Path(draw_training(table, os.fspath(out / f"accuracy_vs_{x}.png"), xkey=x))
            for x in ("tokens", "wall")]


def main(argv: Sequence[str] | None = None) -> int:
    """``python benchmarks/compute_matched.py``: the ``pairht experiment`` command (typer, in
    :mod:`pairht._cli_app`) with these arguments; 0 on success, ``SystemExit`` otherwise."""
    from pairht.cli import run_command

    return run_command("experiment", argv)


if __name__ == "__main__":
    raise SystemExit(main())
