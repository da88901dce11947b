"""Reward verifiers for RLVR (PAIR paper, appendix "Data and contamination controls").

* math: :func:`math_reward`, :class:`MathVerifier`, :func:`math_reward_func` (TRL) -- last
  ``\\boxed{}`` answer, exact-string fallback plus math-verify, per-call time limit;
* code: :func:`code_reward`, :class:`CodeVerifier`, :func:`code_reward_func` (TRL) -- unit
  tests run in the sandbox of :mod:`pairht.verifiers.sandbox`
  (:func:`sandbox_capabilities` says which confinement is active).

Importing this package imports neither torch nor sympy: math-verify runs in a worker process.
"""

from pairht.verifiers.boxed import MalformedBoxError, last_boxed
from pairht.verifiers.math_answers import (
    MathVerifier,
    math_reward,
    math_reward_func,
    normalize_answer,
)
from pairht.verifiers.programs import (
    CodeResult,
    CodeVerifier,
    code_reward,
    code_reward_func,
    extract_code,
    make_code_reward_func,
    outputs_match,
)
from pairht.verifiers.sandbox import (
    RunOutcome,
    SandboxLimits,
    SandboxUnavailable,
    run_program,
    sandbox_capabilities,
)

__all__ = [
    "CodeResult",
    "CodeVerifier",
    "MalformedBoxError",
    "MathVerifier",
    "RunOutcome",
    "SandboxLimits",
    "SandboxUnavailable",
    "code_reward",
    "code_reward_func",
    "extract_code",
    "last_boxed",
    "make_code_reward_func",
    "math_reward",
    "math_reward_func",
    "normalize_answer",
    "outputs_match",
    "run_program",
    "sandbox_capabilities",
]
