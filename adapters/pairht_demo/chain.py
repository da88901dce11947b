r"""Chain arithmetic with a scratchpad: a task whose failures are visible early in the response.

A prompt gives a start digit ``s``, a step digit ``d`` (both as words) and a count ``k``
(4 to 9)::

    start three step seven count 4 :

and the correct response keeps a numbered running value modulo 10, one scratchpad line per
step, then states the answer::

    1 + 7 = 0
    2 + 7 = 7
    3 + 7 = 4
    4 + 7 = 1
    answer 1

Reward is 1 when the last ``answer`` line holds ``(s + k d) mod 10``, else 0
(:func:`chain_reward`). Responses take ``6k + 4`` tokens (28 to 58), so a prefix of ``tau = 8``
tokens (one or two scratchpad lines after snapping) never ends the response: the regime PAIR is
built for, unlike the toy task of :mod:`pairht_demo.toy`, where prefixes are half the response.

Why the prefix predicts success. The warm-up demonstrator slips with probability 0.08 on each
line (writes a wrong running value) and then continues *consistently* from what it wrote, so one
early slip fixes the final answer wrong; its success rate is ``0.92**k`` (0.72 at ``k = 4``,
0.47 at ``k = 9``). A policy that learned it fails for reasons a prefix shows (an early slip, a
long count), and RL raises success by learning not to slip.

Held-out split: the ``(s, d, k)`` with ``(s + d + k) % 5 == 0`` (120 of 600) are
evaluation-only (:data:`CHAIN_TASK`'s ``eval_items``) and never trained on.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from pairht._validation import RNGLike, as_generator
from pairht_demo.toy import EOS, NEWLINE, PAD, UNK, Task, _as_text, graded_items

__all__ = [
    "CHAIN_EARLY_TASK",
    "CHAIN_TASK",
    "EARLY_SLIPS",
    "EVAL_ITEMS",
    "MAX_COUNT",
    "MIN_COUNT",
    "TRAIN_ITEMS",
    "chain_reward",
    "demonstration",
    "prompt_text",
    "response_length",
    "target_completion",
]

MIN_COUNT = 4
MAX_COUNT = 9
_P_SLIP = 0.08
DIGIT_WORDS: tuple[str, ...] = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
)
_WORDS: tuple[str, ...] = (
    PAD, EOS, UNK, NEWLINE, "start", "step", "count", ":", "+", "=", "answer",
    *(str(i) for i in range(10)), *DIGIT_WORDS,
)
_ALL = tuple(
    (s, d, k) for s in range(10) for d in range(10) for k in range(MIN_COUNT, MAX_COUNT + 1)
)
EVAL_ITEMS: tuple[tuple[int, int, int], ...] = tuple(it for it in _ALL if sum(it) % 5 == 0)
TRAIN_ITEMS: tuple[tuple[int, int, int], ...] = tuple(it for it in _ALL if sum(it) % 5 != 0)


def prompt_text(item: tuple[int, int, int]) -> str:
    """The prompt for ``(start, step, count)``, e.g. ``"start three step seven count 4 :"``."""
    s, d, k = _check(item)
    return f"start {DIGIT_WORDS[s]} step {DIGIT_WORDS[d]} count {k} :"


def _completion_text(d: int, values: Sequence[int]) -> str:
    lines = [f"{j} + {d} = {v}" for j, v in enumerate(values, start=1)]
    lines.append(f"answer {values[-1]}")
    return "".join(f"{line} {NEWLINE} " for line in lines).rstrip(" ")


def target_completion(item: tuple[int, int, int]) -> str:
    r"""The correct completion text (without ``<eos>``).

    Examples
    --------
    >>> target_completion((3, 7, 4))
    '1 + 7 = 0 \n 2 + 7 = 7 \n 3 + 7 = 4 \n 4 + 7 = 1 \n answer 1 \n'
    """
    s, d, k = _check(item)
    return _completion_text(d, [(s + j * d) % 10 for j in range(1, k + 1)])


def response_length(k: int) -> int:
    """Tokens of the correct response for count ``k``, ``<eos>`` included: ``6k + 4``."""
    return 6 * k + 4


#: Slip probabilities of the early-slip demonstrator (:data:`CHAIN_EARLY_TASK`): on the first
#: scratchpad line, then on every later one.
EARLY_SLIPS = (0.15, 0.01)


def demonstration(item: tuple[int, int, int], rng: RNGLike = None, *,
                  slips: tuple[float, float] = (_P_SLIP, _P_SLIP)) -> tuple[str, bool]:
    r"""One completion of the imperfect demonstrator and whether it is correct.

    The first line slips with probability ``slips[0]``, every later line with ``slips[1]``
    (default 0.08 each; the running value moves to a uniformly drawn other digit); later lines
    continue from the written value, so the answer is wrong after a slip.

    Examples
    --------
    >>> text, ok = demonstration((1, 2, 5), rng=0)
    >>> ok == (chain_reward([prompt_text((1, 2, 5))], [text]) == [1.0])
    True
    """
    s, d, k = _check(item)
    gen = as_generator(rng)
    values, v = [], s
    for line in range(k):
        v = (v + d) % 10
        if gen.random() < slips[min(line, 1)]:
            v = (v + int(gen.integers(1, 10))) % 10
        values.append(v)
    return _completion_text(d, values), values[-1] == (s + k * d) % 10


def _check(item: Any) -> tuple[int, int, int]:
    ok = (
        isinstance(item, (tuple, list))
        and len(item) == 3
        and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in item)
    )
    if not ok or not (0 <= item[0] <= 9 and 0 <= item[1] <= 9
                      and MIN_COUNT <= item[2] <= MAX_COUNT):
        raise ValueError(
            f"item must be (start, step, count) with start, step in 0..9 and count in "
            f"{MIN_COUNT}..{MAX_COUNT}; got {item!r}"
        )
    return int(item[0]), int(item[1]), int(item[2])


def _parse_prompt(prompt: str) -> tuple[int, int, int]:
    w = prompt.split()
    ok = (len(w) == 7 and w[0] == "start" and w[2] == "step" and w[4] == "count"
          and w[6] == ":" and w[1] in DIGIT_WORDS and w[3] in DIGIT_WORDS and w[5].isdigit())
    if not ok:
        raise ValueError(
            f"prompt must read 'start <word> step <word> count <k> :' (the chain task); "
            f"got {prompt!r}"
        )
    return DIGIT_WORDS.index(w[1]), DIGIT_WORDS.index(w[3]), int(w[5])


def chain_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    start: Sequence[int] | None = None,
    step: Sequence[int] | None = None,
    count: Sequence[int] | None = None,
    **kwargs: Any,
) -> list[float]:
    r"""Binary verifiable reward (TRL signature): 1 when the last ``answer v`` line has
    ``v = (start + count * step) mod 10``; the scratchpad itself is not graded.

    Examples
    --------
    >>> p = prompt_text((3, 7, 4))
    >>> chain_reward([p, p], ["1 + 7 = 0 \n answer 1", "answer 9"])
    [1.0, 0.0]
    """
    items = graded_items(prompts, completions, (start, step, count),
                         lambda s, d, k: _check((int(s), int(d), int(k))), _parse_prompt)
    out = []
    for (s, d, k), completion in zip(items, completions):
        words = _as_text(completion).split()
        answer = None
        for a, b in itertools.pairwise(words):
            if a == "answer":
                answer = b
        out.append(1.0 if answer == str((s + k * d) % 10) else 0.0)
    return out


def _sample(n: int, rng: RNGLike, split: str) -> list[tuple[int, int, int]]:
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval'; got {split!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive int; got {n!r}")
    items = EVAL_ITEMS if split == "eval" else TRAIN_ITEMS
    return [items[i] for i in as_generator(rng).integers(len(items), size=int(n))]


def _columns(items: Sequence[tuple[int, int, int]]) -> dict[str, list[int]]:
    return {
        "start": [int(s) for s, _, _ in items],
        "step": [int(d) for _, d, _ in items],
        "count": [int(k) for _, _, k in items],
    }


CHAIN_TASK = Task(
    name="chain",
    words=_WORDS,
    max_new_tokens=response_length(MAX_COUNT) + 8,
    prompt=prompt_text,
    demonstration=demonstration,
    reward=chain_reward,
    sample=_sample,
    columns=_columns,
    answer=target_completion,
    train_items=TRAIN_ITEMS,
    # A fixed 32-prompt evaluation subset keeps held-out scoring cheap (8 samples each).
    eval_items=tuple(EVAL_ITEMS[i] for i in range(0, len(EVAL_ITEMS), len(EVAL_ITEMS) // 32))[:32],
)


def _early_demonstration(item: tuple[int, int, int], rng: RNGLike = None) -> tuple[str, bool]:
    return demonstration(item, rng, slips=EARLY_SLIPS)


#: The chain task with a demonstrator that slips mostly on the first scratchpad line
#: (:data:`EARLY_SLIPS`): a policy warmed on it fails mostly for a reason a one- or two-line
#: prefix shows, the regime the PAIR paper assumes. Same prompts, splits, reward and lengths as
#: :data:`CHAIN_TASK`.
CHAIN_EARLY_TASK = dataclasses.replace(CHAIN_TASK, name="chain_early",
                                       demonstration=_early_demonstration)
