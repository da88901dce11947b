"""Reward functions under PAIR's failure policy (``PairGRPOConfig.reward_failure``).

:class:`GuardedReward` wraps a synchronous reward function: ``"raise"`` stops training with a
:class:`~pairht.trl.config.RewardFunctionError` naming the function and the prompt,
``"zero"`` scores a failing completion 0 and counts it. :class:`RewardRows` says where the
completions of the call in progress sit in the generation batch, so that a failure names its
prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from pairht.trl.config import RewardFunctionError

logger = logging.getLogger(__name__)


@dataclass
class RewardRows:
    """Where the completions of the reward call in progress sit in the generation batch.

    Set by the trainer around its own reward calls (which pass only the selected rows), so
    that a failure names the prompt. ``rows`` holds each completion's row of the flattened
    ``(B * G)`` batch and ``group_size`` is ``G``; ``None``: unknown (the completions are
    then named by their position in the call).
    """

    rows: list[int] | None = None
    group_size: int | None = None


class GuardedReward:
    """A synchronous reward function with PAIR's failure policy (``reward_failure``).

    ``"raise"``: an exception propagates as :class:`RewardFunctionError` naming the function
    and the prompt, from the function's own exception. ``"zero"``: the completions that raise
    score 0 (paper: "any parser exception is a failed rollout") and are counted in
    ``stats["reward_failures"]``; the first traceback is logged once. Either way a batch call
    that raises is retried one completion at a time, to find the failing ones (``"raise"``
    stops at the first).
    """

    def __init__(self, func: Callable[..., Any], stats: dict[str, int], policy: str = "raise",
                 where: RewardRows | None = None) -> None:
        self.func = func
        self.stats = stats
        self.policy = policy
        self.where = where if where is not None else RewardRows()
        self.__name__ = getattr(func, "__name__", type(func).__name__)
        self._warned = False

    def _describe(self, k: int, n: int) -> str:
        """The failing completion ``k`` of ``n``: its prompt and candidate when known."""
        rows, g = self.where.rows, self.where.group_size
        if rows is not None and g and len(rows) == n:
            row = rows[k]
            return f"prompt {row // g} (candidate {row % g} of {g}, batch row {row})"
        return f"completion {k} of the {n} it was called with"

    def __call__(self, *, prompts: list, completions: list, completion_ids: list, **kw: Any):
        n = len(prompts)
        try:
            return list(self.func(prompts=prompts, completions=completions,
                                  completion_ids=completion_ids, **kw))
        except Exception as exc:  # find the failing rows (both policies need them)
            batch_exc = exc
        out: list[float | None] = []
        for k in range(n):
            row_kw = {
                key: (val[k : k + 1] if isinstance(val, list) and len(val) == n else val)
                for key, val in kw.items()
            }
            try:
                (value,) = self.func(
                    prompts=prompts[k : k + 1],
                    completions=completions[k : k + 1],
                    completion_ids=completion_ids[k : k + 1],
                    **row_kw,
                )
                out.append(value)
            except Exception as exc:
                if self.policy == "raise":
                    raise RewardFunctionError(
                        f"reward function {self.__name__!r} raised on {self._describe(k, n)}: "
                        f"{exc!r}. Fix the function, or set reward_failure='zero' to score "
                        f"such completions 0 (counted in pair/reward_failures)"
                    ) from exc
                out.append(0.0)
                self.stats["reward_failures"] += 1
                if not self._warned:
                    # Reward 0 is the protocol for a failed verification, but a bug in the
                    # reward function looks the same: show the first traceback once.
                    self._warned = True
                    logger.warning(
                        "reward function %s raised on a completion; it is scored 0 and counted "
                        "in pair/reward_failures (first failure shown, later ones only counted)",
                        self.__name__, exc_info=True,
                    )
        if self.policy == "raise":
            # no completion raises alone: the batch call itself is what fails
            raise RewardFunctionError(
                f"reward function {self.__name__!r} raised on a batch of {n} completions, "
                f"though each scores alone: {batch_exc!r}"
            ) from batch_exc
        return out


def is_async(func: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        type(func).__call__
    )


def guard_reward_funcs(funcs: list[Any], stats: dict[str, int], policy: str,
                       where: RewardRows) -> list[Any]:
    """Synchronous reward functions wrapped in :class:`GuardedReward`; modules and async
    functions are left as TRL calls them."""
    return [f if isinstance(f, nn.Module) or not callable(f) or is_async(f)
            else GuardedReward(f, stats, policy, where) for f in funcs]


__all__ = ["GuardedReward", "RewardRows", "guard_reward_funcs", "is_async", "report_reward_calls"]


def report_reward_calls(accelerator: Any, stats: dict[str, int], metrics: Any, calls: int,
                        step: int) -> None:
    """Log ``pair/verifier_calls`` and ``pair/reward_failures`` summed over processes (and
    reset the count); warn on the main process when a completion was scored 0."""
    import warnings

    import numpy as np

    from pairht.torch.distributed import gather_rows
    from pairht.trl.config import RewardFailureWarning

    n_calls = gather_rows(accelerator, np.array([calls], dtype=np.int64))
    fails = gather_rows(accelerator, np.array([stats["reward_failures"]], dtype=np.int64))
    stats["reward_failures"] = 0
    metrics["pair/verifier_calls"].append(float(n_calls.sum()))
    metrics["pair/reward_failures"].append(float(fails.sum()))
    n_failed = int(fails.sum())
    if n_failed and accelerator.is_main_process:
        # only reward_failure="zero" gets here with failures ("raise" has raised). Every step
        # says so (the step in the text keeps Python's once-per-message filter from hiding the
        # later ones): a 0 for a crash is a reward no one computed.
        warnings.warn(
            f"step {step}: {n_failed} reward function call(s) raised and were scored 0 "
            f"(reward_failure='zero'; counted in pair/reward_failures)",
            RewardFailureWarning,
            stacklevel=3,
        )
