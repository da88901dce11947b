"""Code rewards on TACO / LiveCodeBench style tests, run in the sandbox."""

from __future__ import annotations

import json

import pytest

from pairht.verifiers import (
    CodeVerifier,
    SandboxLimits,
    code_reward,
    extract_code,
    make_code_reward_func,
    outputs_match,
)

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=6.0, memory_mb=512)
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
STDIO = {"inputs": ["1 2\n", "10 -3\n", "0 0\n"], "outputs": ["3\n", "7\n", "0\n"]}


@pytest.fixture(scope="module")
def verifier():
    return CodeVerifier(limits=LIMITS, max_workers=2)


def test_stdio_full_pass_partial_pass_and_order(verifier):
    programs = [ADD, "print(3)", "print(int(input().split()[0]) + 2)", None]
    results = verifier(programs, [STDIO] * 4)
    assert [r.reward for r in results] == [1.0, 0.0, 0.0, 0.0]
    assert [r.n_passed for r in results] == [3, 1, 1, 0]
    assert results[1].verdicts == ("passed", "wrong_answer", "wrong_answer")
    assert results[2].pass_fraction == pytest.approx(1 / 3, abs=1e-15)
    assert results[3].verdicts == ("no_code",) * 3


def test_function_call_tests_taco_and_livecodebench_forms(verifier):
    taco = {"fn_name": "pair_sum", "inputs": [[[1, 2], 3], [[], 0]],
            "outputs": [[[1, 2, 3]], [[0]]]}
    lcb = {"fn_name": "twoSum", "inputs": ["[2, 7, 11]\n9", "[3, 3]\n6"],
           "outputs": ["[0, 1]", "[0, 1]"]}
    top_level = "def pair_sum(xs, t):\n    print('debug noise')\n    return tuple(xs) + (t,)\n"
    leetcode = ("class Solution:\n    def twoSum(self, nums, target):\n"
                "        seen = {}\n        for i, x in enumerate(nums):\n"
                "            if target - x in seen:\n                return [seen[target - x], i]\n"
                "            seen[x] = i\n")
    wrong = "class Solution:\n    def twoSum(self, nums, target):\n        return [1, 0]\n"
    results = verifier([top_level, leetcode, wrong], [taco, lcb, lcb])
    assert [r.verdicts for r in results] == [
        ("passed", "passed"), ("passed", "passed"), ("wrong_answer", "wrong_answer")]


def test_json_text_tests_and_float_tokens(verifier):
    tests = json.dumps({"inputs": ["4\n"], "outputs": ["2.50\n"]})
    assert verifier(["print(int(input()) / 1.6)"], [tests])[0].passed


def test_compile_error_fails_every_test_and_is_not_rerun(verifier):
    r = verifier(["def f(:\n"], [STDIO])[0]
    assert r.verdicts == ("compile_error",) * 3 and r.reward == 0.0


def test_runtime_error_and_missing_function(verifier):
    r = verifier(["raise SystemExit(2)", "x = 1"],
                 [STDIO, {"fn_name": "f", "inputs": [[1]], "outputs": [1]}])
    assert r[0].verdicts == ("runtime_error",) * 3
    assert r[1].verdicts == ("runtime_error",)


def test_stats_accumulate(verifier):
    before = verifier.stats["programs"]
    verifier([ADD], [STDIO])
    assert verifier.stats["programs"] == before + 1 and verifier.stats["passed"] >= 3


@pytest.mark.parametrize(
    ("actual", "expected", "ok"),
    [
        ("3\n", "3", True),
        ("1 2 \r\n3\n\n\n", "1 2\n3", True),
        ("1.50", "1.5", True),
        ("1e2", "100", True),
        ("0.333", "0.3333", False),
        ("1 2", "1 2 3", False),
        ("1\n2", "1 2", False),
        ("YES", "yes", False),
        ("", "0", False),
    ],
)
def test_outputs_match(actual, expected, ok):
    assert outputs_match(actual, expected) is ok


def test_extract_code_prefers_last_python_block():
    text = "```python\nprint(1)\n```\ntext\n```\nplain\n```\n```py\nprint(2)\n```"
    assert extract_code(text) == "print(2)\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    assert extract_code("print(1)") is None


def test_trl_reward_function_full_and_fraction():
    full = make_code_reward_func(limits=LIMITS)
    frac = make_code_reward_func(reward="fraction", limits=LIMITS)
    completions = [[{"role": "assistant", "content": f"Here:\n```python\n{ADD}```"}],
                   [{"role": "assistant", "content": "```python\nprint(3)\n```"}],
                   [{"role": "assistant", "content": "no code"}]]
    tests = [json.dumps(STDIO)] * 3
    assert full(prompts=["p"] * 3, completions=completions, tests=tests) == [1.0, 0.0, 0.0]
    got = frac(prompts=["p"] * 3, completions=completions, input_output=tests)
    assert got == [1.0, 1 / 3, 0.0]


@pytest.mark.parametrize(
    ("programs", "tests", "match"),
    [
        (["x"], [], "same length"),
        ("x", ["t"], "not one str"),
        (["x"], [{"inputs": ["1"], "outputs": []}], "as many outputs as inputs"),
        (["x"], [{"inputs": "1", "outputs": "1"}], "must be lists"),
        (["x"], ["{not json"], "not JSON"),
        (["x"], [{"outputs": ["1"]}], "'inputs' and 'outputs'"),
        ([3], [STDIO], r"programs\[0\] must be a str"),
    ],
)
def test_bad_arguments_raise_value_error(verifier, programs, tests, match):
    with pytest.raises(ValueError, match=match):
        verifier(programs, tests)


def test_bad_limits_raise_value_error():
    with pytest.raises(ValueError, match="cpu_seconds must be a positive int"):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(ValueError, match="max_workers must be an int"):
        CodeVerifier(max_workers=0)
    with pytest.raises(ValueError, match="reward must be 'full' or 'fraction'"):
        make_code_reward_func(reward="mean")


def test_code_reward_function_form():
    r = code_reward([ADD], [STDIO], limits=LIMITS)[0]
    assert r.passed and r.n_tests == 3
