r"""Per-step wall-clock split of a GRPO / PAIR training step (``pair/time_<phase>`` metrics).

A :class:`StepTimer` accumulates ``time.perf_counter`` seconds per named phase within one
optimizer step. Phases nest and are *exclusive*: while an inner phase runs, the outer one is
paused, so a step's phases never double count and

.. math:: t_{\text{step}} = \sum_{\text{phase}} t_{\text{phase}} + t_{\text{other}},

``other`` being whatever no phase covered (TRL's bookkeeping, gradient clipping, callbacks).

:func:`instrument` wraps the seams every ``trl.GRPOTrainer`` has (``_generate_single_turn``,
``_calculate_rewards``, ``_generate_and_score_completions``, ``training_step`` and the
optimizer step), so plain GRPO and :class:`pairht.trl.PairGRPOTrainer` are split the same way;
the PAIR trainer additionally marks its own phases inside generation (prefix, features, heads,
allocation, continuation). Phases (:data:`PHASES`):

``prefix``
    PAIR phase 1: decoding every candidate to its prefix checkpoint (features excluded).
``features``
    PAIR: the feature forward over the last prefix positions.
``heads``
    PAIR: head prediction and the head refit on the previous batch's labels.
``allocation``
    PAIR: :func:`pairht.step.plan_continuations` (allocation, design, draw, joints).
``continuation``
    PAIR phase 2: resuming the selected candidates to termination.
``generation``
    Plain GRPO: decoding every candidate to the end; PAIR: the rest of its generation seam
    (gathers, bookkeeping).
``verifier``
    Reward functions (``_calculate_rewards``).
``scoring``
    The rest of TRL's ``_generate_and_score_completions`` (tokenising, padding, advantages,
    PAIR's pair-HT advantages and metrics).
``update``
    Loss forward and backward (``training_step``) and the optimizer step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from transformers import TrainerCallback

__all__ = ["PHASES", "StepTimer", "format_split", "instrument"]

PHASES: tuple[str, ...] = (
    "prefix", "features", "heads", "allocation", "continuation", "generation", "verifier",
    "scoring", "update", "other",
)


class StepTimer:
    """Exclusive wall-clock seconds per phase, per optimizer step.

    ``with timer.phase("heads"): ...`` adds the block's seconds to ``heads`` minus the seconds
    of any phase opened inside it. :meth:`start_step` / :meth:`end_step` bracket one step;
    ``end_step`` files ``other = step seconds - sum of phases`` and appends the step's split to
    :attr:`steps`. Phases opened outside a step are counted into the next step that ends.

    Attributes
    ----------
    steps : list of dict
        One ``{phase: seconds}`` per finished step (every name of :data:`PHASES`, plus
        ``total``).
    clock : callable
        Seconds (``time.perf_counter``; replaceable for tests).

    Examples
    --------
    >>> ticks = iter([0.0, 1.0, 3.0, 4.0])  # the clock's readings, in call order
    >>> timer = StepTimer(clock=lambda: next(ticks))
    >>> timer.start_step()
    >>> with timer.phase("update"):
    ...     pass
    >>> split = timer.end_step()
    >>> split["update"], split["other"], split["total"]
    (2.0, 2.0, 4.0)
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.steps: list[dict[str, float]] = []
        self._acc: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._stack: list[str] = []
        self._since = 0.0  # when the innermost open phase last resumed
        self._step_start: float | None = None

    def _check(self, name: str) -> None:
        if name not in PHASES or name == "other":
            raise ValueError(
                f"phase must be one of {PHASES[:-1]} ('other' is the remainder); got {name!r}"
            )

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count the block's exclusive seconds into ``name`` (nested phases pause it)."""
        self._check(name)
        now = self.clock()
        if self._stack:
            self._acc[self._stack[-1]] += now - self._since
        self._stack.append(name)
        self._since = now
        try:
            yield
        finally:
            now = self.clock()
            self._acc[self._stack.pop()] += now - self._since
            self._since = now

    def add(self, name: str, seconds: float, *, taken_from: str | None = None) -> None:
        """Add ``seconds`` measured elsewhere to ``name`` (and remove them from ``taken_from``,
        a phase that timed them as part of itself)."""
        self._check(name)
        self._acc[name] += seconds
        if taken_from is not None:
            self._check(taken_from)
            self._acc[taken_from] -= seconds

    def start_step(self) -> None:
        """Open a step (a step already open is restarted from now)."""
        self._step_start = self.clock()

    def end_step(self) -> dict[str, float] | None:
        """Close the open step: its split (``other`` and ``total`` included), or None when no
        step was open."""
        if self._step_start is None:
            return None
        now = self.clock()
        if self._stack:  # a phase spanning the step boundary: count its part so far here
            self._acc[self._stack[-1]] += now - self._since
            self._since = now
        total = now - self._step_start
        split = dict(self._acc)
        split["other"] = max(total - sum(v for k, v in split.items() if k != "other"), 0.0)
        split["total"] = total
        self.steps.append(split)
        self._acc = dict.fromkeys(PHASES, 0.0)
        self._step_start = None
        return split

    def mean(self, skip: int = 0) -> dict[str, float]:
        """Mean seconds per step of every phase and ``total`` over ``steps[skip:]`` (zeros when
        there are none)."""
        rows = self.steps[skip:]
        keys = (*PHASES, "total")
        if not rows:
            return dict.fromkeys(keys, 0.0)
        return {k: sum(r[k] for r in rows) / len(rows) for k in keys}


def _wrap(obj: Any, attr: str, timer: StepTimer, name: str) -> None:
    method = getattr(obj, attr)
    if getattr(method, "_pair_timed", False):
        return

    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        with timer.phase(name):
            return method(*args, **kwargs)

    timed._pair_timed = True  # type: ignore[attr-defined]
    setattr(obj, attr, timed)


def instrument(trainer: Any, timer: StepTimer | None = None) -> StepTimer:
    """Time a ``trl.GRPOTrainer`` (plain or PAIR) per step and log ``pair/time_<phase>``.

    Wraps the instance's ``_generate_single_turn`` (``generation``), ``_calculate_rewards``
    (``verifier``), ``_generate_and_score_completions`` (``scoring``) and ``training_step``
    (``update``), and adds a callback (first in the list, so that other callbacks' work at
    step end, e.g. evaluation, stays outside the step) that opens and closes the step and
    times the optimizer step as ``update``. Calling it twice on one trainer is harmless.

    Parameters
    ----------
    trainer : trl.GRPOTrainer
    timer : StepTimer, optional
        Default: ``trainer.step_timer`` if set, else a new one (stored there).

    Returns
    -------
    StepTimer
    """
    timer = timer or getattr(trainer, "step_timer", None) or StepTimer()
    trainer.step_timer = timer
    for attr, name in (
        ("_generate_single_turn", "generation"),
        ("_calculate_rewards", "verifier"),
        ("_generate_and_score_completions", "scoring"),
        ("training_step", "update"),
    ):
        _wrap(trainer, attr, timer, name)
    handler = trainer.callback_handler
    if any(isinstance(cb, _TimingCallback) for cb in handler.callbacks):
        return timer
    handler.callbacks.insert(0, _TimingCallback(trainer, timer))
    return timer


class _TimingCallback(TrainerCallback):
    """Steps the timer at step begin/end, times the optimizer step, logs the split."""

    def __init__(self, trainer: Any, timer: StepTimer) -> None:
        self.trainer = trainer
        self.timer = timer
        self._opt: Any = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.timer.start_step()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._opt = self.timer.phase("update")
        self._opt.__enter__()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._opt is not None:
            self._opt.__exit__(None, None, None)
            self._opt = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        split = self.timer.end_step()
        metrics = getattr(self.trainer, "_metrics", None)
        if split is None or metrics is None:
            return
        for key, value in split.items():
            metrics["train"][f"pair/time_{key}"].append(value)


def format_split(splits: dict[str, dict[str, float]]) -> str:
    """A plain-text table of mean seconds per step and shares, one column pair per method.

    Parameters
    ----------
    splits : {method: StepTimer.mean() result}

    Returns
    -------
    str
    """
    names = list(splits)
    head = f"{'phase':<13}" + "".join(f"{n + ' ms':>12}{'share':>8}" for n in names)
    lines = [head]
    for key in (*PHASES, "total"):
        if key != "total" and all(splits[n].get(key, 0.0) == 0.0 for n in names):
            continue
        row = f"{key:<13}"
        for n in names:
            tot = splits[n].get("total", 0.0)
            v = splits[n].get(key, 0.0)
            share = v / tot if tot > 0 else 0.0
            row += f"{1000 * v:>12.1f}{100 * share:>7.1f}%"
        lines.append(row)
    return "\n".join(lines)
