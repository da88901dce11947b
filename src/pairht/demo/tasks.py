"""The demo's tasks and their settings: the one registry ``pairht demo``, ``pairht experiment``
and the benchmarks read task names and defaults from.

A task (:class:`pairht.demo.toy.Task`) is the verifiable problem, its splits and its imperfect
demonstrator; its defaults are what the comparison runs it with (prefix checkpoint, learning
rate, supervised warm-up, steps, the policy's position budget).
"""

from __future__ import annotations

from pairht.demo import toy
from pairht.demo.chain import CHAIN_EARLY_TASK, CHAIN_LONG_TASK, CHAIN_TASK

__all__ = ["DEFAULT_TASK", "TASKS", "TASK_DEFAULTS", "get_task", "task_settings"]

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


def task_settings(
    task: str,
    tau: int | None = None,
    learning_rate: float | None = None,
    warmup_steps: int | None = None,
    prompts_per_step: int | None = None,
) -> tuple[int, float, int, int]:
    """``(tau, learning_rate, warmup_steps, prompts_per_step)`` of a run on ``task``: each
    value given, else the task's default (:data:`TASK_DEFAULTS`).

    Examples
    --------
    >>> task_settings("toy", learning_rate=1e-3)
    (6, 0.001, 400, 8)
    """
    get_task(task)  # a ValueError naming the tasks for an unknown name
    defaults = TASK_DEFAULTS[task]
    return (
        int(defaults["tau"]) if tau is None else tau,
        float(defaults["learning_rate"]) if learning_rate is None else learning_rate,
        int(defaults["warmup_steps"]) if warmup_steps is None else warmup_steps,
        int(defaults["prompts_per_step"]) if prompts_per_step is None else prompts_per_step,
    )
