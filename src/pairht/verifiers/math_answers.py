r"""Binary rewards for final math answers (PAIR paper, appendix "Data and contamination controls").

"Answers are parsed from the final boxed expression and checked with symbolic normalization
plus exact string fallbacks. Any parser exception is a failed rollout." Here:

1. the answer is the content of the last ``\boxed{}`` / ``\fbox{}`` (:func:`last_boxed`);
   no box, an unclosed last box or an empty one gives reward 0. With
   ``answer_mode="last_number"`` it is instead the last number written in the completion
   (:func:`last_number`), for small models that never write a box;
2. exact string fallback: reward 1 when :func:`normalize_answer` of both sides agree;
3. symbolic check with ``math-verify`` (``parse`` + ``verify``: sympy equality, sets,
   intervals, equations), run in a worker process with a per-call time limit; a timeout or any
   exception is reward 0. Decimals are compared exactly by default (``float_rounding=None``:
   ``0.333333`` is the rational ``333333/10**6``, not ``1/3``); ``float_rounding=d`` restores
   math-verify's convention of rounding both sides to ``d`` decimals when one is a float.

Every outcome is counted in :attr:`MathVerifier.stats`; nothing is raised for a bad
completion. Only malformed *arguments* (not strings, mismatched lengths) raise ValueError.

Known, documented verdicts of math-verify that differ from strict mathematics (see
tests/verifiers/test_math_answers.py): a comma-separated list is compared as a set (``1,2``
matches ``2,1``), as MATH's "list all solutions" answers require, and a percent sign is read like
a unit (``50\%`` matches ``50`` and ``0.5``). With ``float_rounding=6`` (math-verify's own
default) a float within its 6-decimal rounding of a value is also accepted (``0.333333`` for
``1/3``, ``1.414214`` for ``\sqrt2``): a reward an RLVR policy can collect without solving the
problem, hence not the default here.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pairht.verifiers.boxed import MalformedBoxError, last_boxed

__all__ = ["ANSWER_MODES", "MathVerifier", "last_number", "math_reward", "math_reward_func",
           "normalize_answer"]

#: Where the answer is read from: the last ``\boxed{}`` or the last number of the completion.
ANSWER_MODES = ("boxed", "last_number")

_WORKER = str(Path(__file__).with_name("_math_worker.py"))
# The worker gets this much longer than the soft limit before it is killed (C-level hangs).
_HARD_GRACE = 1.0
_START_TIMEOUT = 120.0

_SPACING = re.compile(r"\\[,;:! ]|\\q?quad|~|\\displaystyle|\\left(?![a-zA-Z])|\\right(?![a-zA-Z])")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_DEGREE = re.compile(r"\^\s*\{?\\circ\}?")
# An integer or decimal, optionally with comma thousands separators; a minus sign is a sign
# only where it cannot be a subtraction or a hyphen (not after a word character or ")").
_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<!\d)\.\d+")


def last_number(text: str) -> str | None:
    r"""The last number written in ``text`` (thousands separators removed), or ``None``.

    Integers and decimals, with an optional leading minus sign (``-5``; not the ``-`` of
    ``3-5`` or ``step-5``) and comma thousands separators (``1,000`` gives ``1000``). LaTeX
    structure is not read: in ``rac{1}{2}`` the last number is ``2``, so this mode suits
    plain-text answers (GSM8K style), and ``answer_mode="boxed"`` suits LaTeX ones.

    Examples
    --------
    >>> last_number("3 apples and 4 pears make 7. So the answer is 1,250.")
    '1250'
    >>> last_number("The change is -0.5 dollars") , last_number("from 3-5") , last_number("none")
    ('-0.5', '5', None)
    """
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def normalize_answer(s: str) -> str:
    r"""Canonical text of an answer for the exact-string fallback.

    Removes ``$``, spacing commands (``\!``, ``\,``, ``\;``, ``\quad``, ``~``),
    ``\left``/``\right``, ``\displaystyle``, degree marks, whitespace and a trailing period;
    maps ``\dfrac``/``\tfrac`` to ``\frac`` and unwraps ``\text{...}`` (and ``\mathrm``,
    ``\textbf``, ``\mbox``).

    Examples
    --------
    >>> normalize_answer(r"\left( \dfrac{1}{2}, 3 \right)")
    '(\\frac{1}{2},3)'
    >>> normalize_answer(r"\text{ yes }.")
    'yes'
    """
    s = s.replace("$", "")
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s)
    s = _SPACING.sub("", s)
    s = _DEGREE.sub("", s)
    prev = None
    while prev != s:  # nested wrappers unwrap from the inside out
        prev, s = s, _TEXT_WRAP.sub(r"\1", s)
    s = "".join(s.split())
    return s.rstrip(".")


class _Worker:
    """One math-verify process; restarted after a timeout or a crash."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.buf = b""

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", _WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.buf = b""
        try:
            ready = self._readline(time.monotonic() + _START_TIMEOUT)
        except EOFError:
            ready = None
        if ready is None or not json.loads(ready).get("ready"):
            self.kill()
            raise RuntimeError("the math-verify worker did not start (is math-verify installed?)")

    def _readline(self, deadline: float) -> bytes | None:
        """One line, or None at the deadline; EOFError when the worker has exited."""
        # _start opened the worker with stdout=PIPE, so a started worker has its stdout
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise EOFError("the math-verify worker exited")
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def ask(self, gold: str, pred: str, timeout: float, float_rounding: int | None) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        req = json.dumps({"gold": gold, "pred": pred, "timeout": timeout,
                          "float_rounding": float_rounding}) + "\n"
        # _start opened the worker with stdin=PIPE, so a started worker has its stdin
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(req.encode())
            self.proc.stdin.flush()
        except OSError:
            self.kill()
            return {"error": "worker died"}
        try:
            line = self._readline(time.monotonic() + timeout + _HARD_GRACE)
        except EOFError:
            self.kill()
            return {"error": "worker died"}
        if line is None:  # hung in C code, where the soft limit cannot reach: kill it
            self.kill()
            return {"timeout": True}
        return json.loads(line)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for s in (self.proc.stdin, self.proc.stdout):
                if s is None:  # never: both are pipes (see _start); narrows the Optional
                    continue
                try:
                    s.close()
                except OSError:
                    pass
            self.proc = None


class MathVerifier:
    r"""Scores completions against reference answers; binary reward, counted outcomes.

    Parameters
    ----------
    timeout : float
        Seconds allowed for the symbolic check of one (completion, answer) pair, parsing
        included: a finite positive number (``inf`` would remove the hang protection). Past it
        the pair scores 0 and counts as a timeout; a worker stuck in C code is killed ``1 s``
        later and restarted.
    processes : int
        Worker processes (pairs are checked concurrently across them).
    float_rounding : int or None
        ``None`` (default): decimals are compared exactly, as the rationals they denote
        (``0.5 = 1/2`` and ``3.0 = 3`` score 1, ``0.333333`` against ``1/3`` scores 0). An int
        ``d >= 0``: math-verify's numeric tolerance, both sides rounded to ``d`` decimals when
        one of them is a float (math-verify's default is 6).
    answer_mode : {"boxed", "last_number"}
        ``"boxed"`` (default): the answer is the last ``\boxed{}``. ``"last_number"``: the last
        number of the completion (:func:`last_number`), for models that never box an answer.

    Attributes
    ----------
    stats : collections.Counter
        ``calls``, ``correct``, ``no_box`` (``"boxed"`` mode) or ``no_number``
        (``"last_number"`` mode), ``parse_failures`` (unclosed or empty box, or math-verify
        could not parse the answer), ``exceptions``, ``timeouts``, ``string_matches`` and
        ``symbolic_matches`` (which check accepted the answer).

    Examples
    --------
    >>> v = MathVerifier(timeout=5.0)
    >>> v([r"so \boxed{\dfrac{1}{2}}", r"\boxed{0.5}", "I give up"], ["1/2", r"\frac12", "3"])
    [1.0, 1.0, 0.0]
    >>> v.stats["calls"], v.stats["no_box"], v.stats["correct"]
    (3, 1, 2)
    >>> v([r"\boxed{0.333333}"], [r"\frac13"])  # exact by default
    [0.0]
    >>> v.close()
    >>> MathVerifier(answer_mode="last_number")(["So she pays 1,250 dollars."], [1250])
    [1.0]
    """

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        processes: int = 1,
        float_rounding: int | None = None,
        answer_mode: str = "boxed",
    ) -> None:
        self.timeout = _check_timeout(timeout)
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise ValueError(f"processes must be a positive int; got {processes!r}")
        if float_rounding is not None and (
            isinstance(float_rounding, bool)
            or not isinstance(float_rounding, numbers.Integral)
            or float_rounding < 0
        ):
            raise ValueError(
                f"float_rounding must be None (exact comparison of decimals) or an int >= 0 "
                f"(decimals both sides are rounded to when one is a float); got "
                f"float_rounding={float_rounding!r}"
            )
        if answer_mode not in ANSWER_MODES:
            raise ValueError(
                f"answer_mode must be one of {ANSWER_MODES}; got answer_mode={answer_mode!r}"
            )
        self.float_rounding = None if float_rounding is None else int(float_rounding)
        self.answer_mode = answer_mode
        self.processes = processes
        self.stats: Counter = Counter()
        self._lock = threading.Lock()
        self._idle: list[_Worker] = [_Worker() for _ in range(processes)]
        self._idle_cv = threading.Condition(self._lock)

    def _count(self, *keys: str) -> None:
        with self._lock:
            self.stats.update(keys)

    def _symbolic(self, gold: str, pred: str) -> dict:
        with self._idle_cv:
            while not self._idle:
                self._idle_cv.wait()
            worker = self._idle.pop()
        try:
            return worker.ask(gold, pred, self.timeout, self.float_rounding)
        except Exception as exc:  # the worker could not even start
            return {"error": repr(exc)}
        finally:
            with self._idle_cv:
                self._idle.append(worker)
                self._idle_cv.notify()

    def score(self, completion: str, answer: str) -> float:
        """Reward (0.0 or 1.0) of one completion against one reference answer."""
        self._count("calls")
        try:
            if self.answer_mode == "last_number":
                pred = last_number(completion)
            else:
                pred = last_boxed(completion)
        except MalformedBoxError:
            self._count("parse_failures")
            return 0.0
        except Exception:
            self._count("exceptions")
            return 0.0
        if pred is None:
            self._count("no_number" if self.answer_mode == "last_number" else "no_box")
            return 0.0
        try:
            boxed_gold = last_boxed(answer)
        except Exception:
            boxed_gold = None
        gold = boxed_gold if boxed_gold is not None else answer
        pred_norm, gold_norm = normalize_answer(pred), normalize_answer(gold)
        if not pred_norm:
            self._count("parse_failures")
            return 0.0
        if pred_norm == gold_norm:
            self._count("correct", "string_matches")
            return 1.0
        reply = self._symbolic(gold, pred)
        if reply.get("timeout"):
            self._count("timeouts")
            return 0.0
        if "error" in reply:
            self._count("exceptions")
            return 0.0
        if reply["match"]:
            self._count("correct", "symbolic_matches")
            return 1.0
        if not reply["pred_parsed"]:
            self._count("parse_failures")
        return 0.0

    def __call__(self, completions: Sequence, answers: Sequence[str | float]) -> list[float]:
        """Rewards for ``completions[i]`` against ``answers[i]``, in input order.

        Completions may be strings or conversational message lists (their ``content`` is
        concatenated)."""
        if isinstance(completions, str) or isinstance(answers, str):
            raise ValueError("completions and answers must be sequences, not a single str")
        if len(completions) != len(answers):
            raise ValueError(
                f"completions and answers must have the same length; got {len(completions)} "
                f"and {len(answers)}"
            )
        golds = [_answer_text(a, i) for i, a in enumerate(answers)]
        texts = [_completion_text(c, i) for i, c in enumerate(completions)]
        if self.processes == 1 or len(texts) < 2:
            return [self.score(c, a) for c, a in zip(texts, golds)]
        with ThreadPoolExecutor(self.processes) as pool:
            return list(pool.map(self.score, texts, golds))

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call)."""
        with self._lock:
            for w in self._idle:
                w.kill()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _check_timeout(timeout: object) -> float:
    """A finite positive number of seconds (bool refused: ``True`` is not a duration)."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, numbers.Real)
        or not math.isfinite(timeout)
        or not float(timeout) > 0  # float(): typeshed's numbers.Real has no comparison
    ):
        raise ValueError(
            f"timeout must be a finite positive number of seconds (it is the hang protection of "
            f"the symbolic check); got timeout={timeout!r}"
        )
    return float(timeout)


def _answer_text(a, i: int) -> str:
    if isinstance(a, str):
        return a
    # Numeric answer columns (e.g. integers) are fine; their decimal text is the answer.
    if isinstance(a, numbers.Real) and not isinstance(a, bool):
        return str(a)
    raise ValueError(f"answers[{i}] must be a str or a number; got {type(a).__name__}")


def _completion_text(c, i: int) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # TRL conversational format: [{"role": ..., "content": ...}]
        parts = []
        for m in c:
            if not isinstance(m, dict) or not isinstance(m.get("content", ""), str):
                raise ValueError(f"completions[{i}] messages must be dicts with str 'content'")
            parts.append(m.get("content", ""))
        return "".join(parts)
    raise ValueError(
        f"completions[{i}] must be a str or a list of message dicts; got {type(c).__name__}"
    )


_DEFAULT: MathVerifier | None = None
_DEFAULT_LOCK = threading.Lock()


def _default_verifier() -> MathVerifier:
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = MathVerifier()
        return _DEFAULT


def math_reward(
    completions: Sequence,
    answers: Sequence[str],
    *,
    timeout: float = 5.0,
    float_rounding: int | None = None,
    answer_mode: str = "boxed",
) -> list[float]:
    r"""Binary rewards for final answers (one call to a fresh :class:`MathVerifier`).

    ``timeout``, ``float_rounding`` and ``answer_mode`` are those of :class:`MathVerifier`.

    Use a long-lived :class:`MathVerifier` in a training loop: it keeps its worker process
    and its statistics across calls.

    Examples
    --------
    >>> math_reward([r"\boxed{2\sqrt{2}}", r"\boxed{3}"], [r"\sqrt{8}", "4"])
    [1.0, 0.0]
    """
    v = MathVerifier(timeout=timeout, float_rounding=float_rounding, answer_mode=answer_mode)
    try:
        return v(completions, answers)
    finally:
        v.close()


def math_reward_func(completions, answer, **kwargs) -> list[float]:
    r"""TRL reward function: ``f(prompts=..., completions=..., answer=..., **columns)``.

    Uses a process-wide :class:`MathVerifier` (its ``stats`` accumulate over training;
    reach it as ``math_reward_func.verifier()``). The dataset needs an ``answer`` column.

    Examples
    --------
    >>> math_reward_func(prompts=["q"], completions=[[{"role": "assistant",
    ...                  "content": r"\boxed{\tfrac{3}{4}}"}]], answer=["0.75"])
    [1.0]
    """
    return _default_verifier()(completions, answer)


math_reward_func.verifier = _default_verifier  # type: ignore[attr-defined]
