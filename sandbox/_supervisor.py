"""The in-sandbox supervisor: runs as the sandbox's first process (inside bubblewrap), never on the host.

It reads its instructions from an inherited file descriptor (closed before any untrusted code runs), writes the
program's files into the working directory, compiles C/C++ when asked, runs the program under rlimits, and
reports what happened as JSON lines on a second inherited descriptor (a pipe to the host), which the program
never inherits. It also watches the memory of every process in the sandbox (summed PSS) and the wall clock, and
kills them all (`kill(-1)`, which inside the pid namespace reaches only the sandbox) when a limit is crossed.

The supervisor makes itself non-dumpable, so the program (same uid) cannot open /proc/<supervisor>/fd/* or
ptrace it to forge a report. The program can still kill it (same uid): that ends the whole sandbox (bubblewrap's
init exits with its child and the kernel kills the pid namespace), and the host reports a runtime_error.

Only the standard library, Python >= 3.8 (it runs under the sandbox's interpreter, not the host's).
"""

import json
import os
import resource
import select
import signal
import sys
import time

WORKDIR = "/tmp"
MB = 1024 * 1024
STDERR_REPORT_MARK = "@@sandbox-supervisor"


def main():
    """Arguments: --bundle-fd N (instructions, JSON) or --bundle-stdin; --report-fd N (a pipe to the host) or
    none, in which case report lines go to stderr behind the bundle's "report_nonce" (the Docker backend);
    optionally --run-uid U --run-gid G to run compiler and program as another uid (supervisor started as root)."""
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    _make_undumpable()
    if "--bundle-fd" in args:
        with os.fdopen(int(args["--bundle-fd"]), "rb") as f:
            bundle = json.loads(f.read().decode())
    else:
        bundle = json.loads(sys.stdin.buffer.read().decode())
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
    if "--report-fd" in args:
        report_fd = int(args["--report-fd"])
        os.set_inheritable(report_fd, False)
        prefix = b""
    else:
        report_fd = 2
        prefix = ("\n%s %s " % (STDERR_REPORT_MARK, bundle["report_nonce"])).encode()
    run_as = None
    if "--run-uid" in args:
        run_as = (int(args["--run-uid"]), int(args.get("--run-gid", args["--run-uid"])))

    def report(event, **data):
        data["event"] = event
        os.write(report_fd, prefix + (json.dumps(data) + "\n").encode())

    report("started")
    limits = bundle["limits"]
    language = bundle["language"]

    os.chdir(WORKDIR)
    entry = {"python": "main.py", "c": "main.c", "cpp": "main.cpp"}[language]
    _write(entry, bundle["code"], run_as)
    for name, text in bundle["files"].items():
        _write(name, text, run_as)
    stdin_fd = _unlinked_file(bundle["stdin"])

    if language == "python":
        argv = [bundle["python"], "-E", "-s", "-B", entry]
    else:
        compiler = bundle["compile"]
        if not os.access(compiler["argv"][0], os.X_OK):  # the host's fault, not the program's
            report("exit", returncode=None, signal=None, cpu_s=0.0, wall_s=0.0, killed=None,
                   error="no compiler at %s inside the sandbox" % compiler["argv"][0])
            return
        ok, info = _compile(compiler["argv"], compiler, run_as)
        report("compiled", ok=ok, **info)
        if not ok:
            return
        argv = ["./prog"]

    rlimits = _program_rlimits(limits)
    start = time.monotonic()
    try:
        proc_pid = _spawn(argv, stdin_fd, rlimits, run_as)
    except OSError as e:
        report("exit", returncode=None, signal=None, cpu_s=0.0, wall_s=0.0, killed=None, error=str(e))
        return
    os.close(stdin_fd)
    _PROGRAM.append(proc_pid)
    report("running")
    status, rusage, killed = _watch(proc_pid, start, limits)
    wall = time.monotonic() - start
    returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    _kill_everything()  # background processes the program left behind
    report(
        "exit",
        returncode=returncode,
        signal=sig,
        cpu_s=rusage.ru_utime + rusage.ru_stime,
        maxrss_kb=rusage.ru_maxrss,
        wall_s=wall,
        killed=killed,
    )


def _make_undumpable():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:
        pass  # best effort: without it a same-uid program could forge this process's report


def _write(name, text, run_as=None):
    path = os.path.join(WORKDIR, name)
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory)
        if run_as:
            os.chown(directory, *run_as)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    if run_as:
        os.chown(path, *run_as)


def _become(run_as):
    if run_as:
        os.setgroups([])
        os.setgid(run_as[1])
        os.setuid(run_as[0])


def _unlinked_file(text):
    path = os.path.join(WORKDIR, ".stdin-%d" % os.getpid())
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    fd = os.open(path, os.O_RDONLY)
    os.unlink(path)
    return fd


def _set_rlimits(rlimits):
    for which, soft, hard in rlimits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            # Cannot raise above what the host set (only lower): keep the stricter one already in place.
            current_soft, current_hard = resource.getrlimit(which)
            capped = lambda v: v if current_hard == resource.RLIM_INFINITY else min(v, current_hard)
            resource.setrlimit(which, (capped(soft), capped(hard)))


def _program_rlimits(limits):
    cpu = max(1, int(-(-limits["cpu_time_s"] // 1)))  # whole seconds, rounded up
    memory = int(limits["memory_mb"] * MB)
    return [
        # SIGXCPU at the limit, SIGKILL a second later if the program ignores it.
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_STACK, min(memory // 2, 256 * MB), min(memory // 2, 256 * MB)),
        (resource.RLIMIT_NOFILE, 256, 256),
        (resource.RLIMIT_CORE, 0, 0),
    ]


def _spawn(argv, stdin_fd, rlimits, run_as=None):
    """fork + exec with rlimits set in the child; raises OSError when exec fails."""
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only async-signal-safe-ish work, then exec
        try:
            os.close(err_r)
            os.dup2(stdin_fd, 0)
            _set_rlimits(rlimits)
            _become(run_as)
            os.set_inheritable(err_w, False)
            # Close every descriptor above stderr except the exec-error pipe (which is close-on-exec).
            os.closerange(3, err_w)
            os.closerange(err_w + 1, 65536)
            os.execv(argv[0], argv)
        except BaseException as e:  # noqa: BLE001 - report anything to the parent
            try:
                os.write(err_w, ("%s: %s" % (type(e).__name__, e)).encode()[:1000])
            finally:
                os._exit(127)
    os.close(err_w)
    with os.fdopen(err_r, "rb") as f:
        error = f.read()
    if error:
        os.waitpid(pid, 0)
        raise OSError(error.decode(errors="replace"))
    return pid


def _watch(pid, start, limits):
    """Waits for `pid`, enforcing the summed memory of all sandbox processes and the wall clock.
    Returns (wait status, rusage, what the supervisor killed it for or None)."""
    memory_limit = limits["memory_mb"] * MB
    deadline = start + limits["wall_time_s"]
    killed = None
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    while True:
        done, status, rusage = os.wait4(pid, os.WNOHANG)
        if done:
            if pidfd is not None:
                os.close(pidfd)
            return status, rusage, killed
        if killed is None:
            if time.monotonic() >= deadline:
                killed = "wall"
                _kill_everything()
            elif _sandbox_memory() > memory_limit:
                killed = "memory"
                _kill_everything()
        if pidfd is not None:
            select.select([pidfd], [], [], 0.1)
        else:
            time.sleep(0.05)


def _sandbox_memory():
    """Summed proportional set size (bytes) of every process in the sandbox but this one and bubblewrap's init."""
    total = 0
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (1, me):
            continue
        total += _pss(entry)
    return total


def _pss(pid):
    try:
        with open("/proc/%s/smaps_rollup" % pid, "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:  # older kernels: resident minus shared pages
        with open("/proc/%s/statm" % pid, "rb") as f:
            parts = f.read().split()
        return (int(parts[1]) - int(parts[2])) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def _in_own_pid_namespace():
    """True when pid 1 is a sandbox's init (bubblewrap's, or Docker's `init=True` reaper): only then may
    kill(-1) be used. Run by mistake on a host, kill(-1) as root would take the whole machine down."""
    try:
        with open("/proc/1/comm") as f:
            return f.read().strip() in ("bwrap", "docker-init", "tini", "dumb-init")
    except OSError:
        return False


_SANDBOXED = _in_own_pid_namespace()
_PROGRAM = []  # the program's pid once started: all that may be killed outside a sandbox


def _kill_everything():
    """SIGKILL to every process of the sandbox except this one (and the namespace's init, which kill(-1) skips)."""
    try:
        if _SANDBOXED:
            os.kill(-1, signal.SIGKILL)
        elif _PROGRAM:
            os.kill(_PROGRAM[0], signal.SIGKILL)
    except OSError:
        pass


def _compile(argv, compiler, run_as=None):
    """Runs the compiler under its own (roomier) limits; returns (ok, info)."""
    log_path = os.path.join(WORKDIR, ".compile.log")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    memory = int(compiler["memory_mb"] * MB)
    cpu = int(compiler["cpu_s"])
    rlimits = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    devnull = os.open(os.devnull, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(devnull, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            _set_rlimits(rlimits)
            _become(run_as)
            os.closerange(3, 65536)
            os.execv(argv[0], argv)
        except BaseException as e:  # noqa: BLE001
            os.write(2, ("cannot run the compiler: %s\n" % e).encode())
        finally:
            os._exit(127)
    os.close(log_fd)
    os.close(devnull)
    deadline = time.monotonic() + compiler["wall_s"]
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.02)
    with open(log_path, "rb") as f:
        output = f.read(65536).decode(errors="replace")
    os.unlink(log_path)
    ok = not timed_out and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    if timed_out:
        output += "\ncompilation timed out after %ss" % compiler["wall_s"]
    elif os.WIFSIGNALED(status):
        output += "\ncompiler killed by signal %d (limits: %s MB, %s s CPU)" % (
            os.WTERMSIG(status), compiler["memory_mb"], compiler["cpu_s"])
    return ok, {"output": output, "timed_out": timed_out}


if __name__ == "__main__":
    main()
