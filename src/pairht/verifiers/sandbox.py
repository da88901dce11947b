"""Run one untrusted Python program under OS-level confinement (Linux).

The PAIR paper (appendix "Data and contamination controls") runs programs "in a
network-disabled sandbox with per-test CPU and memory limits"; compilation failures, timeouts
and unsafe system calls receive zero reward. This module is that sandbox. Every run:

* starts ``python -I -B _launcher.py`` in a new session (own process group), with a scrubbed
  environment (``PATH``, ``LANG``, ``HOME``/``TMPDIR`` = the working directory, BLAS thread
  counts; nothing inherited, so no tokens or secrets), and a fresh empty working directory
  that is removed afterwards;
* the launcher confines itself before any program byte runs (see ``_launcher.py`` for the
  exact order): namespaces (mount, network, IPC, UTS, PID), the whole file system read-only
  except a size-capped tmpfs working directory, homes, temporary directories and data caches
  hidden under empty mounts (:func:`default_hidden_paths`), a dedicated uid/gid with no
  capabilities, rlimits (CPU seconds, address space, file size, open files, tasks), a seccomp filter
  that kills the process on ``socket``, ``fork``/``vfork``/non-thread ``clone``, ``execve``,
  ``ptrace``, ``mount``, ``setsid`` and other escape-relevant calls;
* the parent enforces the wall-clock limit and an output cap, and kills the whole process
  group (SIGKILL) on either, then removes the directory.

What is *not* contained: programs can read world-readable files outside the hidden
directories (system files, and e.g. a repository under /work unless you add it to
``hidden_paths``); the tmpfs working directory uses RAM (at most ``disk_mb`` per run in
flight). Without root, a user namespace replaces the private uid: the program runs as the
trainer's uid (no capabilities), tasks are not capped per run (seccomp still forbids new
processes), and where user namespaces are disabled only seccomp and rlimits remain, so files
the trainer's user may write are writable by programs too (the capabilities report says so).
The seccomp tables cover x86_64 (checked against the kernel headers) and aarch64 (from
asm-generic/unistd.h, not exercised on hardware); elsewhere there is no filter.

Which mechanisms are active depends on the machine; :func:`sandbox_capabilities` probes them
once per process by confining a probe program and reading back what it observed. Nothing runs
unless the number of processes is capped (by seccomp or by a per-sandbox uid with
``RLIMIT_NPROC``): without either, :func:`run_program` raises :class:`SandboxUnavailable`.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "RunOutcome",
    "SandboxLimits",
    "SandboxUnavailable",
    "default_hidden_paths",
    "run_program",
    "sandbox_capabilities",
]

_LAUNCHER = str(Path(__file__).with_name("_launcher.py"))
_ALL_MECHANISMS = ("seccomp", "user_switch", "mountns", "pidns", "netns", "ipcns")
_UNPRIVILEGED_MECHANISMS = ("seccomp", "userns", "mountns", "pidns", "netns", "ipcns")
_MECH_ORDER = ("seccomp", "user_switch", "userns", "mountns", "pidns", "netns", "ipcns")
# Greedy fallback order when the full set cannot be set up: drop the most demanding first.
_DROP_ORDER = ("mountns", "pidns", "ipcns", "netns", "userns", "user_switch", "seccomp")
_STDERR_KEEP = 4096


class SandboxUnavailable(RuntimeError):
    """The machine offers no way to cap process creation, so untrusted code is not run."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits (one run = one program on one test).

    Parameters
    ----------
    cpu_seconds : int
        ``RLIMIT_CPU`` (soft = hard, whole seconds); the kernel SIGKILLs the program there.
    wall_seconds : float or None
        Wall-clock limit enforced by the parent (SIGKILL to the process group); None means
        ``2 * cpu_seconds + 1`` (start-up plus a sleeping or blocked program).
    memory_mb : int
        ``RLIMIT_AS`` (address space) in MiB; 0 disables it.
    file_mb : int
        ``RLIMIT_FSIZE``: largest file the program may write, MiB.
    disk_mb, max_files : int
        Size and inode caps of the tmpfs working directory (with a mount namespace).
    max_open_files : int
        ``RLIMIT_NOFILE``.
    max_tasks : int
        ``RLIMIT_NPROC`` for the sandbox's private uid: processes plus threads.
    output_bytes : int
        Largest stdout (and stderr) the parent reads; beyond it the run is killed.
    hidden_paths : tuple of str or None
        Directories covered by an empty read-only tmpfs inside the sandbox (with a mount
        namespace), so programs cannot read, e.g., the dataset with the expected outputs.
        None means :func:`default_hidden_paths`. Paths the interpreter needs below them stay
        visible (exactly those paths); a directory containing the interpreter is not hidden.
    """

    cpu_seconds: int = 4
    wall_seconds: float | None = None
    memory_mb: int = 1024
    file_mb: int = 16
    disk_mb: int = 64
    max_files: int = 512
    max_open_files: int = 64
    max_tasks: int = 16
    output_bytes: int = 8 << 20
    hidden_paths: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.hidden_paths is not None and (
            isinstance(self.hidden_paths, str)
            or not all(isinstance(p, str) and p.startswith("/") for p in self.hidden_paths)
        ):
            raise ValueError(
                f"SandboxLimits.hidden_paths must be a tuple of absolute paths or None; "
                f"got {self.hidden_paths!r}"
            )
        for name in ("cpu_seconds", "file_mb", "disk_mb", "max_files", "max_open_files",
                     "max_tasks", "output_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SandboxLimits.{name} must be a positive int; got {value!r}")
        if not isinstance(self.memory_mb, int) or self.memory_mb < 0:
            raise ValueError(
                f"SandboxLimits.memory_mb must be an int >= 0 (0 = no limit); "
                f"got {self.memory_mb!r}"
            )
        if self.wall_seconds is not None and not self.wall_seconds > 0:
            raise ValueError(
                f"SandboxLimits.wall_seconds must be > 0 or None; got {self.wall_seconds!r}"
            )

    @property
    def wall(self) -> float:
        return float(self.wall_seconds) if self.wall_seconds else 2.0 * self.cpu_seconds + 1.0


@dataclass(frozen=True)
class RunOutcome:
    """What happened to one run.

    ``status`` is one of ``"ok"`` (exited 0), ``"runtime_error"`` (non-zero exit or a
    signal), ``"memory_limit"`` (MemoryError under ``RLIMIT_AS``), ``"timeout"`` (CPU or
    wall limit), ``"output_limit"``, ``"unsafe_syscall"`` (killed by the seccomp filter),
    ``"compile_error"`` or ``"sandbox_error"`` (the confinement could not be set up; the
    program did not run).
    """

    status: str
    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int | None = None
    signal: int | None = None
    wall_seconds: float = 0.0
    cpu_seconds: float | None = None
    detail: str = ""
    mechanisms: tuple[str, ...] = field(default=())


# -- per-run private uids ---------------------------------------------------------------------
# Each concurrent run gets its own uid, so RLIMIT_NPROC counts exactly that run's tasks and no
# run can signal or read another. 2**30 + (pid << 8) + slot stays clear of real accounts and
# of other processes using this module (pids differ).
_SLOTS: queue.Queue[int] = queue.Queue()
for _s in range(256):
    _SLOTS.put(_s)


def _uid_for(slot: int) -> int:
    return (1 << 30) + ((os.getpid() & 0xFFFFF) << 8) + slot


_STANDARD_HIDDEN = ("/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run", "/mnt", "/media",
                    "/srv", "/var/lib", "/var/log", "/var/cache", "/var/mail", "/var/spool")
_CACHE_VARS = ("HF_HOME", "HF_DATASETS_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE",
               "XDG_CACHE_HOME", "XDG_DATA_HOME", "TORCH_HOME")


def default_hidden_paths() -> tuple[str, ...]:
    """Directories hidden from sandboxed programs by default.

    Homes, temporary and runtime directories, ``/var`` state, and the Hugging Face / XDG /
    torch cache directories named in this process's environment (where datasets, and so the
    expected outputs, usually live). Add your data directories via
    ``SandboxLimits(hidden_paths=default_hidden_paths() + ("/data",))``.

    Examples
    --------
    >>> "/root" in default_hidden_paths() and "/tmp" in default_hidden_paths()
    True
    """
    extra = tuple(os.environ[v] for v in _CACHE_VARS if os.environ.get(v, "").startswith("/"))
    return _STANDARD_HIDDEN + extra


def _scrubbed_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _launch(
    cfg: dict,
    stdin: bytes,
    limits: SandboxLimits,
    mechanisms: tuple[str, ...],
    base_dir: str | None,
) -> RunOutcome:
    """Start the launcher, feed it, watch it, kill its group, clean up. Never raises on
    anything the program does."""
    slot = _SLOTS.get()
    try:
        workdir = tempfile.mkdtemp(prefix="pairht-sbx-", dir=base_dir)
        status_r, status_w = os.pipe()
    except OSError as exc:  # disk full, no descriptors: a failed run, not a crash
        _SLOTS.put(slot)
        return RunOutcome("sandbox_error", detail=f"could not prepare: {exc!r}",
                          mechanisms=mechanisms)
    start = time.monotonic()
    proc = None
    try:
        uid = _uid_for(slot)
        if "user_switch" in mechanisms and "mountns" not in mechanisms:
            os.chown(workdir, uid, uid)
        cfg = dict(
            cfg,
            status_fd=status_w,
            mechanisms=list(mechanisms),
            uid=uid,
            gid=uid,
            workdir=workdir,
            cpu_seconds=limits.cpu_seconds,
            memory_bytes=limits.memory_mb << 20,
            file_bytes=limits.file_mb << 20,
            disk_kb=limits.disk_mb << 10,
            max_files=limits.max_files,
            max_open_files=limits.max_open_files,
            max_tasks=limits.max_tasks,
            hidden_paths=list(
                default_hidden_paths() if limits.hidden_paths is None else limits.hidden_paths
            ),
        )
        header = json.dumps(cfg).encode()
        if len(header) >= 10**8:  # the length field has 8 digits
            return RunOutcome("sandbox_error", detail="program and arguments exceed 100 MB",
                              mechanisms=mechanisms)
        payload = b"%08d" % len(header) + header + stdin
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-B", _LAUNCHER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_w,),
                close_fds=True,
                start_new_session=True,
                env=_scrubbed_env(workdir),
                cwd=workdir,
            )
        except OSError as exc:  # e.g. out of file descriptors: a failed run, not a crash
            return RunOutcome("sandbox_error", detail=f"could not start: {exc!r}",
                              mechanisms=mechanisms)
        os.close(status_w)
        status_w = -1
        return _supervise(proc, payload, status_r, limits, start, mechanisms)
    finally:
        if proc is not None:
            # Kill the group before reaping the launcher: while it is unreaped its pid (and so
            # the group id) cannot be reused by an unrelated process.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
        for fd in (status_r, status_w):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        _SLOTS.put(slot)


def _supervise(proc, payload, status_r, limits, start, mechanisms) -> RunOutcome:
    deadline = start + limits.wall
    out, err, status = bytearray(), b"", bytearray()
    err_total = 0
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdin.fileno(), False)
    sel.register(proc.stdin, selectors.EVENT_WRITE, "in")
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    sel.register(status_r, selectors.EVENT_READ, "status")
    view = memoryview(payload)
    killed = ""
    try:
        # Until the program's stdout, stderr and the status pipe are all closed (stdin may
        # still be unwritten if the program never reads it).
        while any(k.data != "in" for k in sel.get_map().values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                killed = "timeout"
                break
            for key, _ in sel.select(remaining):
                tag = key.data
                if tag == "in":
                    try:
                        view = view[os.write(key.fd, view[:65536]) :]
                    except (BrokenPipeError, OSError):
                        view = view[:0]
                    if not view:
                        sel.unregister(key.fileobj)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                if tag == "out":
                    out += chunk
                    if len(out) > limits.output_bytes:
                        killed = "output_limit"
                elif tag == "err":
                    # Keep the tail: the exception type is on the last traceback line.
                    err_total += len(chunk)
                    err = (err + chunk)[-_STDERR_KEEP:]
                    if err_total > limits.output_bytes:
                        killed = "output_limit"
                else:
                    status += chunk
            if killed:
                break
    finally:
        sel.close()
    wall = time.monotonic() - start
    records = []
    for line in bytes(status).splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    common = dict(stdout=bytes(out[: limits.output_bytes]), stderr=bytes(err),
                  wall_seconds=wall, mechanisms=mechanisms)
    if killed:
        return RunOutcome(killed, detail=f"killed by the parent ({killed})", **common)
    return _classify(records, limits, common)


def _classify(records: list[dict], limits: SandboxLimits, common: dict) -> RunOutcome:
    by_phase = {r.get("phase"): r for r in records}
    if "setup_error" in by_phase:
        return RunOutcome("sandbox_error", detail=by_phase["setup_error"]["error"], **common)
    if "compile_error" in by_phase:
        return RunOutcome("compile_error", detail=by_phase["compile_error"]["error"], **common)
    if "probe" in by_phase:
        return RunOutcome("ok", detail=json.dumps(by_phase["probe"]["facts"]), **common)
    ex = by_phase.get("exit")
    if ex is None:
        return RunOutcome("sandbox_error", detail="the launcher reported no exit status",
                          **common)
    code, sig, cpu = ex["code"], ex["signal"], ex["cpu_seconds"]
    info = dict(exit_code=code, signal=sig, cpu_seconds=cpu)
    if sig == signal.SIGSYS:
        return RunOutcome("unsafe_syscall", detail="killed by the seccomp filter", **info,
                          **common)
    # The kernel's SIGKILL at RLIMIT_CPU; rusage, sampled at ticks, reads a few percent low.
    if sig in (signal.SIGKILL, signal.SIGXCPU) and cpu >= 0.9 * limits.cpu_seconds:
        return RunOutcome("timeout", detail="CPU time limit", **info, **common)
    if sig is not None:
        return RunOutcome("runtime_error", detail=f"killed by signal {sig}", **info, **common)
    if code != 0:
        status = "memory_limit" if b"MemoryError" in common["stderr"] else "runtime_error"
        return RunOutcome(status, detail=f"exit status {code}", **info, **common)
    return RunOutcome("ok", **info, **common)


def run_program(
    source: str,
    *,
    stdin: bytes = b"",
    fn_name: str | None = None,
    args: list | None = None,
    limits: SandboxLimits | None = None,
    base_dir: str | None = None,
    mechanisms: tuple[str, ...] | None = None,
) -> RunOutcome:
    """Run ``source`` once in the sandbox.

    With ``fn_name=None`` the program reads ``stdin`` and its stdout is returned. With
    ``fn_name`` set, the program is executed, then ``fn_name(*args)`` is called (a top-level
    function, or a method of ``Solution()`` in LeetCode style) and its return value comes
    back as JSON in ``stdout``; the program's own prints are discarded.

    Parameters
    ----------
    source : str
        Python program text.
    stdin : bytes
        Program input (stdin mode).
    fn_name : str or None
        Function to call (call mode).
    args : list or None
        Positional arguments for ``fn_name`` (JSON-serialisable).
    limits : SandboxLimits or None
        Resource limits; defaults to ``SandboxLimits()``.
    base_dir : str or None
        Where the per-run working directory is created (default: the system temp dir).
    mechanisms : tuple of str or None
        Confinement to apply; None means everything :func:`sandbox_capabilities` found.
        A subset (it must keep ``"seccomp"`` or ``"user_switch"``) lets tests check each
        layer on its own.

    Returns
    -------
    RunOutcome

    Raises
    ------
    SandboxUnavailable
        If neither seccomp nor a private uid can cap process creation on this machine.

    Examples
    --------
    >>> run_program("print(int(input()) * 2)", stdin=b"21\\n").stdout
    b'42\\n'
    >>> run_program("def f(a, b):\\n    return a + b", fn_name="f", args=[2, 3]).stdout
    b'5'
    >>> run_program("import socket; socket.socket()").status
    'unsafe_syscall'
    """
    if not isinstance(source, str):
        raise ValueError(f"source must be a str of Python code; got {type(source).__name__}")
    if not isinstance(stdin, (bytes, bytearray)):
        raise ValueError(f"stdin must be bytes; got {type(stdin).__name__}")
    if fn_name is not None and not isinstance(fn_name, str):
        raise ValueError(f"fn_name must be a str or None; got {fn_name!r}")
    limits = SandboxLimits() if limits is None else limits
    if not isinstance(limits, SandboxLimits):
        raise ValueError(f"limits must be a SandboxLimits or None; got {limits!r}")
    active = _active_mechanisms()
    if mechanisms is None:
        mechanisms = active
    else:
        mechanisms = tuple(mechanisms)
        extra = set(mechanisms) - set(active)
        if extra or not {"seccomp", "user_switch"} & set(mechanisms):
            raise ValueError(
                f"mechanisms must be a subset of the active ones {active} that keeps "
                f"'seccomp' or 'user_switch' (a process cap); got {mechanisms}"
            )
    cfg: dict[str, object] = {"source": source, "mode": "stdio" if fn_name is None else "call"}
    if fn_name is not None:
        cfg.update(fn_name=fn_name, args=list(args or []))
    return _launch(cfg, bytes(stdin), limits, mechanisms, base_dir)


_CAPS: dict | None = None
_CAPS_LOCK = threading.Lock()


def _probe(mechanisms: tuple[str, ...]) -> tuple[bool, dict]:
    limits = SandboxLimits(cpu_seconds=5, wall_seconds=20.0)
    outcome = _launch({"source": "", "mode": "stdio", "probe": True}, b"", limits,
                      mechanisms, None)
    if outcome.status != "ok" or not outcome.detail.startswith("{"):
        return False, {"error": outcome.detail or outcome.status}
    facts = json.loads(outcome.detail)
    return facts.get("stdlib_importable") is True, facts


def sandbox_capabilities(refresh: bool = False) -> dict:
    """Which confinement mechanisms work on this machine (probed once per process).

    Returns
    -------
    dict
        ``{"mechanisms": tuple of active names, "process_cap": str, "network": str,
        "filesystem": str, "facts": dict}`` where the names are among

        - ``"seccomp"``: BPF filter killing the process on socket, fork, exec, ptrace, mount,
          setsid, ... (threads allowed);
        - ``"user_switch"``: private uid/gid, no capabilities, ``RLIMIT_NPROC`` per run
          (root only);
        - ``"userns"``: without root, a user namespace owning the namespaces below (uid 0
          inside, the caller's uid outside), every capability dropped before the program;
        - ``"mountns"``: private mounts, everything read-only, tmpfs working directory;
        - ``"pidns"``: own PID namespace and /proc (host processes invisible, all reaped);
        - ``"netns"``: own network namespace (no interfaces up, not even loopback);
        - ``"ipcns"``: own System V IPC namespace.

        ``"facts"`` is what the confined probe observed (its uid, pid, seccomp mode, network
        interfaces, whether / and its working directory are writable).

        ``rlimits`` (CPU, address space, file size, open files) are always applied. The probe
        confines a program with every mechanism, drops mechanisms until setup succeeds (in the
        order mountns, pidns, ipcns, netns, userns, user_switch, seccomp), then tries to add
        each dropped one back; a set counts only if the confined program can still import
        the standard library.

    Examples
    --------
    >>> caps = sandbox_capabilities()
    >>> set(caps["mechanisms"]) <= {"seccomp", "user_switch", "userns", "mountns", "pidns",
    ...                             "netns", "ipcns"}
    True
    """
    global _CAPS
    with _CAPS_LOCK:
        if _CAPS is not None and not refresh:
            return _CAPS
        # Root switches to a private uid; anyone else needs a user namespace to own the
        # other namespaces (and cannot cap tasks per run: NPROC would count the whole user).
        candidates = list(_ALL_MECHANISMS if os.geteuid() == 0 else _UNPRIVILEGED_MECHANISMS)
        ok, facts = _probe(tuple(candidates))
        dropped = []
        for name in _DROP_ORDER:
            if ok:
                break
            if name in candidates:
                candidates.remove(name)
                dropped.append(name)
                ok, facts = _probe(tuple(candidates))
        if ok:
            # A drop may have been needless (another mechanism was the culprit): add back.
            for name in reversed(dropped[:-1]):
                trial = [*candidates, name]
                trial_ok, trial_facts = _probe(tuple(sorted(trial, key=_MECH_ORDER.index)))
                if trial_ok:
                    candidates, facts = trial, trial_facts
        mech = tuple(sorted(candidates, key=_MECH_ORDER.index)) if ok else ()
        _CAPS = {
            "mechanisms": mech,
            "process_cap": (
                "seccomp kills fork/vfork/clone-without-CLONE_THREAD/execve; "
                f"RLIMIT_NPROC={SandboxLimits().max_tasks} tasks on a private uid"
                if {"seccomp", "user_switch"} <= set(mech)
                else "seccomp (no new processes)" if "seccomp" in mech
                else "RLIMIT_NPROC on a private uid" if "user_switch" in mech
                else "none"
            ),
            "network": (
                "network namespace without interfaces + seccomp kills socket()"
                if {"netns", "seccomp"} <= set(mech)
                else "network namespace" if "netns" in mech
                else "seccomp kills socket()" if "seccomp" in mech
                else "none"
            ),
            "identity": (
                "private uid/gid per run, no capabilities" if "user_switch" in mech
                else "user namespace: the caller's uid outside, no capabilities"
                if "userns" in mech
                else "the caller's uid"
            ),
            "filesystem": (
                "read-only mounts, private size-capped tmpfs working directory, "
                "hidden_paths under empty mounts"
                if "mountns" in mech
                else "private uid: permission bits only (world-writable dirs stay writable)"
                if "user_switch" in mech
                else "none beyond RLIMIT_FSIZE"
            ),
            "facts": facts,
        }
        return _CAPS


def _active_mechanisms() -> tuple[str, ...]:
    caps = sandbox_capabilities()
    mech = caps["mechanisms"]
    if "seccomp" not in mech and "user_switch" not in mech:
        raise SandboxUnavailable(
            "no mechanism to cap process creation works here (seccomp filter and private uid "
            f"both failed: {caps['facts']}); refusing to run untrusted code"
        )
    return mech

