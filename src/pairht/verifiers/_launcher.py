"""In-sandbox launcher: confines its own process, then runs one untrusted Python program.

Executed as ``python -I _launcher.py`` by :mod:`pairht.verifiers.sandbox`, never imported.
It is a fresh, single-threaded process, which is why all confinement happens here rather than
in a ``preexec_fn`` (unsafe in a threaded parent such as a trainer: the forked child can
deadlock on a lock held by another thread). Standard library only, so start-up stays cheap.

Protocol: stdin starts with an 8-digit decimal length and that many bytes of JSON (the
configuration, including the program source); the rest of stdin is the program's own stdin.
Status lines (JSON) go to the descriptor ``cfg["status_fd"]``, which the program never sees.

Order of operations, each step optional per ``cfg["mechanisms"]``:

launcher (root, or uid 0 of its own user namespace; own session)
  1. unshare(mount | net | ipc | uts | pid namespaces); without root, also a user namespace
     (uid 0 inside = the caller's uid outside) that owns them
  2. make every mount private, so nothing propagates back to the machine
  3. hide directories (``cfg["hidden_paths"]``: homes, temp dirs, caches, data; and any
     directory others cannot search, such as /root) under empty tmpfs mounts, carrying over
     bind clones of exactly the paths the interpreter needs below them
  4. recursively remount everything read-only and nosuid (mount_setattr)
  5. mount a size-capped tmpfs over the working directory, owned by the sandbox uid
  6. fork; the child is PID 1 of the new PID namespace, so when it exits the kernel kills
     every process left in the namespace
child
  7. fresh /proc for the new PID namespace (host processes invisible)
  8. chdir into the tmpfs; set rlimits (CPU soft = hard: init ignores SIGXCPU, so the kernel's
     SIGKILL at the hard limit is what stops it), address space, file size, files, tasks
  9. drop to a dedicated uid/gid with no groups (all capabilities go with it); in a user
     namespace instead, empty every capability set
 10. parent-death signal, no_new_privs, seccomp filter (kills on fork/exec/socket/mount/...,
     and on signals to any process but itself)
 11. compile and run the program in this interpreter (no exec is needed, so exec can be
     forbidden outright)
"""

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

AT_FDCWD = -100
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
MOVE_MOUNT_F_EMPTY_PATH = 0x4
AT_EMPTY_PATH = 0x1000
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
ENOSYS = 38

# Syscall numbers, checked against the kernel uapi headers (asm/unistd_64.h and
# asm-generic/unistd.h): one row per call, a column per architecture of _COLUMN, None where
# the architecture lacks the call. Unknown architectures get no seccomp filter (reported by
# the probe).
_COLUMN = {"x86_64": 0, "aarch64": 1}
#: AUDIT_ARCH_* of each architecture and its x32 ABI bit (None: no x32 ABI).
_AUDIT = {"x86_64": (0xC000003E, 0x40000000), "aarch64": (0xC00000B7, None)}
#: Calls the filter allows under conditions (threads only, signals to itself, ENOSYS).
_GUARDED = {"clone": (56, 220), "clone3": (435, 435), "kill": (62, 129), "tgkill": (234, 131)}
#: Calls the filter kills the program on.
_DENY = {
    "socket": (41, 198), "socketpair": (53, 199), "fork": (57, None), "vfork": (58, None),
    "execve": (59, 221), "execveat": (322, 281), "ptrace": (101, 117),
    "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "unshare": (272, 97),
    "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "chroot": (161, 51), "mount_setattr": (442, 442), "open_tree": (428, 428),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "bpf": (321, 280), "perf_event_open": (298, 241), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "setsid": (112, 157), "setpgid": (109, 154),
    "kcmp": (312, 272), "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "quotactl": (179, 60), "acct": (163, 89), "settimeofday": (164, 170),
    "clock_settime": (227, 112), "clock_adjtime": (305, 266), "adjtimex": (159, 171),
    "sethostname": (170, 161), "setdomainname": (171, 162), "iopl": (172, None),
    "ioperm": (173, None), "syslog": (103, 116), "vhangup": (153, 58), "pidfd_getfd": (438, 438),
    "tkill": (200, 130), "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240),
    "pidfd_send_signal": (424, 424), "pidfd_open": (434, 434),
}


def _arch_table(arch):
    """``arch``'s numbers: ``audit``, ``x32_bit``, the guarded calls by name and ``deny``."""
    col = _COLUMN[arch]
    audit, x32_bit = _AUDIT[arch]
    table = {name: nrs[col] for name, nrs in _GUARDED.items()}
    table.update(audit=audit, x32_bit=x32_bit,
                 deny={name: nrs[col] for name, nrs in _DENY.items() if nrs[col] is not None})
    return table


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_capabilities():
    """Empty bounding, effective, permitted and inheritable sets (ambient follows)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL past the last capability the kernel knows
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data),
           "capset")


def _map_user(uid, gid):
    """Inside a fresh user namespace: be uid/gid 0 there, the caller's ids outside."""
    with open("/proc/self/setgroups", "w") as fh:
        fh.write("deny")
    with open("/proc/self/uid_map", "w") as fh:
        fh.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as fh:
        fh.write(f"0 {gid} 1")


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _check(ret, what):
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _enc(s):
    return None if s is None else s.encode()


def _mount(source, target, fstype, flags, data):
    enc = _enc
    _check(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {target}",
    )


def _syscall_nr(name):
    return _DENY[name][_COLUMN[os.uname().machine]]


def _open_tree_clone(path):
    fd = _libc.syscall(
        ctypes.c_long(_syscall_nr("open_tree")), ctypes.c_int(AT_FDCWD), path.encode(),
        ctypes.c_uint(OPEN_TREE_CLONE | AT_RECURSIVE),
    )
    return _check(fd, f"open_tree {path}")


def _move_mount(fd, target):
    _check(
        _libc.syscall(
            ctypes.c_long(_syscall_nr("move_mount")), ctypes.c_int(fd), b"",
            ctypes.c_int(AT_FDCWD), target.encode(), ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH),
        ),
        f"move_mount {target}",
    )


def _readonly_everything():
    attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    _check(
        _libc.syscall(
            ctypes.c_long(_syscall_nr("mount_setattr")), ctypes.c_int(AT_FDCWD), b"/",
            ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        "mount_setattr / read-only",
    )


def _minimal(paths):
    """Drop every path that lies below another one of the list."""
    out = []
    for p in sorted(set(paths)):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def _below(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def _interpreter_paths():
    needed = [sys.executable, os.path.dirname(sys.executable), sys.prefix, sys.base_prefix,
              sys.exec_prefix, sys.base_exec_prefix, *sys.path]
    return _minimal(os.path.realpath(p) for p in needed if p and os.path.exists(p))


def _unsearchable_ancestors(paths):
    """Directories others cannot search that stand between / and a needed path."""
    out = []
    for p in paths:
        cur = ""
        for part in p.split("/")[1:-1]:
            cur = cur + "/" + part
            if not os.stat(cur).st_mode & 0o001:
                out.append(cur)
                break
    return out


def _mask(hidden, workdir):
    """Cover each hidden directory with an empty tmpfs, keeping what the interpreter needs.

    Needed paths below a hidden directory (the Python installation, site-packages, the
    sandbox's own working directory) are carried over as bind clones of exactly those paths,
    so e.g. /root shows only the Python installation under it and nothing else.
    """
    keep = _interpreter_paths()
    roots = [os.path.realpath(h) for h in hidden if os.path.isdir(h)]
    roots += _unsearchable_ancestors(keep)
    for root in _minimal(roots):
        if any(_below(root, k) for k in keep):
            continue  # the interpreter lives inside it: cannot hide it
        below = [k for k in keep if _below(k, root)]
        clones = [(_open_tree_clone(k), k, os.path.isdir(k)) for k in below]
        _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for fd, path, is_dir in clones:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if is_dir:
                os.mkdir(path)
            else:
                open(path, "w").close()
            _move_mount(fd, path)
            os.close(fd)
        if _below(workdir, root):
            os.makedirs(workdir, exist_ok=True)


def _seccomp_program(arch):
    t = _arch_table(arch)
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    kill = (ret, 0, 0, SECCOMP_RET_KILL_PROCESS)
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, t["audit"]), kill, (ld, 0, 0, 0)]
    if t["x32_bit"] is not None:
        prog += [(jge, 0, 1, t["x32_bit"]), kill]
    for nr in sorted(set(t["deny"].values())):
        prog += [(jeq, 0, 1, nr), kill]
    # clone is allowed only for threads (CLONE_THREAD in the flags, args[0], low word at 16).
    prog += [
        (jeq, 0, 4, t["clone"]),
        (ld, 0, 0, 16),
        (jset, 1, 0, CLONE_THREAD),
        kill,
        (ret, 0, 0, SECCOMP_RET_ALLOW),
    ]
    # Signals only to itself: kill(own pid) and tgkill(own pid, any thread). Without a
    # private uid or PID namespace the program would otherwise share the trainer's uid and
    # could signal it.
    me = os.getpid()
    for name, ok_targets in (("kill", (me,)), ("tgkill", (me,))):
        prog += [(jeq, 0, 2 + 2 * len(ok_targets), t[name]), (ld, 0, 0, 16)]
        for target in ok_targets:
            prog += [(jeq, 0, 1, target), (ret, 0, 0, SECCOMP_RET_ALLOW)]
        prog += [kill]
    # clone3 keeps its flags in memory the filter cannot read: ENOSYS makes glibc fall back
    # to clone, which the rule above inspects.
    prog += [(jeq, 0, 1, t["clone3"]), (ret, 0, 0, SECCOMP_RET_ERRNO | ENOSYS)]
    prog += [(ret, 0, 0, SECCOMP_RET_ALLOW)]
    return prog


def _install_seccomp():
    prog = _seccomp_program(os.uname().machine)
    arr = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), arr)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(
        _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "seccomp",
    )


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError("launcher header truncated")
        buf += chunk
    return buf


def _status(fd, **record):
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    except OSError:
        pass


def _namespaces(cfg, mech):
    """Steps 1-5, in the launcher (still root). Returns the steps that took effect."""
    done = []
    flags = 0
    for name, flag in (("netns", CLONE_NEWNET), ("ipcns", CLONE_NEWIPC), ("pidns", CLONE_NEWPID)):
        if name in mech:
            flags |= flag
    if "mountns" in mech:
        flags |= CLONE_NEWNS | CLONE_NEWUTS
    outer_uid, outer_gid = os.getuid(), os.getgid()
    if "userns" in mech:
        # Unprivileged: a user namespace owns the others and makes the mounts possible.
        flags |= CLONE_NEWUSER
    if flags:
        _check(_libc.unshare(ctypes.c_int(flags)), "unshare")
        if "userns" in mech:
            _map_user(outer_uid, outer_gid)
        done += [m for m in ("userns", "netns", "ipcns", "pidns", "mountns") if m in mech]
    if "mountns" in mech:
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        _mask(cfg["hidden_paths"], cfg["workdir"])
        _readonly_everything()
        uid, gid = cfg["uid"], cfg["gid"]
        opts = f"size={cfg['disk_kb']}k,nr_inodes={cfg['max_files']},mode=0700"
        if "user_switch" in mech:
            opts += f",uid={uid},gid={gid}"
        _mount("tmpfs", cfg["workdir"], "tmpfs", MS_NOSUID | MS_NODEV, opts)
    return done


def _confine_child(cfg, mech):
    """Steps 7-10, in the forked child."""
    if "pidns" in mech and "mountns" in mech:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    os.chdir(cfg["workdir"])
    cpu = int(cfg["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_bytes"], cfg["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["max_open_files"], cfg["max_open_files"]))
    if cfg["memory_bytes"]:
        resource.setrlimit(resource.RLIMIT_AS, (cfg["memory_bytes"], cfg["memory_bytes"]))
    if "user_switch" in mech:
        # NPROC counts tasks (threads too) per real uid; the uid is private to this sandbox,
        # so the cap is exactly this program's.
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg["max_tasks"], cfg["max_tasks"]))
        os.setgroups([])
        os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    if "userns" in mech:
        _drop_capabilities()
    # After the credential change (which clears it): die with the launcher.
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
    if "seccomp" in mech:
        _install_seccomp()


def _probe_child():
    """Checks run inside a fully confined probe child; results go to the status pipe."""
    facts = {"uid": os.getuid(), "euid": os.geteuid()}
    try:
        import fractions  # noqa: F401  (a module not yet imported: is the stdlib readable?)

        facts["stdlib_importable"] = True
    except Exception as exc:
        facts["stdlib_importable"] = repr(exc)
    facts["pid"] = os.getpid()
    facts["cwd_writable"] = os.access(".", os.W_OK)
    facts["root_writable"] = os.access("/", os.W_OK) or os.access("/tmp", os.W_OK)
    with open("/proc/self/status") as fh:
        facts["seccomp_mode"] = next(ln.split()[1] for ln in fh if ln.startswith("Seccomp:"))
    with open("/proc/self/net/dev") as fh:  # this network namespace's interfaces
        facts["net_devices"] = sorted(ln.split(":")[0].strip() for ln in fh if ":" in ln)
    return facts


def main():
    hdr = _read_exact(0, 8)
    cfg = json.loads(_read_exact(0, int(hdr)))
    sfd = cfg["status_fd"]
    mech = set(cfg["mechanisms"])
    try:
        _namespaces(cfg, mech)
    except Exception as exc:
        _status(sfd, phase="setup_error", where="launcher", error=repr(exc))
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        try:
            _confine_child(cfg, mech)
            if cfg.get("probe"):
                _status(sfd, phase="probe", facts=_probe_child())
                os._exit(0)
            code = compile(cfg["source"], "solution.py", "exec")
        except SyntaxError as exc:
            _status(sfd, phase="compile_error", error=repr(exc))
            os._exit(1)
        except BaseException as exc:
            _status(sfd, phase="setup_error", where="child", error=repr(exc))
            os._exit(1)
        os.close(sfd)
        _run_program(code, cfg)
        return
    # The waiter keeps no copy of the program's pipes, so EOF on them means the program
    # (and everything in its namespace) is gone.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _, st, ru = os.wait4(pid, 0)
    _status(
        sfd,
        phase="exit",
        code=os.WEXITSTATUS(st) if os.WIFEXITED(st) else None,
        signal=os.WTERMSIG(st) if os.WIFSIGNALED(st) else None,
        cpu_seconds=ru.ru_utime + ru.ru_stime,
        maxrss_kb=ru.ru_maxrss,
    )
    os._exit(0)


def _run_program(code, cfg):
    import builtins

    sys.argv = ["solution.py"]
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__file__": "solution.py"}
    if cfg["mode"] == "stdio":
        exec(code, namespace)
        return
    # Function-call mode: the program's own prints are discarded, the return value is
    # written as JSON to the original stdout. Expected outputs never enter the sandbox.
    result_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    sys.stdout.flush()
    os.dup2(devnull, 1)
    exec(code, namespace)
    fn_name = cfg["fn_name"]
    if fn_name in namespace and callable(namespace[fn_name]):
        fn = namespace[fn_name]
    elif "Solution" in namespace:
        fn = getattr(namespace["Solution"](), fn_name)
    else:
        raise NameError(f"the program defines neither {fn_name}() nor Solution.{fn_name}()")
    value = fn(*cfg["args"])
    sys.stdout.flush()
    payload = json.dumps(value, default=_jsonable).encode()
    view = memoryview(payload)
    while view:
        view = view[os.write(result_fd, view):]


def _jsonable(obj):
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    raise TypeError(f"return value of type {type(obj).__name__} is not JSON serialisable")


if __name__ == "__main__":
    main()
