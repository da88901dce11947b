"""The demo's tasks and their settings: the one registry ``pairht demo``, ``pairht experiment``
and the benchmarks read task names and defaults from.

A task (:class:`pairht.demo.toy.Task`) is the verifiable problem, its splits and its imperfect
demonstrator; its defaults are what the comparison runs it with (prefix checkpoint, learning
rate, supervised warm-up, steps, the policy's position budget).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pairht.demo import toy
from pairht.demo.chain import CHAIN_EARLY_TASK, CHAIN_LONG_TASK, CHAIN_TASK

__all__ = ["DEFAULT_TASK", "TASKS", "TASK_DEFAULTS", "RunSettings", "get_task"]

#: Every task by name (the only source of task names).
TASKS: dict[str, toy.Task] = {
    "chain": CHAIN_TASK,
    "chain_early": CHAIN_EARLY_TASK,
    "chain_long": CHAIN_LONG_TASK,
    "toy": toy.TOY_TASK,
}

# Chain responses reach 58 tokens after a prompt of about 8.
_CHAIN_DEFAULTS: dict[str, int | float] = dict(tau=8, learning_rate=1e-4, warmup_steps=600,
                                               steps=40, prompts_per_step=8, max_positions=96)

#: Per-task defaults of the comparison: prefix checkpoint ``tau``, learning rate, supervised
#: warm-up steps, optimizer steps (GRPO's, in the demo), prompts per step and the policy's
#: position budget.
TASK_DEFAULTS: dict[str, dict[str, int | float]] = {
    "chain": _CHAIN_DEFAULTS,
    "chain_early": _CHAIN_DEFAULTS,  # the same task with another demonstrator
    # Responses of 64-124 tokens: a longer warm-up to learn them (1,500 steps reach 0.74
    # held-out success, the demonstrator's rate; 600 left the policy at 0.18) and positions for
    # 132 + the prompt. 16 prompts x G = 8 = 128 rows a step: on this CPU half of 128 rows
    # decodes in about 0.73x the time, half of 64 in 0.75-0.9x (benchmarks/bench_decode_rows.py),
    # so the rows PAIR does not continue save time, not only tokens (docs/experiment.md).
    "chain_long": {**_CHAIN_DEFAULTS, "warmup_steps": 1500, "prompts_per_step": 16,
                   "max_positions": 160},
    "toy": dict(tau=6, learning_rate=3e-4, warmup_steps=400, steps=60, prompts_per_step=8,
                max_positions=64),
}

#: The task ``pairht demo`` and ``pairht experiment`` run by default: long responses, most of
#: them after a prefix that shows the failures decided early (the regime PAIR is built for).
DEFAULT_TASK = "chain_long"


def get_task(name: str) -> toy.Task:
    """The task registered as ``name`` (a ``ValueError`` naming the choices otherwise)."""
    if name not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}; got task={name!r}")
    return TASKS[name]


@dataclass(frozen=True)
class RunSettings:
    """How a training run of the demo uses a task: the settings ``pairht demo``
    (:func:`pairht.demo.demo.run_comparison`) and ``pairht experiment``
    (:func:`pairht.demo.experiment.run_experiment`) share. ``None`` stands for the task's
    default (:data:`TASK_DEFAULTS`), filled in by :meth:`resolved`.

    Attributes
    ----------
    task : str
        A name in :data:`TASKS` (default :data:`DEFAULT_TASK`).
    steps : int, optional
        Optimizer steps per run (in the demo's token-matched comparison, GRPO's).
    num_generations : int
        Group size G (candidates per prompt).
    prompts_per_step : int, optional
        Prompts per optimizer step (``G * prompts_per_step`` completions per step).
    tau, snap_window : int
        PAIR's prefix checkpoint (optional: the task's) and newline snap window, in tokens.
    budget_ratio : float
        PAIR's expected suffix budget as a fraction of the full group's predicted suffix cost.
    learning_rate : float, optional
        AdamW learning rate (constant schedule).
    warmup_steps : int, optional
        Supervised warm-up steps before RL (the chain tasks' cached on disk under
        ``$PAIRHT_CACHE``).
    eval_every : int, optional
        Held-out evaluation period in steps (the caller's default: a share of the steps).

    Examples
    --------
    >>> run = RunSettings("toy", learning_rate=1e-3).resolved(evaluations=5)
    >>> run.steps, run.tau, run.learning_rate, run.warmup_steps, run.eval_every
    (60, 6, 0.001, 400, 12)
    """

    task: str = DEFAULT_TASK
    steps: int | None = None
    num_generations: int = 8
    prompts_per_step: int | None = None
    tau: int | None = None
    snap_window: int = 8
    budget_ratio: float = 0.5
    learning_rate: float | None = None
    warmup_steps: int | None = None
    eval_every: int | None = None

    def resolved(self, *, evaluations: int) -> RunSettings:
        """Every ``None`` replaced by the task's default, and ``eval_every`` (when not given)
        by ``max(1, steps // evaluations)``; ``ValueError`` naming the field for an unknown
        task, a count that is not a positive int, or fewer than two generations."""
        get_task(self.task)  # a ValueError naming the tasks for an unknown name
        d = TASK_DEFAULTS[self.task]
        run = dataclasses.replace(
            self,
            steps=int(d["steps"]) if self.steps is None else self.steps,
            tau=int(d["tau"]) if self.tau is None else self.tau,
            learning_rate=(float(d["learning_rate"]) if self.learning_rate is None
                           else self.learning_rate),
            warmup_steps=int(d["warmup_steps"]) if self.warmup_steps is None else self.warmup_steps,
            prompts_per_step=(int(d["prompts_per_step"]) if self.prompts_per_step is None
                              else self.prompts_per_step),
        )
        for name in ("steps", "num_generations", "prompts_per_step", "tau", "warmup_steps"):
            v = getattr(run, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int; got {name}={v!r}")
        if run.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 (pairs need two); got "
                             f"{run.num_generations}")
        assert run.steps is not None  # filled in above
        return dataclasses.replace(run, eval_every=run.eval_every
                                   or max(1, run.steps // evaluations))

    @property
    def max_positions(self) -> int:
        """The policy's position budget for this task (:data:`TASK_DEFAULTS`)."""
        return int(TASK_DEFAULTS[self.task]["max_positions"])
