r"""PAIR versus GRPO on the toy task, on CPU, in a few minutes (``pairht demo``).

Both runs start from the same warm-started tiny policy (:mod:`pairht_demo.toy`: supervised
warm-up on an imperfect demonstrator, success rate about 0.4), see the same prompts in the same
order, and use the same optimiser, learning rate and group size G:

* **GRPO** -- plain ``trl.GRPOTrainer`` with ``loss_type="dr_grpo"``, ``scale_rewards="none"``,
  one epoch per generation batch and no KL: the unstandardised leave-one-out (RLOO-like)
  gradient that the pair target equals exactly (PAIR paper, Eq. loo and Theorem 1). Every one
  of the G candidates is generated to the end.
* **PAIR** -- :class:`pairht_trl.PairGRPOTrainer` in ``mode="exact"``: G prefixes of ``tau``
  tokens (snapped to a newline), prefix heads, continuation probabilities with expected suffix
  cost ``budget_ratio`` times the full-group predicted cost, a Bernoulli design draw, and
  pair-HT advantages on the completed candidates only (Algorithm 1).

Reported per method: the final held-out reward (success rate on the 16 held-out (letter, count)
combinations, 8 completions each *sampled at temperature 1* with a fixed seed, so both methods
are scored on the same random numbers), generated tokens (GRPO: all completion tokens; PAIR:
prefix tokens of all G candidates + suffix tokens of the continued ones), and training
wall-clock (evaluation excluded). A PNG plots held-out reward against generated tokens.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pairht_demo import toy

__all__ = ["ComparisonResult", "MethodResult", "main", "run_comparison"]

METHODS = ("grpo", "pair")


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

    @property
    def suffix_fraction(self) -> float:
        """PAIR only: ``suffix_tokens / full_suffix_ht``, the continued share of the suffix
        tokens a full group would have generated, with the denominator the Horvitz-Thompson
        estimate ``sum_i J_i C_i / pi_i`` from the logged design (design-unbiased for
        ``sum_i C_i``). NaN for GRPO."""
        return self.suffix_tokens / self.full_suffix_ht if self.full_suffix_ht > 0 else math.nan

    @property
    def generated_tokens(self) -> int:
        """Prefix + suffix tokens (GRPO has no prefix phase: all its tokens count as suffix)."""
        return self.prefix_tokens + self.suffix_tokens


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


def _base_kwargs(
    out_dir: Path,
    *,
    steps: int,
    seed: int,
    num_generations: int,
    prompts_per_step: int,
    learning_rate: float,
    max_completion_length: int,
) -> dict[str, Any]:
    # Shared by both trainers so that the comparison differs only in how rollouts are collected.
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
    *,
    method: str,
    tokenizer,
    steps: int,
    eval_every: int,
    eval_seed: int,
    tokens_fn: Callable[[], tuple[int, int]],
    record: MethodResult,
    progress: bool,
    task: toy.Task = toy.TOY_TASK,
):
    """A ``TrainerCallback`` that evaluates on held-out prompts, logs one line per step and
    keeps the time spent evaluating out of the training wall-clock."""
    from transformers import TrainerCallback

    class _Cb(TrainerCallback):
        def __init__(self) -> None:
            self.eval_seconds = 0.0
            self.eval_cpu = 0.0
            self.bar = None
            self.last_eval = float("nan")

        def _evaluate(self, model, step: int) -> None:
            t0, c0 = time.perf_counter(), time.process_time()
            r = toy.success_rate(
                model, tokenizer, split="eval", samples_per_prompt=8, seed=eval_seed, task=task
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
            if step % eval_every == 0 or step == steps:
                self._evaluate(model, step)
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


# --------------------------------------------------------------------------- the two runs


def _run_grpo(
    model, tokenizer, dataset, kwargs, *, steps, eval_every, eval_seed, progress,
    task: toy.Task = toy.TOY_TASK, name: str = "grpo",
):
    from trl import GRPOConfig, GRPOTrainer

    meter = _TokenMeter(task.reward)
    record = MethodResult(name, steps, math.nan, math.nan, 0, 0, 0.0)
    cb = _make_callback(
        method=name,
        task=task,
        tokenizer=tokenizer,
        steps=steps,
        eval_every=eval_every,
        eval_seed=eval_seed,
        tokens_fn=lambda: (0, meter.tokens),
        record=record,
        progress=progress,
    )
    trainer = GRPOTrainer(
        model=model,
        # TRL annotates reward functions as returning list[float | None], which (list being
        # invariant) rejects any function returning list[float], though TRL accepts them
        reward_funcs=meter,  # type: ignore[arg-type]
        args=GRPOConfig(**kwargs),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[cb],
    )
    _quiet(trainer)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train()
    record.seconds = time.perf_counter() - t0 - cb.eval_seconds
    record.cpu_seconds = time.process_time() - c0 - cb.eval_cpu
    record.suffix_tokens = meter.tokens
    record.initial_reward = record.curve[0][2]
    record.final_reward = record.curve[-1][2]
    return record


def _quiet(trainer) -> None:
    # disable_tqdm=True makes transformers print every log dict (PrinterCallback); the demo's
    # own callback prints one compact progress line per step instead.
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


class _DrawMeter:
    """Counts PAIR's generated tokens from ``PairGRPOTrainer.last_draw`` (the logged design).

    Each new draw adds ``sum_i prefix_len_i`` (all G candidates) and ``sum_i J_i suffix_len_i``
    (continued candidates only); a draw is counted once even if several steps reuse it.
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
            self.prefix += int(np.asarray(draw.prefix_len).sum())
            mask = np.asarray(draw.mask)
            suffix = np.asarray(draw.suffix_len)[mask]
            self.suffix += int(suffix.sum())
            self.full_suffix_ht += float((suffix / np.asarray(draw.pi)[mask]).sum())
        return self.prefix, self.suffix


def _run_pair(
    model, tokenizer, dataset, kwargs, *, steps, eval_every, eval_seed, progress, tau, budget_ratio,
    snap_window, task: toy.Task = toy.TOY_TASK, name: str = "pair",
    pair_options: dict[str, Any] | None = None,
):
    from pairht_trl import PairGRPOConfig, PairGRPOTrainer

    record = MethodResult(name, steps, math.nan, math.nan, 0, 0, 0.0)
    meter = _DrawMeter()
    cb = _make_callback(
        method=name,
        task=task,
        tokenizer=tokenizer,
        steps=steps,
        eval_every=eval_every,
        eval_seed=eval_seed,
        tokens_fn=meter.poll,
        record=record,
        progress=progress,
    )
    cfg = PairGRPOConfig(
        **kwargs,
        mode="exact",
        tau=tau,
        snap_window=snap_window,
        budget_ratio=budget_ratio,
        design_seed=kwargs["seed"],
        **(pair_options or {}),
    )
    trainer = PairGRPOTrainer(
        model=model,
        reward_funcs=task.reward,
        args=cfg,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[cb],
    )
    meter.trainer = trainer
    _quiet(trainer)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train()
    record.seconds = time.perf_counter() - t0 - cb.eval_seconds
    record.cpu_seconds = time.process_time() - c0 - cb.eval_cpu
    record.prefix_tokens, record.suffix_tokens = meter.poll()
    record.full_suffix_ht = meter.full_suffix_ht
    record.initial_reward = record.curve[0][2]
    record.final_reward = record.curve[-1][2]
    return record


# --------------------------------------------------------------------------- entry point


def run_comparison(
    steps: int | None = None,
    seed: int = 0,
    out_dir: str | os.PathLike = "demo-out",
    *,
    methods: Sequence[str] = METHODS,
    num_generations: int = 8,
    prompts_per_step: int = 8,
    tau: int = 6,
    snap_window: int = 8,
    budget_ratio: float = 0.5,
    learning_rate: float = 3e-4,
    warmup_steps: int = 400,
    eval_every: int | None = None,
    plot: bool = True,
    progress: bool = True,
    console: Any = None,
) -> ComparisonResult:
    r"""Train the same warm-started tiny policy with GRPO and with PAIR; table, JSON and plot.

    Parameters
    ----------
    steps : int, optional
        Optimizer steps per method. Default 60, or 12 when ``PAIRHT_E2E_SHORT=1``.
    seed : int
        Seeds model initialisation, warm-up, prompt order, sampling and the PAIR design.
    out_dir : path
        Receives ``results.json``, ``table.txt`` and ``reward_vs_tokens.png``.
    methods : subset of ("grpo", "pair")
    num_generations : int
        Group size G (candidates per prompt).
    prompts_per_step : int
        Prompts per optimizer step (``G * prompts_per_step`` completions per step).
    tau, snap_window : int
        PAIR prefix checkpoint and newline snap window, in tokens.
    budget_ratio : float
        PAIR expected suffix budget as a fraction of the full-group predicted suffix cost.
    learning_rate : float
        AdamW learning rate of both runs (constant schedule).
    warmup_steps : int
        Supervised warm-up steps before RL (shared: run once, then copied).
    eval_every : int, optional
        Held-out evaluation period in steps (default ``max(1, steps // 6)``).
    plot : bool
        Write the PNG (matplotlib, imported only here).
    progress, console
        Progress bars and a ``rich.console.Console`` for the table (default: a new one).

    Returns
    -------
    ComparisonResult

    Examples
    --------
    >>> res = run_comparison(steps=12, seed=0, out_dir="demo-out")  # doctest: +SKIP
    >>> pair, grpo = res.results["pair"], res.results["grpo"]  # doctest: +SKIP
    >>> pair.generated_tokens < grpo.generated_tokens  # doctest: +SKIP
    True
    >>> round(res.suffix_ratio(), 1)  # doctest: +SKIP
    0.5
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods must be a non-empty subset of {METHODS}; got {list(methods)!r}")
    if steps is None:
        steps = 12 if _short() else 60
    for name, v in (("steps", steps), ("num_generations", num_generations),
                    ("prompts_per_step", prompts_per_step), ("tau", tau),
                    ("warmup_steps", warmup_steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int; got {name}={v!r}")
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2 (pairs need two); got {num_generations}")
    eval_every = eval_every or max(1, steps // 6)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    # The toy model's matmuls are tiny: a second intra-op thread gains nothing, and on a busy
    # machine (CI's two cores) an oversubscribed thread pool makes each step many times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_comparison(
            steps, seed, out, methods, num_generations, prompts_per_step, tau, snap_window,
            budget_ratio, learning_rate, warmup_steps, eval_every, plot, progress, console,
        )
    finally:
        torch.set_num_threads(threads)


def _run_comparison(
    steps, seed, out, methods, num_generations, prompts_per_step, tau, snap_window,
    budget_ratio, learning_rate, warmup_steps, eval_every, plot, progress, console,
) -> ComparisonResult:
    tokenizer = toy.make_tokenizer()
    base, warm = toy.warm_started_model(seed, steps=warmup_steps, progress=progress)
    dataset = toy.make_dataset(steps * prompts_per_step, rng=seed, split="train")
    max_len = toy.response_length(toy.MAX_COUNT) + 8
    results: dict[str, MethodResult] = {}
    eval_seed = seed + 1
    for method in methods:
        kwargs = _base_kwargs(
            out / method,
            steps=steps,
            seed=seed,
            num_generations=num_generations,
            prompts_per_step=prompts_per_step,
            learning_rate=learning_rate,
            max_completion_length=max_len,
        )
        model = copy.deepcopy(base)
        common = dict(steps=steps, eval_every=eval_every, eval_seed=eval_seed, progress=progress)
        if method == "grpo":
            results[method] = _run_grpo(model, tokenizer, dataset, kwargs, **common)
        else:
            results[method] = _run_pair(
                model, tokenizer, dataset, kwargs, tau=tau, snap_window=snap_window,
                budget_ratio=budget_ratio, **common,
            )
    settings = dict(
        steps=steps, seed=seed, num_generations=num_generations,
        prompts_per_step=prompts_per_step, tau=tau, snap_window=snap_window,
        budget_ratio=budget_ratio, learning_rate=learning_rate, warmup_steps=warmup_steps,
        warmup_seconds=warm.seconds, warmup_final_loss=warm.final_loss, eval_every=eval_every,
        eval="held-out success rate, 16 combos x 8 completions sampled at temperature 1",
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

    table = Table(
        title="PAIR vs GRPO on the toy task (CPU)",
        caption=(
            "reward: held-out success, 16 prompts x 8 samples at T=1. tokens: generated "
            "(PAIR: prefixes + continued suffixes). wall/cpu s: training, eval excluded"
        ),
    )
    for col in ("method", "reward start", "reward end", "prefix tok", "suffix tok",
                "total tok", "wall s", "cpu s"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for name, r in result.results.items():
        table.add_row(
            name.upper(),
            f"{r.initial_reward:.3f}",
            f"{r.final_reward:.3f}",
            f"{r.prefix_tokens:,}",
            f"{r.suffix_tokens:,}",
            f"{r.generated_tokens:,}",
            f"{r.seconds:.1f}",
            f"{r.cpu_seconds:.1f}",
        )
    console = console or Console()
    console.print(table)
    extra = ""
    if set(result.results) == set(METHODS):
        extra = (
            f"PAIR suffix tokens / GRPO tokens past the checkpoint: {result.suffix_ratio():.3f}; "
            f"/ its own HT full-group estimate: {result.results['pair'].suffix_fraction:.3f} "
            f"(budget_ratio {result.settings['budget_ratio']})"
        )
        console.print(extra)
    rec = Console(record=True, width=110, file=io.StringIO())
    rec.print(table)
    if extra:
        rec.print(extra)
    return rec.export_text()


def _plot(result: ComparisonResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    for name, r in result.results.items():
        steps = [c[0] for c in r.curve]
        xs = [c[1] for c in r.curve]
        ys = [c[2] for c in r.curve]
        ax.plot(xs, ys, marker="o", label=name.upper())
        bx.plot(steps, ys, marker="o", label=name.upper())
    ax.set_xlabel("generated tokens (prefix + suffix)")
    ax.set_ylabel("held-out reward (sampled, T=1)")
    ax.set_title("Reward vs generated tokens")
    bx.set_xlabel("optimizer step")
    bx.set_title("Reward vs step")
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.legend()
    fig.suptitle("PAIR vs GRPO, toy task (same warm start, same prompts)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``pairht demo`` / ``python -m pairht_demo.demo``: run the comparison and print the table."""
    p = argparse.ArgumentParser(prog="pairht demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per method")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="demo-out")
    p.add_argument("--methods", default="grpo,pair", help="comma-separated subset of grpo,pair")
    p.add_argument("--budget-ratio", type=float, default=0.5)
    p.add_argument("--tau", type=int, default=6)
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    res = run_comparison(
        steps=a.steps,
        seed=a.seed,
        out_dir=a.out_dir,
        methods=[m.strip() for m in a.methods.split(",") if m.strip()],
        budget_ratio=a.budget_ratio,
        tau=a.tau,
        plot=not a.no_plot,
        progress=not a.no_progress,
    )
    print(f"wrote {res.table_path}, {res.out_dir / 'results.json'}"
          + (f", {res.plot_path}" if res.plot_path else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
