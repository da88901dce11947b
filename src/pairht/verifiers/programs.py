"""Unit-test rewards for generated Python programs (TACO / LiveCodeBench style).

Two test formats, as in TACO (APPS) and LiveCodeBench:

* standard input/output: ``{"inputs": [str, ...], "outputs": [str, ...]}``; a test passes
  when the program exits 0 and its stdout matches (see :func:`outputs_match`);
* function call: ``{"fn_name": str, "inputs": [[arg, ...], ...], "outputs": [value, ...]}``;
  the program is executed, then ``fn_name(*args)`` (or ``Solution().fn_name(*args)``) is
  called and its return value must equal the expected one after a JSON round trip (tuples
  become lists); like APPS, an expected ``[v]`` also accepts ``v``. LiveCodeBench's string
  form (each input a newline-separated list of JSON arguments, each output a JSON string) is
  decoded first.

Every test is one sandboxed run (:func:`pairht.verifiers.sandbox.run_program`), so limits
are per test, as the PAIR paper's appendix states. A program's reward is its full pass
(1.0 when every test passes, else 0.0); the fraction of tests passed is reported next to it.
Compilation failures, timeouts, memory or output overruns and unsafe system calls all fail
the test; nothing the program does raises in the caller.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from pairht.verifiers.sandbox import RunOutcome, SandboxLimits, run_program

__all__ = [
    "CodeResult",
    "CodeVerifier",
    "code_reward",
    "code_reward_func",
    "extract_code",
    "make_code_reward_func",
    "outputs_match",
]


@dataclass(frozen=True)
class CodeResult:
    """Outcome of one program on its tests.

    Attributes
    ----------
    passed : bool
        Every test passed (the paper's "full pass").
    pass_fraction : float
        ``n_passed / n_tests`` (the paper's "average test pass rate" for this program).
    verdicts : tuple of str
        Per test, in input order: ``"passed"``, ``"wrong_answer"``, or the failing
        :class:`~pairht.verifiers.sandbox.RunOutcome` status (``"timeout"``,
        ``"unsafe_syscall"``, ``"compile_error"``, ...), or ``"no_code"``.
    wall_seconds : tuple of float
        Per test wall-clock time, 0.0 for tests not run.
    """

    passed: bool
    pass_fraction: float
    n_passed: int
    n_tests: int
    verdicts: tuple[str, ...]
    wall_seconds: tuple[float, ...]

    @property
    def reward(self) -> float:
        """Full-pass reward: 1.0 if every test passed, else 0.0."""
        return 1.0 if self.passed else 0.0


@dataclass(frozen=True)
class _Tests:
    fn_name: str | None
    inputs: list  # bytes (stdio) or list of args (call)
    outputs: list


def _parse_tests(tests, where: str) -> _Tests:
    if isinstance(tests, (str, bytes)):
        try:
            tests = json.loads(tests)
        except ValueError as exc:
            raise ValueError(f"{where} is a string but not JSON: {exc}") from None
    if not isinstance(tests, dict) or "inputs" not in tests or "outputs" not in tests:
        raise ValueError(
            f"{where} must be a dict (or JSON text) with 'inputs' and 'outputs' lists and an "
            f"optional 'fn_name'; got {type(tests).__name__}"
        )
    inputs, outputs, fn_name = tests["inputs"], tests["outputs"], tests.get("fn_name")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError(f"{where}['inputs'] and ['outputs'] must be lists")
    if len(inputs) != len(outputs) or not inputs:
        raise ValueError(
            f"{where} must have as many outputs as inputs, at least one; got "
            f"{len(inputs)} inputs and {len(outputs)} outputs"
        )
    if fn_name is None or fn_name == "":
        return _Tests(None, [_as_text(x).encode() for x in inputs], [_as_text(y) for y in outputs])
    if not isinstance(fn_name, str):
        raise ValueError(f"{where}['fn_name'] must be a str; got {fn_name!r}")
    call_inputs, call_outputs = [], []
    for k, (x, y) in enumerate(zip(inputs, outputs)):
        if isinstance(x, str):  # LiveCodeBench: one JSON argument per line, JSON output
            try:
                call_inputs.append([json.loads(line) for line in x.split("\n") if line.strip()])
                call_outputs.append(json.loads(y) if isinstance(y, str) else y)
            except ValueError as exc:
                raise ValueError(
                    f"{where} test {k}: string arguments must be JSON: {exc}"
                ) from None
        elif isinstance(x, list):
            call_inputs.append(x)
            call_outputs.append(y)
        else:
            raise ValueError(f"{where} test {k}: inputs must be a list of arguments; got {x!r}")
    return _Tests(fn_name, call_inputs, [_canon(y) for y in call_outputs])


def _as_text(x) -> str:
    if isinstance(x, list):  # APPS sometimes stores a test as a list of lines
        return "\n".join(str(v) for v in x)
    if not isinstance(x, str):
        return str(x)
    return x


def _canon(x):
    return json.loads(json.dumps(x))


def _lines(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _token_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return Decimal(a) == Decimal(b)
    except (InvalidOperation, ValueError):
        return False


def outputs_match(actual: str, expected: str) -> bool:
    """Whether a program's stdout matches the expected output.

    Line endings are normalised and trailing whitespace on each line and trailing empty lines
    are ignored; if the texts still differ, they match when they have the same lines with the
    same whitespace-separated tokens and every token pair is equal as text or as an exact
    decimal number (``1.50 == 1.5``, ``1e2 == 100``; no tolerance: ``0.333 != 0.3333``).

    Examples
    --------
    >>> outputs_match("1 2\\n3\\n\\n", "1 2\\n3")
    True
    >>> outputs_match("2.50\\n", "2.5")
    True
    >>> outputs_match("1 2", "1  2 3")
    False
    """
    a, b = _lines(actual), _lines(expected)
    if a == b:
        return True
    if len(a) != len(b):
        return False
    for la, lb in zip(a, b):
        ta, tb = la.split(), lb.split()
        if len(ta) != len(tb) or not all(_token_equal(x, y) for x, y in zip(ta, tb)):
            return False
    return True


def _judge(outcome: RunOutcome, tests: _Tests, k: int) -> str:
    if outcome.status != "ok":
        return outcome.status
    if tests.fn_name is None:
        ok = outputs_match(outcome.stdout.decode("utf-8", "replace"), tests.outputs[k])
        return "passed" if ok else "wrong_answer"
    try:
        value = json.loads(outcome.stdout)
    except ValueError:
        return "wrong_answer"
    expected = tests.outputs[k]
    ok = value == expected or (isinstance(expected, list) and len(expected) == 1
                               and value == expected[0])
    return "passed" if ok else "wrong_answer"


class CodeVerifier:
    """Runs programs on their unit tests in the sandbox, tests concurrently.

    Parameters
    ----------
    limits : SandboxLimits or None
        Per-test limits (default ``SandboxLimits()``: 4 CPU s, 1 GiB address space).
    max_workers : int
        Sandboxed runs in flight at once (threads driving subprocesses).
    base_dir : str or None
        Where per-run working directories are created.

    Attributes
    ----------
    stats : collections.Counter
        Test verdict counts over the verifier's lifetime, plus ``"programs"`` and
        ``"full_passes"``.

    Raises
    ------
    SandboxUnavailable
        On call, if this machine cannot cap process creation (see
        :func:`~pairht.verifiers.sandbox.sandbox_capabilities`): untrusted code is then
        not run at all, rather than scored without confinement.

    Examples
    --------
    >>> verifier = CodeVerifier(max_workers=2)
    >>> tests = {"inputs": ["1 2\\n", "5 7\\n"], "outputs": ["3\\n", "12\\n"]}
    >>> [r.reward for r in verifier(["a, b = map(int, input().split()); print(a + b)",
    ...                              "print(3)"], [tests, tests])]
    [1.0, 0.0]
    """

    def __init__(
        self,
        *,
        limits: SandboxLimits | None = None,
        max_workers: int = 2,
        base_dir: str | None = None,
    ) -> None:
        if not isinstance(max_workers, int) or not 1 <= max_workers <= 256:
            raise ValueError(f"max_workers must be an int in [1, 256]; got {max_workers!r}")
        if limits is not None and not isinstance(limits, SandboxLimits):
            raise ValueError(f"limits must be a SandboxLimits or None; got {limits!r}")
        self.limits = limits or SandboxLimits()
        self.max_workers = max_workers
        self.base_dir = base_dir
        self.stats: Counter = Counter()
        self._lock = threading.Lock()

    def __call__(self, programs: Sequence[str | None], tests: Sequence) -> list[CodeResult]:
        """Score ``programs[i]`` on ``tests[i]``; results in input order. ``None`` programs
        (no code found) fail every test with verdict ``"no_code"`` without running."""
        if isinstance(programs, str):
            raise ValueError("programs must be a sequence of program texts, not one str")
        if len(programs) != len(tests):
            raise ValueError(
                f"programs and tests must have the same length; got {len(programs)} and "
                f"{len(tests)}"
            )
        parsed = [_parse_tests(t, f"tests[{i}]") for i, t in enumerate(tests)]
        for i, p in enumerate(programs):
            if p is not None and not isinstance(p, str):
                raise ValueError(f"programs[{i}] must be a str or None; got {type(p).__name__}")
        verdicts = [["no_code"] * len(t.inputs) for t in parsed]
        walls = [[0.0] * len(t.inputs) for t in parsed]
        compile_failed: set[int] = set()
        jobs = [(i, k) for i, t in enumerate(parsed) if programs[i] is not None
                for k in range(len(t.inputs))]

        def work(job: tuple[int, int]) -> None:
            i, k = job
            if i in compile_failed:  # deterministic: no need to compile it again
                verdicts[i][k] = "compile_error"
                return
            t = parsed[i]
            program = programs[i]
            assert program is not None  # ``jobs`` holds only the programs that are not None
            if t.fn_name is None:
                out = run_program(program, stdin=t.inputs[k], limits=self.limits,
                                  base_dir=self.base_dir)
            else:
                out = run_program(program, fn_name=t.fn_name, args=t.inputs[k],
                                  limits=self.limits, base_dir=self.base_dir)
            if out.status == "compile_error":
                compile_failed.add(i)
            verdicts[i][k] = _judge(out, t, k)
            walls[i][k] = out.wall_seconds

        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            list(pool.map(work, jobs))
        results = []
        for v, w in zip(verdicts, walls):
            n_pass = sum(x == "passed" for x in v)
            results.append(CodeResult(n_pass == len(v), n_pass / len(v), n_pass, len(v),
                                      tuple(v), tuple(w)))
        with self._lock:
            self.stats["programs"] += len(results)
            self.stats["full_passes"] += sum(r.passed for r in results)
            for v in verdicts:
                self.stats.update(v)
        return results


def code_reward(
    programs: Sequence[str | None],
    tests: Sequence,
    *,
    limits: SandboxLimits | None = None,
    max_workers: int = 2,
) -> list[CodeResult]:
    """Score each program on its tests in the sandbox (see :class:`CodeVerifier`).

    Returns
    -------
    list of CodeResult
        ``[r.reward for r in ...]`` is the full-pass reward, ``r.pass_fraction`` the
        fraction of tests passed.

    Examples
    --------
    >>> tests = {"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [3, 7]}
    >>> r = code_reward(["def add(a, b):\\n    return a + b if a < 3 else 0"], [tests])[0]
    >>> r.passed, r.pass_fraction, r.verdicts
    (False, 0.5, ('passed', 'wrong_answer'))
    """
    return CodeVerifier(limits=limits, max_workers=max_workers)(programs, tests)


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str | None:
    """The last fenced code block of a completion (preferring ```python blocks), or None.

    Examples
    --------
    >>> extract_code("Plan...\\n```python\\nprint(1)\\n```\\nDone.")
    'print(1)\\n'
    >>> extract_code("no code here") is None
    True
    """
    blocks = _FENCE.findall(completion)
    if not blocks:
        return None
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    return (python or [body for _, body in blocks])[-1]


def _completion_text(c) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content", "") if isinstance(m, dict) else str(m) for m in c)
    if isinstance(c, dict):
        return str(c.get("content", ""))
    raise ValueError(f"a completion must be a str or a list of messages; got {type(c).__name__}")


def make_code_reward_func(
    *,
    reward: str = "full",
    limits: SandboxLimits | None = None,
    max_workers: int = 2,
) -> Callable[..., list[float]]:
    """A TRL reward function ``f(completions, tests=..., **kwargs) -> list[float]``.

    TRL calls reward functions as ``f(prompts=..., completions=..., **dataset_columns)``;
    the dataset needs a ``tests`` column (or TACO's ``input_output``) holding the test dict
    or its JSON text. ``reward="full"`` gives 1.0 for a full pass, ``"fraction"`` the
    fraction of tests passed. Code is the last fenced block of each completion.
    """
    if reward not in ("full", "fraction"):
        raise ValueError(f"reward must be 'full' or 'fraction'; got {reward!r}")
    verifier = CodeVerifier(limits=limits, max_workers=max_workers)

    def code_reward_func(completions, tests=None, input_output=None, **kwargs) -> list[float]:
        cases = tests if tests is not None else input_output
        if cases is None:
            raise ValueError("code_reward_func needs a 'tests' (or 'input_output') column")
        programs = [extract_code(_completion_text(c)) for c in completions]
        results = verifier(programs, cases)
        return [r.reward if reward == "full" else r.pass_fraction for r in results]

    code_reward_func.verifier = verifier  # type: ignore[attr-defined]
    code_reward_func.__name__ = f"code_reward_{reward}"
    return code_reward_func


code_reward_func = make_code_reward_func()
code_reward_func.__doc__ = (
    "Full-pass TRL reward function (``make_code_reward_func()`` with defaults)."
)
