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
built for, unlike the toy task of :mod:`pairht.demo.toy`, where prefixes are half the response.

Why the prefix predicts success. The warm-up demonstrator slips with probability 0.08 on each
line (writes a wrong running value) and then continues *consistently* from what it wrote, so one
early slip fixes the final answer wrong; its success rate is ``0.92**k`` (0.72 at ``k = 4``,
0.47 at ``k = 9``). A policy that learned it fails for reasons a prefix shows (an early slip, a
long count), and RL raises success by learning not to slip.

Held-out split: the ``(s, d, k)`` with ``(s + d + k) % 5 == 0`` (120 of 600) are
evaluation-only (:data:`CHAIN_TASK`'s ``eval_items``) and never trained on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pairht._validation import RNGLike, as_generator
from pairht.demo.toy import EOS, NEWLINE, PAD, UNK, Task, _as_text, graded_items

__all__ = [
    "CHAIN_EARLY_TASK",
    "CHAIN_LONG_TASK",
    "CHAIN_TASK",
    "EARLY_SLIPS",
    "EVAL_ITEMS",
    "LONG_COUNTS",
    "MAX_COUNT",
    "MIN_COUNT",
    "TRAIN_ITEMS",
    "chain_reward",
    "demonstration",
    "make_chain_task",
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
Counts = tuple[int, int]
_COUNTS: Counts = (MIN_COUNT, MAX_COUNT)


def _items(counts: Counts) -> tuple[tuple[int, int, int], ...]:
    return tuple((s, d, k) for s in range(10) for d in range(10)
                 for k in range(counts[0], counts[1] + 1))


EVAL_ITEMS: tuple[tuple[int, int, int], ...] = tuple(
    it for it in _items(_COUNTS) if sum(it) % 5 == 0)
TRAIN_ITEMS: tuple[tuple[int, int, int], ...] = tuple(
    it for it in _items(_COUNTS) if sum(it) % 5 != 0)


def prompt_text(item: tuple[int, int, int], counts: Counts = _COUNTS) -> str:
    """The prompt for ``(start, step, count)``, e.g. ``"start three step seven count 4 :"``
    (``count`` in the task's range ``counts``, default 4..9)."""
    s, d, k = _check(item, counts)
    return f"start {DIGIT_WORDS[s]} step {DIGIT_WORDS[d]} count {k} :"


def _completion_text(d: int, values: Sequence[int]) -> str:
    lines = [f"{j} + {d} = {v}" for j, v in enumerate(values, start=1)]
    lines.append(f"answer {values[-1]}")
    return "".join(f"{line} {NEWLINE} " for line in lines).rstrip(" ")


def target_completion(item: tuple[int, int, int], counts: Counts = _COUNTS) -> str:
    r"""The correct completion text (without ``<eos>``).

    Examples
    --------
    >>> target_completion((3, 7, 4))
    '1 + 7 = 0 \n 2 + 7 = 7 \n 3 + 7 = 4 \n 4 + 7 = 1 \n answer 1 \n'
    """
    s, d, k = _check(item, counts)
    return _completion_text(d, [(s + j * d) % 10 for j in range(1, k + 1)])


def response_length(k: int) -> int:
    """Tokens of the correct response for count ``k``, ``<eos>`` included: ``6k + 4``."""
    return 6 * k + 4


#: Slip probabilities of the early-slip demonstrator (:data:`CHAIN_EARLY_TASK`): on the first
#: scratchpad line, then on every later one.
EARLY_SLIPS = (0.15, 0.01)


def demonstration(item: tuple[int, int, int], rng: RNGLike = None, *,
                  slips: tuple[float, float] = (_P_SLIP, _P_SLIP),
                  counts: Counts = _COUNTS) -> tuple[str, bool]:
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
    s, d, k = _check(item, counts)
    gen = as_generator(rng)
    values, v = [], s
    for line in range(k):
        v = (v + d) % 10
        if gen.random() < slips[min(line, 1)]:
            v = (v + int(gen.integers(1, 10))) % 10
        values.append(v)
    return _completion_text(d, values), values[-1] == (s + k * d) % 10


def _check(item: Any, counts: Counts = _COUNTS) -> tuple[int, int, int]:
    lo, hi = counts
    ok = (
        isinstance(item, (tuple, list))
        and len(item) == 3
        and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in item)
    )
    if not ok or not (0 <= item[0] <= 9 and 0 <= item[1] <= 9 and lo <= item[2] <= hi):
        raise ValueError(
            f"item must be (start, step, count) with start, step in 0..9 and count in "
            f"{lo}..{hi}; got {item!r}"
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
    *,
    counts: Counts = _COUNTS,
    **kwargs: Any,
) -> list[float]:
    r"""Binary verifiable reward (TRL signature): 1 when the last ``answer v`` line has
    ``v = (start + count * step) mod 10``; the scratchpad itself is not graded. ``counts`` is
    the task's range of ``count`` (default 4..9); an item outside it is refused.

    Examples
    --------
    >>> p = prompt_text((3, 7, 4))
    >>> chain_reward([p, p], ["1 + 7 = 0 \n answer 1", "answer 9"])
    [1.0, 0.0]
    """
    items = graded_items(prompts, completions, (start, step, count),
                         lambda s, d, k: _check((int(s), int(d), int(k)), counts),
                         lambda text: _check(_parse_prompt(text), counts))
    out = []
    for (s, d, k), completion in zip(items, completions):
        words = _as_text(completion).split()
        answer = None
        for a, b in itertools.pairwise(words):
            if a == "answer":
                answer = b
        out.append(1.0 if answer == str((s + k * d) % 10) else 0.0)
    return out


def _sampler(counts: Counts) -> Callable[[int, RNGLike, str], list[tuple[int, int, int]]]:
    """``sample(n, rng, split)`` over the held-out split ``(s + d + k) % 5 == 0`` of ``counts``."""
    every = _items(counts)
    splits = {"eval": tuple(it for it in every if sum(it) % 5 == 0),
              "train": tuple(it for it in every if sum(it) % 5 != 0)}

    def sample(n: int, rng: RNGLike, split: str) -> list[tuple[int, int, int]]:
        if split not in splits:
            raise ValueError(f"split must be 'train' or 'eval'; got {split!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive int; got {n!r}")
        items = splits[split]
        return [items[i] for i in as_generator(rng).integers(len(items), size=int(n))]

    return sample


def _columns(items: Sequence[tuple[int, int, int]]) -> dict[str, list[int]]:
    return {
        "start": [int(s) for s, _, _ in items],
        "step": [int(d) for _, d, _ in items],
        "count": [int(k) for _, _, k in items],
    }


def make_chain_task(name: str, *, counts: Counts = _COUNTS,
                    slips: tuple[float, float] = (_P_SLIP, _P_SLIP),
                    eval_prompts: int = 32) -> Task:
    r"""A chain-arithmetic :class:`~pairht.demo.toy.Task`: counts in ``counts`` (inclusive),
    a demonstrator slipping with ``slips`` (first line, later lines), ``eval_prompts`` fixed
    held-out prompts (an evenly spaced subset of the held-out split, 8 samples each).

    The vocabulary holds the line numbers up to ``counts[1]`` (the default range's vocabulary
    is the chain task's own, so its models and cached warm starts are unchanged).

    Examples
    --------
    >>> t = make_chain_task("chain_x", counts=(10, 12))
    >>> t.prompt((1, 2, 11)), t.max_new_tokens
    ('start one step two count 11 :', 84)
    """
    lo, hi = counts
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ValueError(f"counts must be (lo, hi) with 1 <= lo <= hi; got counts = {counts!r}")
    if not all(0.0 <= x < 1.0 for x in slips) or len(slips) != 2:
        raise ValueError(f"slips must be two probabilities in [0, 1); got slips = {slips!r}")
    words = _WORDS + tuple(str(i) for i in range(10, hi + 1))
    sample = _sampler(counts)
    held_out = tuple(it for it in _items(counts) if sum(it) % 5 == 0)
    stride = max(len(held_out) // eval_prompts, 1)

    def reward(prompts: Sequence[Any], completions: Sequence[Any],
               start: Sequence[int] | None = None, step: Sequence[int] | None = None,
               count: Sequence[int] | None = None, **kwargs: Any) -> list[float]:
        return chain_reward(prompts, completions, start, step, count, counts=counts, **kwargs)

    reward.__name__ = "chain_reward"  # TRL names reward metrics after the function
    return Task(
        name=name,
        words=words,
        max_new_tokens=response_length(hi) + 8,
        prompt=lambda item: prompt_text(item, counts),
        demonstration=lambda item, rng: demonstration(item, rng, slips=slips, counts=counts),
        reward=chain_reward if counts == _COUNTS else reward,
        sample=sample,
        columns=_columns,
        answer=lambda item: target_completion(item, counts),
        train_items=tuple(it for it in _items(counts) if sum(it) % 5 != 0),
        eval_items=tuple(held_out[i] for i in range(0, len(held_out), stride))[:eval_prompts],
    )


CHAIN_TASK = make_chain_task("chain")

#: The chain task with a demonstrator that slips mostly on the first scratchpad line
#: (:data:`EARLY_SLIPS`): a policy warmed on it fails mostly for a reason a one- or two-line
#: prefix shows, the regime the PAIR paper assumes. Same prompts, splits, reward and lengths as
#: :data:`CHAIN_TASK`.
CHAIN_EARLY_TASK = make_chain_task("chain_early", slips=EARLY_SLIPS)

#: Counts of :data:`CHAIN_LONG_TASK`: responses of ``6k + 4`` = 64 to 124 tokens.
LONG_COUNTS: Counts = (10, 20)

#: The early-slip chain task with long scratchpads (:data:`LONG_COUNTS`): most of a response
#: lies after a one- or two-line prefix, as in RLVR with long reasoning, and a first-line slip
#: (probability ``EARLY_SLIPS[0]``) still decides most failures.
#: Its held-out set is 64 prompts (x 8 samples): at the success rates RL reaches here (about
#: 0.9) 256 samples leave a standard error of 0.019, close to the differences the demo reads.
CHAIN_LONG_TASK = make_chain_task("chain_long", counts=LONG_COUNTS, slips=EARLY_SLIPS,
                                  eval_prompts=64)
