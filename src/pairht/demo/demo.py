r"""PAIR versus GRPO on a tiny task, on CPU, in a few minutes (``pairht demo``).

Both runs start from the same warm-started tiny policy, see the same prompts in the same order,
and use the same optimiser, learning rate, group size G and prompts per step. The default task
is the long chain arithmetic of :mod:`pairht.demo.chain` (``chain_long``: responses of 64-124
tokens, prefix checkpoint ``tau = 8``, most failures decided by a slip on the first scratchpad
line: the regime PAIR is built for); every task of :data:`pairht.demo.tasks.TASKS` runs with
``--task`` (``chain``: the short chains, 28-58 tokens; ``toy``: the letter-count toy of
:mod:`pairht.demo.toy`, where the prefix is half of PAIR's tokens).

* **GRPO** -- ``trl.GRPOTrainer`` with ``loss_type="dr_grpo"``, ``scale_rewards="none"``,
  one epoch per generation batch and no KL: the unstandardised leave-one-out (RLOO-like)
  gradient that the pair target equals exactly (PAIR paper, Eq. loo and Theorem 1). Every one
  of the G candidates is generated to the end, with PAIR's decoding loop (finished rows leave
  the batch: :class:`pairht.demo.grpo.RowDropGRPOTrainer`).
* **PAIR** -- :class:`pairht.trl.PairGRPOTrainer` in ``mode="exact"``: G prefixes of ``tau``
  tokens (snapped to a newline), prefix heads, continuation probabilities with expected suffix
  cost ``budget_ratio`` times the full-group predicted cost, the trainer's default design (fixed
  size over the unfinished candidates), and pair-HT advantages on the completed candidates only
  (Algorithm 1).

Reported per method: the held-out reward (success rate on the task's held-out prompts, 8
completions each *sampled at temperature 1* with a fixed seed, so both methods are scored on
the same random numbers) at regular evaluations, generated tokens (GRPO: all completion tokens;
PAIR: prefix tokens of all G candidates + suffix tokens of the continued ones), training
wall-clock and CPU seconds (evaluation excluded), the tokens and seconds PAIR took to reach
GRPO's final held-out reward (or that it did not), and the per-step time split of both runs
(:mod:`pairht.trl.timing`) with a paragraph on where the time went. A PNG plots held-out reward
against generated tokens, training wall-clock and steps. Everything is seeded: a rerun prints
the same rewards and tokens (seconds vary with the machine).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pairht.demo import toy
from pairht.demo.tasks import TASK_DEFAULTS, RunSettings, get_task

__all__ = [
    "EVAL_SAMPLES", "TASK_DEFAULTS", "ComparisonResult", "MethodResult", "eval_standard_error",
    "main", "quiet_trainer", "reach", "run_comparison", "single_blas_thread", "trainer_kwargs",
    "verdict", "warm_kernels",
]

METHODS = ("grpo", "pair")
#: Completions sampled per held-out prompt at each evaluation.
EVAL_SAMPLES = 8


@dataclass
class MethodResult:
    """One training run of the comparison.

    ``curve`` holds ``(step, generated_tokens_so_far, held_out_reward)`` at step 0, every
    ``eval_every`` steps and at the end, and ``wall`` the training seconds (evaluation
    excluded) at the same points; ``train_reward`` is the batch mean reward per step
    (PAIR: mean over the completed candidates, an unweighted and hence biased summary).
    """

    method: str
    steps: int
    final_reward: float
    initial_reward: float
    prefix_tokens: int
    suffix_tokens: int
    seconds: float
    cpu_seconds: float = 0.0
    full_suffix_ht: float = math.nan
    curve: list[tuple[int, int, float]] = field(default_factory=list)
    train_reward: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    time_split: dict[str, float] = field(default_factory=dict)
    #: PAIR: the heads' prequential held-out success skill logged at each step
    #: (``pair/head_skill_success``; nan before any label was scored)
    head_skill: list[float] = field(default_factory=list)
    #: PAIR: the heads' prequential reliability slope at each step (``pair/head_slope_success``,
    #: what the step shrinks the success predictions by, before clipping to [0, 1])
    head_slope: list[float] = field(default_factory=list)
    #: PAIR with ``width="auto"``: tokens its audits generated (every candidate of the audited
    #: prompts to the end), counted in ``generated_tokens`` and in the curve's token axis
    audit_tokens: int = 0

    @property
    def suffix_fraction(self) -> float:
        """PAIR only: ``suffix_tokens / full_suffix_ht``, the continued share of the suffix
        tokens a full group would have generated, with the denominator the Horvitz-Thompson
        estimate ``sum_i J_i C_i / pi_i`` from the logged design (design-unbiased for
        ``sum_i C_i``). NaN for GRPO."""
        return self.suffix_tokens / self.full_suffix_ht if self.full_suffix_ht > 0 else math.nan

    @property
    def generated_tokens(self) -> int:
        """Prefix + suffix + audit tokens (GRPO has no prefix phase: all its tokens count as
        suffix)."""
        return self.prefix_tokens + self.suffix_tokens + self.audit_tokens


@dataclass
class ComparisonResult:
    """Results of :func:`run_comparison`, keyed by method, plus where the files went."""

    results: dict[str, MethodResult]
    out_dir: Path
    table_path: Path
    plot_path: Path | None
    settings: dict[str, Any]

    def suffix_ratio(self) -> float:
        """PAIR suffix tokens over the suffix tokens GRPO generated past the same checkpoints.

        ``ratio = S_pair / (T_grpo - P_pair)``: both runs see the same prompts, so GRPO's
        completions minus PAIR's prefix tokens estimate the full-group suffix cost PAIR's budget
        is a fraction of (exact when both policies produce equal lengths; see docs/trl.md).
        """
        g, p = self.results["grpo"], self.results["pair"]
        return p.suffix_tokens / max(g.generated_tokens - p.prefix_tokens, 1)


# --------------------------------------------------------------------------- configuration


def _short() -> bool:
    return os.environ.get("PAIRHT_E2E_SHORT", "") not in ("", "0")


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """Run the block with every loaded BLAS pool at one thread, then restore it.

    Why: the prefix heads' refit (:func:`pairht.heads_fit.fit_linear_probe`, dozens of small
    Newton solves) runs through numpy's OpenBLAS, which starts one thread per core. On matrices
    of 64 columns a second thread gains nothing, and on a busy two-core machine the spinning
    pool made each refit 10-30x slower (measured: 2.1 s against 0.11 s per PAIR step). The
    heads pin their own refit the same way; this covers the rest of a run (torch's own pool is
    set separately, ``torch.set_num_threads``). threadpoolctl does the work.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def warm_kernels() -> float:
    """Load (or, on a first run, compile) the numba kernels of the PAIR step; seconds taken.

    The kernels are compiled with ``cache=True``: the first process after an install compiles
    them into ``__pycache__`` (numba falls back to a user-wide cache, ``NUMBA_CACHE_DIR`` or
    ``~/.cache/numba``, when the install is read-only) and later processes only load them
    (under a second). The demo pays this once before training, outside both runs' clocks, and
    prints it: it is a per-install cost, not a per-step one.
    """
    from pairht.step import StepInputs, plan_continuations

    t0 = time.perf_counter()
    gen = np.random.default_rng(0)
    done = np.zeros((2, 4), dtype=bool)
    done[0, 0] = True
    inputs = StepInputs.from_ratio(gen.uniform(0.2, 0.8, (2, 4)), gen.uniform(5.0, 50.0, (2, 4)),
                                   done, budget_ratio=0.5)
    plan_continuations(inputs, rng=gen)
    return time.perf_counter() - t0


def trainer_kwargs(
    out_dir: Path,
    *,
    steps: int,
    seed: int,
    num_generations: int,
    prompts_per_step: int,
    learning_rate: float,
    max_completion_length: int,
) -> dict[str, Any]:
    """The TRL ``GRPOConfig`` keyword arguments every demo arm shares.

    GRPO and PAIR are built from the same dictionary, so that a comparison differs only in how
    rollouts are collected: Dr. GRPO's loss without reward scaling, no KL (``beta = 0``), one
    update per generation, a constant learning rate, sampling at temperature 1 on the CPU and no
    checkpoints. ``per_device_train_batch_size = num_generations * prompts_per_step``. The
    benchmarks that train the demo's tasks (``benchmarks/bench_step_split.py`` and others) start
    from it too.

    Examples
    --------
    >>> kw = trainer_kwargs(Path("out"), steps=2, seed=0, num_generations=4,
    ...                     prompts_per_step=2, learning_rate=1e-3, max_completion_length=16)
    >>> kw["per_device_train_batch_size"], kw["loss_type"], kw["beta"]
    (8, 'dr_grpo', 0.0)
    """
    return dict(
        output_dir=str(out_dir),
        max_steps=steps,
        per_device_train_batch_size=num_generations * prompts_per_step,
        gradient_accumulation_steps=1,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        loss_type="dr_grpo",
        scale_rewards="none",
        num_iterations=1,
        beta=0.0,
        temperature=1.0,
        top_p=1.0,
        seed=seed,
        data_seed=seed,
        use_cpu=True,
        bf16=False,
        fp16=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )


class _TokenMeter:
    """A TRL reward function that also counts completion tokens, then calls the task's reward.

    Every completion TRL generated passes through the reward function once, with its token ids,
    so summing ``len(completion_ids)`` counts generated tokens exactly (GRPO: every candidate;
    the trailing EOS included, as the model generated it).
    """

    __name__ = "task_reward"

    def __init__(self, reward: Callable[..., list[float]] = toy.toy_reward) -> None:
        self.tokens = 0
        self.calls = 0
        self.reward = reward

    def __call__(self, prompts, completions, completion_ids=None, **kwargs) -> list[float]:
        if completion_ids is not None:
            self.tokens += sum(len(c) for c in completion_ids)
        self.calls += 1
        return self.reward(prompts, completions, **kwargs)


def _make_callback(
    method: str,
    task: toy.Task,
    tokenizer,
    tokens_fn: Callable[[], tuple[int, int]],
    *,
    steps: int,
    eval_every: int,
    eval_seed: int,
    progress: bool,
    token_limit: int | None = None,
):
    """A ``TrainerCallback`` that evaluates on held-out prompts, logs one line per step and
    keeps the time spent evaluating out of the training wall-clock; its ``record`` is the
    run's :class:`MethodResult` (filled by the callback and by :func:`_train`)."""
    from transformers import TrainerCallback

    record = MethodResult(method, steps, math.nan, math.nan, 0, 0, 0.0)

    class _Cb(TrainerCallback):
        def __init__(self) -> None:
            self.record = record
            self.eval_seconds = 0.0
            self.eval_cpu = 0.0
            self.bar = None
            self.last_eval = float("nan")

        def _evaluate(self, model, step: int) -> None:
            t0, c0 = time.perf_counter(), time.process_time()
            r = toy.success_rate(
                model, tokenizer, split="eval", samples_per_prompt=EVAL_SAMPLES, seed=eval_seed,
                task=task,
            )
            self.eval_seconds += time.perf_counter() - t0
            self.eval_cpu += time.process_time() - c0
            pre, suf = tokens_fn()
            record.curve.append((step, pre + suf, r))
            record.wall.append(time.perf_counter() - self.t_start - self.eval_seconds)
            self.last_eval = r

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.t_start = time.perf_counter()
            if progress:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=steps, desc=f"{method:>4}", unit="step", dynamic_ncols=True)
            self._evaluate(model, 0)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                record.train_reward.append(float(logs["reward"]))

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step = state.global_step
            pre, suf = tokens_fn()  # every step: the PAIR meter reads each draw once
            # token_limit: stop once the run has generated that many tokens (evaluated there)
            spent = token_limit is not None and pre + suf >= token_limit
            if spent:
                control.should_training_stop = True
            if step % eval_every == 0 or step == steps or spent:
                self._evaluate(model, step)
            record.steps = step
            if self.bar is not None:
                tr = record.train_reward[-1] if record.train_reward else float("nan")
                self.bar.set_postfix(
                    train_r=f"{tr:.2f}", heldout_r=f"{self.last_eval:.2f}", tokens=pre + suf
                )
                self.bar.update(1)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()

    return _Cb()


def _train(trainer, cb) -> MethodResult:
    """Run ``trainer``; record the training time without ``cb``'s evaluations, and the
    held-out reward at both ends. Returns ``cb.record``."""
    record = cb.record
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train()
    record.seconds = time.perf_counter() - t0 - cb.eval_seconds
    record.cpu_seconds = time.process_time() - c0 - cb.eval_cpu
    record.initial_reward = record.curve[0][2]
    record.final_reward = record.curve[-1][2]
    return record


# --------------------------------------------------------------------------- the two runs


def _run_grpo(
    model, tokenizer, dataset, kwargs, *, steps, eval_every, eval_seed, progress,
    task: toy.Task = toy.TOY_TASK, name: str = "grpo",
):
    from pairht.demo.grpo import RowDropGRPOTrainer
    from pairht.trl.timing import instrument
    from trl import GRPOConfig

    meter = _TokenMeter(task.reward)
    cb = _make_callback(name, task, tokenizer, lambda: (0, meter.tokens), steps=steps,
                        eval_every=eval_every, eval_seed=eval_seed, progress=progress)
    # GRPO decodes with PAIR's loop (finished rows leave the batch): a fair comparison
    trainer = RowDropGRPOTrainer(
        model=model,
        # TRL annotates reward functions as returning list[float | None], which (list being
        # invariant) rejects any function returning list[float], though TRL accepts them
        reward_funcs=meter,  # type: ignore[arg-type]
        args=GRPOConfig(**kwargs),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[cb],
    )
    quiet_trainer(trainer)
    timer = instrument(trainer)  # the same per-step split as PairGRPOTrainer's
    record = _train(trainer, cb)
    record.time_split = timer.mean()
    record.suffix_tokens = meter.tokens
    return record


def quiet_trainer(trainer: Any) -> None:
    """Remove transformers' printing callbacks from ``trainer`` (in place).

    ``disable_tqdm=True`` makes transformers print every log dict (``PrinterCallback``); the
    demo's own callback prints one compact progress line per step instead.
    """
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


class _DrawMeter:
    """Counts PAIR's generated tokens from ``PairGRPOTrainer.last_draw`` (the logged design).

    Each new draw adds ``sum_i prefix_len_i`` (all G candidates) and ``sum_i J_i suffix_len_i``
    (continued candidates only); a draw is counted once even if several steps reuse it.
    ``poll`` returns ``(prefix + audit, suffix)``: the tokens ``width="auto"``'s audits
    generated (``trainer.pair_audit_tokens``) count as generated tokens too.
    """

    def __init__(self) -> None:
        self.trainer: Any = None
        self.prefix = 0
        self.suffix = 0
        self.full_suffix_ht = 0.0
        self._seen: Any = None

    def poll(self) -> tuple[int, int]:
        draw = getattr(self.trainer, "last_draw", None)
        if draw is not None and draw is not self._seen:
            self._seen = draw
            t = draw.generated_tokens()  # DPPO's pruned rows were generated all the same
            self.prefix += int(t.prefix)
            self.suffix += int(t.suffix)
            self.full_suffix_ht += t.full_suffix_ht
        return self.prefix + self.audit, self.suffix

    @property
    def audit(self) -> int:
        return int(getattr(self.trainer, "pair_audit_tokens", 0))


def _run_pair(
    model, tokenizer, dataset, kwargs, *, steps, eval_every, eval_seed, progress, tau, budget_ratio,
    snap_window, task: toy.Task = toy.TOY_TASK, name: str = "pair",
    pair_options: dict[str, Any] | None = None, token_limit: int | None = None,
):
    from pairht.trl import PairGRPOConfig, PairGRPOTrainer

    meter = _DrawMeter()
    cb = _make_callback(name, task, tokenizer, meter.poll, steps=steps, eval_every=eval_every,
                        eval_seed=eval_seed, progress=progress, token_limit=token_limit)
    # pair_options override the defaults here and the shared kwargs (an arm may change mode).
    cfg = PairGRPOConfig(**{
        **kwargs,
        "mode": "exact",
        "tau": tau,
        "snap_window": snap_window,
        "budget_ratio": budget_ratio,
        "design_seed": kwargs["seed"],
        # PAIR's prefix path; an arm asks for width "auto" (PAIR's default) or another width
        "width": "prefixes",
        **(pair_options or {}),
    })
    trainer = PairGRPOTrainer(
        model=model,
        reward_funcs=task.reward,
        args=cfg,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[cb],
    )
    meter.trainer = trainer
    quiet_trainer(trainer)
    record = _train(trainer, cb)
    record.prefix_tokens, record.suffix_tokens = meter.poll()
    record.audit_tokens = meter.audit
    record.prefix_tokens -= record.audit_tokens
    record.time_split = trainer.step_timer.mean()
    for key, attr in (("pair/head_skill_success", "head_skill"),
                      ("pair/head_slope_success", "head_slope")):
        values = [row[key] for row in trainer.state.log_history if key in row]
        setattr(record, attr, [math.nan if v is None else float(v) for v in values])
    record.full_suffix_ht = meter.full_suffix_ht
    return record


# --------------------------------------------------------------------------- entry point


def reach(record: MethodResult, target: float) -> tuple[int, int, float] | None:
    """``(step, generated tokens, training seconds)`` at the first held-out evaluation of
    ``record`` whose reward is ``>= target``; None if none is. Evaluation points only (no
    interpolation between them)."""
    for (step, tokens, reward), seconds in zip(record.curve, record.wall):
        if reward >= target:
            return step, tokens, seconds
    return None


def eval_standard_error(rate: float, n: int) -> float:
    r"""Standard error of one held-out evaluation: ``sqrt(rate (1 - rate) / n)``.

    The binomial standard error of a success rate over ``n`` sampled completions, taken as
    independent (completions of one prompt are correlated, so this is a lower bound on the
    evaluation noise). The difference of two independent evaluations has standard error
    ``sqrt(se_1^2 + se_2^2)``.

    Examples
    --------
    >>> round(eval_standard_error(0.9, 512), 4)
    0.0133
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1 (evaluated completions); got {n!r}")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be a success rate in [0, 1]; got {rate!r}")
    return math.sqrt(rate * (1.0 - rate) / n)


def verdict(grpo: MethodResult, pair: MethodResult, n_eval: int | None) -> list[str]:
    """The demo's verdict, with its uncertainty: PAIR's final held-out reward against GRPO's
    (difference and its evaluation standard error), and the tokens and seconds PAIR took to
    first reach GRPO's final reward.

    "Reached" is said only when PAIR's final reward is above GRPO's by more than one standard
    error of the difference; within it the two end level and the crossing point is evaluation
    noise (it is still printed, as such). ``n_eval``: completions per evaluation (``None``: no
    standard error is known and the crossing point is printed without a verdict).
    """
    g, p = grpo, pair
    lines = []
    hit = reach(p, g.final_reward)
    crossing = ""
    if hit is not None:
        step, tokens, seconds = hit
        crossing = (f"at step {step}: {tokens:,} tokens ({tokens / g.generated_tokens:.2f}x "
                    f"GRPO's) and {seconds:.1f} s ({seconds / g.seconds:.2f}x GRPO's)")
    diff = p.final_reward - g.final_reward
    if n_eval is None:
        if hit is None:
            lines.append(f"PAIR did not reach GRPO's final held-out reward "
                         f"({g.final_reward:.3f}) at any evaluation "
                         f"(best {max(c[2] for c in p.curve):.3f}).")
        else:
            lines.append(f"PAIR first reached GRPO's final held-out reward "
                         f"({g.final_reward:.3f}) {crossing}.")
        return lines
    se = math.hypot(eval_standard_error(g.final_reward, n_eval),
                    eval_standard_error(p.final_reward, n_eval))
    z = diff / se if se > 0 else math.copysign(math.inf, diff) if diff else 0.0
    lines.append(
        f"Final held-out reward, PAIR - GRPO: {diff:+.3f} +/- {se:.3f} (one standard error of "
        f"the difference of two evaluations of {n_eval} completions; {z:+.1f} SE)."
    )
    if diff > se and hit is not None:
        lines.append(f"PAIR reached GRPO's final held-out reward ({g.final_reward:.3f}) "
                     f"{crossing}, and ended above it by more than one standard error.")
    elif diff < -se:
        lines.append(f"PAIR ended below GRPO's final held-out reward by more than one "
                     f"standard error: it did not reach it (best evaluation "
                     f"{max(c[2] for c in p.curve):.3f}).")
    else:
        where = (f"its curve first crossed GRPO's final reward {crossing}, which is within "
                 f"evaluation noise, not a measured gain" if hit is not None else
                 f"it did not reach GRPO's final reward at any evaluation (best "
                 f"{max(c[2] for c in p.curve):.3f}), also within evaluation noise")
        lines.append(f"PAIR and GRPO end level within one standard error; {where}.")
    return lines


def run_comparison(
    settings: RunSettings | None = None,
    seed: int = 0,
    out_dir: str | os.PathLike = "demo-out",
    *,
    methods: Sequence[str] = METHODS,
    match_tokens: bool = False,
    plot: bool = True,
    progress: bool = True,
    console: Any = None,
) -> ComparisonResult:
    r"""Train the same warm-started tiny policy with GRPO and with PAIR; table, JSON and plot.

    Parameters
    ----------
    settings : RunSettings, optional
        Task, steps, group size, PAIR's ``tau`` and budget ratio, learning rate, warm-up and
        evaluation period (:class:`pairht.demo.tasks.RunSettings`; default: all the task's,
        on ``"chain_long"``). Steps default to the task's (chain 40, toy 60), or 12 when
        ``PAIRHT_E2E_SHORT=1``; ``eval_every`` to ``max(1, steps // 8)``. The default task,
        ``"chain_long"`` (:mod:`pairht.demo.chain`), has responses of 64-124 tokens, none
        finished at the prefix checkpoint, most failures visible in it. ``"chain"``: 28-58
        tokens; ``"toy"`` (:mod:`pairht.demo.toy`): 12-39 tokens, where the prefix is half of
        PAIR's tokens.
    seed : int
        Seeds model initialisation, warm-up, prompt order, sampling and the PAIR design.
    out_dir : path
        Receives ``results.json``, ``table.txt`` and ``reward_vs_tokens.png``.
    methods : subset of ("grpo", "pair")
    match_tokens : bool
        With both methods: GRPO trains ``steps`` steps, then PAIR trains on the same prompt
        stream until it has generated as many tokens as GRPO did (at most ``2 * steps``
        steps), so that both spend the same generation budget; the table says how many steps
        each took. False (default here): both train ``steps`` steps. The ``pairht demo``
        command defaults to True (``--fixed-steps`` for False): see :func:`main`.
    plot : bool
        Write the PNG (matplotlib, imported only here).
    progress, console
        Progress bars and a ``rich.console.Console`` for the table (default: a new one).

    Returns
    -------
    ComparisonResult

    Examples
    --------
    >>> res = run_comparison(RunSettings(steps=12), seed=0)  # doctest: +SKIP
    >>> pair, grpo = res.results["pair"], res.results["grpo"]  # doctest: +SKIP
    >>> pair.generated_tokens < grpo.generated_tokens  # doctest: +SKIP
    True
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods must be a non-empty subset of {METHODS}; got {list(methods)!r}")
    run = settings or RunSettings()
    if run.steps is None and _short():
        run = replace(run, steps=12)
    run = run.resolved(evaluations=8)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    # The toy model's matmuls are tiny: a second intra-op thread gains nothing, and on a busy
    # machine (CI's two cores) an oversubscribed thread pool makes each step many times slower.
    # The same holds for numpy's BLAS pool, which the heads' refit runs on.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with single_blas_thread():
            return _run_comparison(run, seed, out, methods,
                                   match_tokens and set(methods) == set(METHODS), plot,
                                   progress, console)
    finally:
        torch.set_num_threads(threads)


def _warm_start(task: toy.Task, seed: int, steps: int, max_positions: int, progress: bool):
    """The warm-started policy and the seconds it took (0 when read from the disk cache)."""
    cfg = toy.ToyModelConfig(max_positions=max_positions)
    t0 = time.perf_counter()
    if task.name == "toy":
        base, warm = toy.warm_started_model(seed, steps=steps, progress=progress, config=cfg)
        return base, warm.seconds
    from pairht.demo.warm_cache import warm_model

    base = warm_model(task, seed, steps, cfg)
    return base, time.perf_counter() - t0


def _run_comparison(run: RunSettings, seed: int, out: Path, methods: Sequence[str],
                    match_tokens: bool, plot: bool, progress: bool, console: Any
                    ) -> ComparisonResult:
    """:func:`run_comparison` on resolved settings (every field set)."""
    task = get_task(run.task)
    steps, prompts_per_step = run.steps, run.prompts_per_step
    assert steps is not None and prompts_per_step is not None and run.warmup_steps is not None \
        and run.learning_rate is not None  # resolved
    tokenizer = toy.make_tokenizer(task)
    base, warm_seconds = _warm_start(task, seed, run.warmup_steps, run.max_positions, progress)
    kernel_seconds = warm_kernels() if "pair" in methods else 0.0
    # One prompt stream for both runs (TRL's sampler shuffles the whole dataset with the seed,
    # so both see the same prompts in the same order however long each trains).
    max_steps = 2 * steps if match_tokens else steps
    dataset = task.dataset(max_steps * prompts_per_step, rng=seed, split="train")
    results: dict[str, MethodResult] = {}
    eval_seed = seed + 1
    for method in sorted(methods, key=METHODS.index):  # GRPO first: PAIR may match its tokens
        run_steps = max_steps if method == "pair" else steps
        kwargs = trainer_kwargs(
            out / method,
            steps=run_steps,
            seed=seed,
            num_generations=run.num_generations,
            prompts_per_step=prompts_per_step,
            learning_rate=run.learning_rate,
            max_completion_length=task.max_new_tokens,
        )
        model = copy.deepcopy(base)
        common: dict[str, Any] = dict(steps=run_steps, eval_every=run.eval_every,
                                      eval_seed=eval_seed, progress=progress, task=task)
        if method == "grpo":
            results[method] = _run_grpo(model, tokenizer, dataset, kwargs, **common)
        else:
            limit = results["grpo"].generated_tokens if match_tokens else None
            results[method] = _run_pair(
                model, tokenizer, dataset, kwargs, tau=run.tau, snap_window=run.snap_window,
                budget_ratio=run.budget_ratio, token_limit=limit, **common,
            )
    settings = dict(
        **asdict(run), seed=seed, warmup_seconds=warm_seconds,
        kernel_load_seconds=kernel_seconds, match_tokens=match_tokens,
        eval=f"held-out success rate, {len(task.eval_items)} prompts x {EVAL_SAMPLES} "
             "completions sampled at temperature 1",
        eval_samples=len(task.eval_items) * EVAL_SAMPLES,
    )
    table_path = out / "table.txt"
    plot_path = out / "reward_vs_tokens.png" if plot else None
    result = ComparisonResult(results, out, table_path, plot_path, settings)
    text = _print_table(result, console)
    table_path.write_text(text)
    (out / "results.json").write_text(
        json.dumps(
            {
                "settings": settings,
                "results": {
                    k: {
                        **asdict(v),
                        "generated_tokens": v.generated_tokens,
                        "suffix_fraction": v.suffix_fraction,
                    }
                    for k, v in results.items()
                },
            },
            indent=2,
        )
    )
    if plot_path is not None:
        _plot(result, plot_path)
    return result


def _print_table(result: ComparisonResult, console: Any = None) -> str:
    from rich.console import Console
    from rich.table import Table

    s = result.settings
    table = Table(
        title=(f"PAIR vs GRPO on the {s['task']} task (CPU; "
               + ("PAIR trained until it had generated GRPO's tokens)" if s["match_tokens"]
                  else f"{s['steps']} steps each)")),
        caption=(
            f"reward: {s['eval']}. tokens: generated (PAIR: prefixes + continued suffixes). "
            "wall/cpu s: training, eval excluded"
        ),
    )
    for col in ("method", "steps", "reward start", "reward end", "prefix tok", "suffix tok",
                "total tok", "wall s", "cpu s"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for name, r in result.results.items():
        table.add_row(
            name.upper(),
            str(r.steps),
            f"{r.initial_reward:.3f}",
            f"{r.final_reward:.3f}",
            f"{r.prefix_tokens:,}",
            f"{r.suffix_tokens:,}",
            f"{r.generated_tokens:,}",
            f"{r.seconds:.1f}",
            f"{r.cpu_seconds:.1f}",
        )
    lines = []
    if set(result.results) == set(METHODS):
        lines = _comparison_lines(result)
    # at least 110 columns: rich would otherwise truncate the numbers to an 80-column pipe
    console = console or Console(width=max(Console().width, 110))
    rec = Console(record=True, width=110, file=io.StringIO())
    for out in (console, rec):
        out.print(table)
        for line in lines:
            out.print(line, highlight=False, markup=False)
    return rec.export_text()


def _comparison_lines(result: ComparisonResult) -> list[str]:
    """The verdict (tokens and seconds to GRPO's final reward), the token ratio, the per-step
    time split and where the time went, as printed under the table."""
    from pairht.trl.timing import format_split

    g, p = result.results["grpo"], result.results["pair"]
    s = result.settings
    # GRPO's tokens stand in for PAIR's full-group cost only over the same prompts
    versus_grpo = ("" if s.get("match_tokens") else
                   f"PAIR suffix tokens / GRPO tokens past the checkpoint: "
                   f"{result.suffix_ratio():.3f}; ")
    lines = [
        f"{versus_grpo}PAIR suffix tokens / its own HT full-group estimate: "
        f"{p.suffix_fraction:.3f} (budget_ratio {s['budget_ratio']})",
        "",
        f"GRPO: {g.steps} steps, {g.generated_tokens:,} tokens, {g.seconds:.1f} s, final "
        f"held-out reward {g.final_reward:.3f}",
        f"PAIR: {p.steps} steps, {p.generated_tokens:,} tokens, {p.seconds:.1f} s, final "
        f"held-out reward {p.final_reward:.3f}",
    ]
    lines += verdict(g, p, s.get("eval_samples"))
    if s.get("task"):  # benchmarks/demo_population.py audits every registered task
        lines.append(
            "Do the prefixes pay on this task at all? The exact audit of its own population "
            f"answers that with intervals: python benchmarks/demo_population.py --task "
            f"{s['task']} (docs/audit.md, \"The demo's own task\")."
        )
    lines.append(
        f"One-time numba kernel load/compile before training (not in either run's seconds): "
        f"{s['kernel_load_seconds']:.1f} s."
    )
    splits = {"GRPO": g.time_split, "PAIR": p.time_split}
    if all(splits.values()):
        lines += ["", "Per-step wall-clock split (mean over steps; exclusive phases):",
                  format_split(splits), "",
                  _explain(g.time_split, p.time_split,
                           (p.generated_tokens / p.steps) / (g.generated_tokens / g.steps))]
    return lines


def _explain(g: dict[str, float], p: dict[str, float], token_ratio: float) -> str:
    """One paragraph on where PAIR's step time went relative to GRPO's, from the two splits
    (``token_ratio``: PAIR's generated tokens per step over GRPO's)."""
    def ms(x: float) -> str:
        return f"{1000 * x:.0f} ms"

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b > 0 else "n/a"

    gen_g = g["generation"]
    gen_p = p["prefix"] + p["features"] + p["continuation"] + p["generation"]
    own = p["heads"] + p["allocation"]
    gen_ratio = gen_p / gen_g if gen_g > 0 else math.nan
    upd_ratio = p["update"] / g["update"] if g["update"] > 0 else math.nan
    why_gen = (
        "a decode step of a tiny model is mostly fixed overhead (half the rows cost 0.75-0.9x "
        "at 64 rows and about 0.73x at 128 on this CPU: python benchmarks/bench_decode_rows.py), "
        "and PAIR decodes the prefix steps and then up to the longest selected suffix, so its "
        "generation time fell less than its tokens"
        if gen_ratio > token_ratio + 0.05 else "its generation time fell with its tokens"
    )
    why_upd = (
        "TRL's loss ran forward and backward over every row of PAIR's batch, the unselected "
        "ones masked, so the update did not shrink with the tokens PAIR skipped"
        if upd_ratio > 0.85 else
        "PAIR's update runs over the continued rows only (drop_unselected_rows), so it "
        "shrinks with the rows PAIR skipped"
    )
    return (
        f"PAIR's step took {ms(p['total'])} against GRPO's {ms(g['total'])} "
        f"({ratio(p['total'], g['total'])}) for {token_ratio:.2f}x the generated tokens per "
        f"step. Generation: GRPO decoded every candidate to the end in {ms(gen_g)}; PAIR spent "
        f"{ms(p['prefix'])} on prefixes, {ms(p['features'])} on the feature forward and "
        f"{ms(p['continuation'])} resuming the selected candidates ({ms(gen_p)} in all, "
        f"{ratio(gen_p, gen_g)} GRPO's): {why_gen}. PAIR's own overheads: prefix heads "
        f"(prediction and refit) {ms(p['heads'])} and allocation with design draw "
        f"{ms(p['allocation'])}, {ratio(own, p['total'])} of its step. The policy update took "
        f"{ms(p['update'])} against GRPO's {ms(g['update'])} ({ratio(p['update'], g['update'])}; "
        f"{why_upd}). Timings are wall-clock: on a busy machine they "
        f"vary from run to run; the cpu s column is steadier."
    )


def _plot(result: ComparisonResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, cx, bx) = plt.subplots(1, 3, figsize=(15, 4), dpi=120)
    for name, r in result.results.items():
        steps = [c[0] for c in r.curve]
        xs = [c[1] for c in r.curve]
        ys = [c[2] for c in r.curve]
        ax.plot(xs, ys, marker="o", label=name.upper())
        bx.plot(steps, ys, marker="o", label=name.upper())
        if len(r.wall) == len(ys):
            cx.plot(r.wall, ys, marker="o", label=name.upper())
    ax.set_xlabel("generated tokens (prefix + suffix)")
    ax.set_ylabel("held-out reward (sampled, T=1)")
    ax.set_title("Reward vs generated tokens")
    cx.set_xlabel("training wall-clock, s (evaluation excluded)")
    cx.set_title("Reward vs wall-clock")
    bx.set_xlabel("optimizer step")
    bx.set_title("Reward vs step")
    for a in (ax, cx, bx):
        a.grid(alpha=0.3)
        a.legend()
    fig.suptitle(f"PAIR vs GRPO, {result.settings['task']} task (same warm start, same prompts)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pairht.demo.demo``: the ``pairht demo`` command (typer, in
    :mod:`pairht._cli_app`) with these arguments; 0 on success, ``SystemExit`` otherwise."""
    from pairht.cli import run_command

    return run_command("demo", argv)


if __name__ == "__main__":
    raise SystemExit(main())
