"""Adversarial programs: each must be contained (this process, the machine and everything
outside the sandbox directory unaffected) and score 0.

Each attack prints ``ESCAPED`` only if it worked, and its single test expects ``ESCAPED``; a
reward of 0 therefore means the attack failed. The time until each run was stopped is logged
(``containment_log`` fixture) and printed in the terminal summary. Limits are small (1 CPU s,
3 s wall, 256 MiB); the attacks that can only end by a time limit run concurrently in one
batch, so the suite takes a few seconds in all.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest

from pairht.verifiers import CodeVerifier, SandboxLimits, run_program, sandbox_capabilities
from pairht.verifiers import sandbox as sandbox_mod

FAST = SandboxLimits(cpu_seconds=1, wall_seconds=3.0, memory_mb=256, file_mb=16, disk_mb=32,
                     max_tasks=8, output_bytes=1 << 20)
ESCAPED = {"inputs": [""], "outputs": ["ESCAPED"]}
MECH = sandbox_capabilities()["mechanisms"]


def needs(*mechanisms: str):
    """Skip (visibly, with the reason) where this machine lacks a containment layer."""
    missing = [m for m in mechanisms if m not in MECH]
    return pytest.mark.skipif(bool(missing), reason=f"sandbox lacks {missing} on this machine")


def _sandbox_pids() -> list[int]:
    """Processes still running under this test process's sandbox uids."""
    lo = sandbox_mod._uid_for(0)
    hi = sandbox_mod._uid_for(255)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                uid = next(int(ln.split()[1]) for ln in fh if ln.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if lo <= uid <= hi:
            found.append(int(entry))
    return found


def _assert_nothing_left() -> None:
    deadline = time.monotonic() + 3.0  # the kernel tears a PID namespace down asynchronously
    while _sandbox_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sandbox_pids() == []


def _attack(name, program, log, *, expect, tests=ESCAPED, base_dir=None, limits=FAST):
    v = CodeVerifier(limits=limits, max_workers=1, base_dir=base_dir)
    result = v([program], [tests])[0]
    log(name, result.verdicts[0], result.wall_seconds[0])
    assert result.reward == 0.0
    assert result.verdicts[0] in expect
    _assert_nothing_left()
    return result


def _snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@needs("seccomp")
def test_harmless_single_fork_is_already_refused():
    # The containment check before the real bomb: one fork, no loop.
    out = run_program("import os\nos.fork()\nprint('forked')", limits=FAST)
    assert out.status == "unsafe_syscall" and out.stdout == b""


@needs("seccomp")
def test_fork_bomb(containment_log):
    _attack("fork bomb", "import os\nwhile True:\n    os.fork()\nprint('ESCAPED')",
            containment_log, expect={"unsafe_syscall"})


@needs("user_switch")
def test_task_cap_holds_without_seccomp(containment_log):
    # Second layer alone: RLIMIT_NPROC on the private uid (bounded attempt, 40 forks).
    program = ("import os, time\nn = 0\ntry:\n    for _ in range(40):\n"
               "        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n"
               "        n += 1\nexcept OSError:\n    pass\nprint(n)\n")
    out = run_program(program, limits=FAST,
                      mechanisms=tuple(m for m in MECH if m != "seccomp"))
    containment_log("40 forks, RLIMIT_NPROC only", out.status, out.wall_seconds)
    assert out.status == "ok"
    assert int(out.stdout) == FAST.max_tasks - 1  # the program itself is the first task
    _assert_nothing_left()  # the sleeping children died with the PID namespace


def test_memory_hog(containment_log):
    # 128 MiB: touching pages costs wall time on a loaded machine, the limit is what matters.
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=3.0, memory_mb=128)
    _attack("memory hog", "x = []\nwhile True:\n    x.append(bytearray(10 ** 6))",
            containment_log, expect={"memory_limit"}, limits=limits)


def test_ten_gigabyte_file(containment_log, tmp_path):
    program = ("with open('big', 'wb') as f:\n    for _ in range(10 * 1024):\n"
               "        f.write(bytes(1 << 20))\nprint('ESCAPED')")
    _attack("10 GB file write", program, containment_log, expect={"runtime_error"},
            base_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # working directory gone, nothing left on disk


@needs("mountns")  # without the tmpfs cap this would fill the real disk
def test_many_files_fill_only_the_capped_tmpfs(containment_log, tmp_path):
    program = ("for i in range(1000):\n    with open(f'f{i}', 'wb') as f:\n"
               "        f.write(bytes(15 << 20))\nprint('ESCAPED')")
    _attack("1000 x 15 MB files", program, containment_log, expect={"runtime_error"},
            base_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("layer", ["all", "network namespace only"])
def test_socket_to_localhost(containment_log, layer):
    if layer != "all" and "netns" not in MECH:
        pytest.skip("no network namespace on this machine")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    program = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), "
               f"timeout=1)\nprint('ESCAPED')")
    try:
        if layer == "all":
            # seccomp kills at socket(); a network namespace alone fails at connect().
            expect = {"unsafe_syscall"} if "seccomp" in MECH else {"runtime_error"}
            _attack("socket to 127.0.0.1", program, containment_log, expect=expect)
        else:
            mech = tuple(m for m in MECH if m != "seccomp")
            out = run_program(program, limits=FAST, mechanisms=mech)
            containment_log("socket, netns layer only", out.status, out.wall_seconds)
            assert out.status == "runtime_error" and b"unreachable" in out.stderr
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing ever connected
    finally:
        listener.close()


@needs("pidns", "mountns")  # a fresh /proc hides the trainer
def test_parent_environment_is_invisible(containment_log, monkeypatch):
    secret = "pairht-fake-secret-7f3a9c"
    monkeypatch.setenv("PAIRHT_FAKE_SECRET", secret)
    program = (
        "import os\nseen = ' '.join(os.environ.values())\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n        seen += open(f'/proc/{pid}/environ', 'rb').read().decode('latin1')\n"
        "    except OSError:\n        pass\n"
        f"print('ESCAPED' if {secret!r} in seen else 'clean')\n"
    )
    _attack("read parent environment", program, containment_log, expect={"wrong_answer"})
    out = run_program("import os\nprint(sorted(os.environ))", limits=FAST)
    assert out.stdout.decode().strip() == str(sorted(sandbox_mod._scrubbed_env("/")))


@pytest.fixture
def world_dir():
    """A world-writable directory in a world-searchable place (the system temp dir), so
    only the sandbox, not a private ancestor directory, keeps the program out."""
    path = Path(tempfile.mkdtemp(prefix="pairht-canary-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@needs("mountns")
def test_write_outside_working_directory(containment_log, world_dir):
    target = world_dir
    (target / "canary").write_text("keep")
    os.chmod(target, 0o777)  # world-writable: only the sandbox itself can stop the writes
    os.chmod(target / "canary", 0o666)
    before = _snapshot(target)
    program = (
        "import os\nok = 0\n"
        f"for act in (lambda: open({str(target / 'new')!r}, 'w').write('x'),\n"
        f"            lambda: open({str(target / 'canary')!r}, 'a').write('x'),\n"
        f"            lambda: os.chmod({str(target / 'canary')!r}, 0o777),\n"
        f"            lambda: os.symlink('/etc/passwd', {str(target / 'link')!r}),\n"
        "            lambda: open('/tmp/pairht-escape', 'w').write('x')):\n"
        "    try:\n        act()\n        ok += 1\n    except OSError:\n        pass\n"
        "print('ESCAPED' if ok else 'clean')\n"
    )
    _attack("write outside working dir", program, containment_log, expect={"wrong_answer"})
    assert _snapshot(target) == before
    assert not os.path.exists("/tmp/pairht-escape")


@needs("mountns")
def test_delete_files_in_parent_directory(containment_log, world_dir, monkeypatch):
    parent = world_dir
    for name in ("a.txt", "b.txt"):
        (parent / name).write_text(name)
    os.chmod(parent, 0o777)
    monkeypatch.chdir(parent)  # the "trainer's" working directory
    (parent / "sub").mkdir()
    (parent / "sub" / "c.txt").write_text("c")
    before = _snapshot(parent)
    program = (
        "import os, shutil\ngone = 0\n"
        f"for d in ('..', {str(parent)!r}):\n"
        "    for name in os.listdir(d):  # readable: the directory is world-readable\n"
        "        try:\n            os.remove(os.path.join(d, name))\n            gone += 1\n"
        "        except OSError:\n            pass\n"
        f"shutil.rmtree({str(parent)!r}, ignore_errors=True)\n"
        f"print('ESCAPED' if gone or not os.path.exists({str(parent)!r}) else 'clean')\n"
    )
    # base_dir=parent: the sandbox directory is created inside it, so '..' is the parent too.
    _attack("delete parent's files", program, containment_log, expect={"wrong_answer"},
            base_dir=str(parent))
    assert _snapshot(parent) == before


def test_hundred_megabytes_of_stdout(containment_log):
    program = ("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(100):\n"
               "    sys.stdout.write(chunk)")
    _attack("100 MB to stdout", program, containment_log, expect={"output_limit"})


# Attacks that only a time limit can end: run once, concurrently, then judged one by one.
STUCK = {
    "infinite loop": ("while True:\n    pass", ""),
    "close stdout, then sleep": ("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)", ""),
    "never reads 8 MB of stdin": ("import time\ntime.sleep(60)", "x" * (8 << 20)),
    "spins on stdin after EOF": ("import sys\nwhile True:\n    sys.stdin.read()", ""),
    "lock deadlock": ("import threading\nl = threading.Lock()\nl.acquire()\nl.acquire()", ""),
}


@pytest.fixture(scope="module")
def stuck_results():
    names = list(STUCK)
    v = CodeVerifier(limits=FAST, max_workers=len(names))
    results = v([STUCK[n][0] for n in names],
                [{"inputs": [STUCK[n][1]], "outputs": ["ESCAPED"]} for n in names])
    _assert_nothing_left()
    return dict(zip(names, results))


@pytest.mark.parametrize("name", list(STUCK))
def test_programs_that_never_finish(containment_log, stuck_results, name):
    r = stuck_results[name]
    containment_log(name, r.verdicts[0], r.wall_seconds[0])
    assert r.reward == 0.0 and r.verdicts == ("timeout",)
    assert r.wall_seconds[0] < FAST.wall + 1.0  # stopped by the limit, not by luck


def test_close_stdout_then_exit(containment_log):
    _attack("close stdout, then exit", "import os\nos.close(1)\nprint('ESCAPED')",
            containment_log, expect={"runtime_error", "wrong_answer"})


def test_large_input_and_output_at_once_do_not_deadlock():
    # Both pipes beyond their buffers: the parent must write and read concurrently.
    data = "y" * (4 << 20)
    v = CodeVerifier(limits=SandboxLimits(cpu_seconds=2, wall_seconds=6.0, memory_mb=256,
                                          output_bytes=8 << 20))
    r = v(["import sys\nsys.stdout.write(sys.stdin.read())"],
          [{"inputs": [data], "outputs": [data]}])[0]
    assert r.verdicts == ("passed",)


@needs("seccomp")
def test_signalling_the_trainer(containment_log):
    program = (f"import os, signal\nfor pid in ({os.getpid()}, {os.getppid()}, 1):\n"
               "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n"
               "        pass\nos.kill(-1, signal.SIGKILL)\nprint('ESCAPED')")
    _attack("SIGKILL the trainer / everyone", program, containment_log,
            expect={"unsafe_syscall"})
    os.kill(os.getpid(), 0)  # still alive


@needs("seccomp")
def test_namespace_escape_attempt(containment_log):
    program = ("import ctypes\nlibc = ctypes.CDLL(None)\n"
               "print('ESCAPED' if libc.unshare(0x10000000) == 0 else 'refused')")
    _attack("unshare(CLONE_NEWUSER)", program, containment_log, expect={"unsafe_syscall"})


def test_capabilities_report_is_consistent():
    caps = sandbox_capabilities()
    facts = caps["facts"]
    assert "seccomp" in caps["mechanisms"] or "user_switch" in caps["mechanisms"]
    if "seccomp" in caps["mechanisms"]:
        assert facts["seccomp_mode"] == "2"
    if "user_switch" in caps["mechanisms"]:
        assert facts["uid"] != 0 and facts["euid"] != 0
    if "pidns" in caps["mechanisms"] and "mountns" in caps["mechanisms"]:
        assert facts["pid"] == 1
    if "netns" in caps["mechanisms"]:
        assert facts["net_devices"] == ["lo"]
    if "mountns" in caps["mechanisms"]:
        assert facts["root_writable"] is False and facts["cwd_writable"] is True


def test_sandbox_directory_mode_is_private(tmp_path):
    out = run_program("import os, stat\nprint(oct(stat.S_IMODE(os.stat('.').st_mode)))",
                      limits=FAST, base_dir=str(tmp_path))
    assert out.stdout.strip() == oct(stat.S_IRWXU).encode()
    assert signal.SIGSYS  # the verdict mapping relies on SIGSYS existing (Linux)


@needs("mountns")
def test_dataset_files_are_hidden(containment_log, world_dir):
    # A world-readable answers file in /tmp (hidden by default) and this repository (hidden
    # on request) are invisible, while the interpreter, which lives in the repository's
    # virtual environment here, still imports its standard library.
    answers = world_dir / "answers.json"
    answers.write_text('{"expected": "ESCAPED"}')
    os.chmod(answers, 0o644)
    repo_file = Path(__file__).resolve()
    top = "/" + repo_file.parts[1]
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=3.0, memory_mb=256,
                           hidden_paths=(*sandbox_mod.default_hidden_paths(), top))
    program = (
        "import fractions, json\nfound = []\n"
        f"for p in ({str(answers)!r}, {str(repo_file)!r}):\n"
        "    try:\n        found.append(open(p).read())\n    except OSError:\n        pass\n"
        "print('ESCAPED' if found else 'clean')\n"
    )
    _attack("read answers from disk", program, containment_log, expect={"wrong_answer"},
            limits=limits)
    visible = run_program(f"print(open({str(answers)!r}).read())", limits=FAST,
                          mechanisms=MECH)
    assert visible.status == "runtime_error" and b"FileNotFoundError" in visible.stderr


_NOBODY_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import sandbox
caps = sandbox.sandbox_capabilities()
lim = sandbox.SandboxLimits(cpu_seconds=1, wall_seconds=3.0, memory_mb=256)
runs = {name: sandbox.run_program(src, limits=lim).status for name, src in {
    "ok": "print(2)",
    "fork": "import os\nos.fork()",
    "socket": "import socket\nsocket.socket()",
    "write": f"open({sys.argv[2]!r} + '/x', 'w').write('x')",
}.items()}
print(json.dumps({"mechanisms": caps["mechanisms"], "facts": caps["facts"], "runs": runs}))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="needs root (to become nobody), setpriv and a system python nobody can run",
)
def test_unprivileged_caller_gets_user_namespace_or_seccomp(world_dir):
    # The same module, run by an unprivileged user (nobody) with the system interpreter.
    import json
    import subprocess

    pkg = str(Path(sandbox_mod.__file__).parent)
    out = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
         "-I", "-c", _NOBODY_SCRIPT, pkg, str(world_dir)],
        capture_output=True, text=True, timeout=60, cwd="/",
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert "seccomp" in report["mechanisms"] and "user_switch" not in report["mechanisms"]
    assert report["runs"]["ok"] == "ok"
    assert report["runs"]["fork"] == report["runs"]["socket"] == "unsafe_syscall"
    if "mountns" in report["mechanisms"]:
        assert report["runs"]["write"] == "runtime_error"
        assert report["facts"]["root_writable"] is False
        assert list(world_dir.iterdir()) == []


def test_cpu_limit_alone_stops_a_busy_loop(containment_log):
    # Wall limit far away: only RLIMIT_CPU (kernel SIGKILL at the hard limit) can end it.
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=30.0, memory_mb=256)
    out = run_program("while True:\n    pass", limits=limits)
    containment_log("busy loop, CPU limit only", out.status, out.wall_seconds)
    assert out.status == "timeout" and out.detail == "CPU time limit"
    assert out.signal == signal.SIGKILL and out.cpu_seconds >= 0.9
    assert out.wall_seconds < 30.0
