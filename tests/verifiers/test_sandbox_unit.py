"""Sandbox plumbing that no real program can reach: verdict mapping and refusal to run."""

from __future__ import annotations

import signal

import pytest

from pairht.verifiers import SandboxLimits, SandboxUnavailable, run_program
from pairht.verifiers import sandbox as sandbox_mod

LIM = SandboxLimits(cpu_seconds=2)
COMMON = {"stdout": b"", "stderr": b"", "wall_seconds": 0.1, "mechanisms": ()}


def _exit(code=None, sig=None, cpu=0.1):
    return [{"phase": "exit", "code": code, "signal": sig, "cpu_seconds": cpu}]


@pytest.mark.parametrize(
    ("records", "stderr", "status"),
    [
        ([{"phase": "setup_error", "error": "unshare"}], b"", "sandbox_error"),
        ([], b"", "sandbox_error"),  # launcher vanished without a word
        ([{"phase": "compile_error", "error": "SyntaxError"}], b"", "compile_error"),
        (_exit(sig=int(signal.SIGSYS)), b"", "unsafe_syscall"),
        (_exit(sig=int(signal.SIGKILL), cpu=2.0), b"", "timeout"),
        (_exit(sig=int(signal.SIGKILL), cpu=0.5), b"", "runtime_error"),  # not the CPU limit
        (_exit(sig=int(signal.SIGSEGV)), b"", "runtime_error"),
        (_exit(code=1), b"Traceback...\nMemoryError\n", "memory_limit"),
        (_exit(code=1), b"Traceback...\nValueError\n", "runtime_error"),
        (_exit(code=0), b"", "ok"),
    ],
)
def test_verdict_mapping(records, stderr, status):
    common = dict(COMMON, stderr=stderr)
    assert sandbox_mod._classify(records, LIM, common).status == status


def test_refuses_to_run_without_a_process_cap(monkeypatch):
    monkeypatch.setattr(sandbox_mod, "_CAPS", {"mechanisms": ("netns",), "facts": {}})
    with pytest.raises(SandboxUnavailable, match="refusing to run untrusted code"):
        run_program("print(1)")


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="source must be a str"):
        run_program(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stdin must be bytes"):
        run_program("print(1)", stdin="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mechanisms must be a subset"):
        run_program("print(1)", mechanisms=("netns",))
    with pytest.raises(ValueError, match="hidden_paths must be a tuple of absolute paths"):
        SandboxLimits(hidden_paths=("relative/dir",))
    with pytest.raises(ValueError, match="memory_mb must be an int >= 0"):
        SandboxLimits(memory_mb=-1)


@pytest.mark.parametrize(
    ("broken", "euid", "expected"),
    [
        ({"mountns"}, 0, ("seccomp", "user_switch", "pidns", "netns", "ipcns")),
        ({"mountns", "netns"}, 0, ("seccomp", "user_switch", "pidns", "ipcns")),
        ({"userns"}, 1000, ("seccomp",)),  # namespaces need the user namespace here
        # No process cap left: reported as is, and then nothing is run (below).
        ({"seccomp", "user_switch"}, 0, ("mountns", "pidns", "netns", "ipcns")),
    ],
)
def test_probe_drops_failing_mechanisms_greedily(monkeypatch, broken, euid, expected):
    calls = []

    def fake_probe(mech):
        calls.append(mech)
        needs_userns = euid != 0 and set(mech) & {"mountns", "pidns", "netns", "ipcns"}
        ok = not set(mech) & broken and not (needs_userns and "userns" not in mech)
        return ok, {"probe": list(mech)}

    monkeypatch.setattr(sandbox_mod, "_probe", fake_probe)
    monkeypatch.setattr(sandbox_mod.os, "geteuid", lambda: euid)
    monkeypatch.setattr(sandbox_mod, "_CAPS", None)
    caps = sandbox_mod.sandbox_capabilities(refresh=True)
    assert caps["mechanisms"] == expected
    assert len(calls) <= 2 * len(sandbox_mod._DROP_ORDER)
    if not {"seccomp", "user_switch"} & set(expected):
        with pytest.raises(SandboxUnavailable):
            run_program("print(1)")
