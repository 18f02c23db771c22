"""A small pool of worker processes whose calls can be killed on a hard deadline.

Why it exists: math-verify (and anything else built on `signal.alarm`) can only time itself out in the main
thread of a process, and a reward worker lives in a thread of a Ray actor. Here each call runs in the main
thread of a worker process, where such timeouts work; and when even those do not fire (a hang inside C code),
the worker is killed and replaced, so the caller always gets an answer by its deadline.

Workers are started with "forkserver", never "fork": forking a process that runs threads (a Ray actor does)
can copy a lock held by another thread and deadlock the child. As with any forkserver pool, the forkserver
imports the main module, so a script that makes a pool needs the `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.util
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

from rlvr.lifecycle.guardian import guard_path_if_killed

WORKER_NAME = "rlvr-pool-worker"  # its multiprocessing name: tells a pool's workers from other children (vLLM's)


class RewardTimeoutError(TimeoutError):
    """The call missed its deadline; its worker was killed and replaced."""


class RemoteCallError(RuntimeError):
    """The call failed in the worker: `remote_type` is the exception type raised there, or "WorkerDied" /
    "WorkerStartFailed" when the process itself went away."""

    def __init__(self, remote_type: str, message: str, remote_traceback: str = "") -> None:
        super().__init__(f"{remote_type}: {message}")
        self.remote_type = remote_type
        self.message = message
        self.remote_traceback = remote_traceback


class KillableProcessPool:
    """`size` worker processes; `await pool.run(fn, *args, timeout_s=...)` runs a module-level `fn` in a free
    one (callers queue, first come first served). Use it from one event loop at a time.

    `initializer` runs once in each new worker (imports, warm-up) before it takes calls; that time is not
    charged to any call's deadline but is bounded by `start_timeout_s`.
    """

    def __init__(
        self, size: int, initializer: Callable[[], Any] | None = None, start_timeout_s: float = 120.0
    ) -> None:
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        context = multiprocessing.get_context("forkserver")
        # The forkserver's socket file lives in this process's multiprocessing temp dir, which Python removes only
        # at a clean exit; a Ray actor ends by being killed, and then the guardian removes it.
        guard_path_if_killed(multiprocessing.util.get_temp_dir())
        self._workers = [_Worker(context, initializer) for _ in range(size)]
        self._start_timeout_s = start_timeout_s
        self._idle: asyncio.Queue[_Worker] | None = None
        self._idle_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
        """fn(*args) in a worker. Raises RewardTimeoutError past `timeout_s` (counted from when a worker took
        the call), RemoteCallError if fn raised or the worker died; pickling errors of fn/args as they are."""
        if self._closed:
            raise RuntimeError("KillableProcessPool is closed")
        payload = ForkingPickler.dumps((fn, args))  # before taking a worker: a bad argument harms no one
        idle = self._idle_queue()
        worker = await idle.get()
        worker.busy = True
        try:
            return await self._call(worker, fn, payload, timeout_s)
        finally:
            worker.busy = False
            idle.put_nowait(worker)

    def close(self) -> None:
        """Kills every worker; calls in flight raise RemoteCallError, later ones RuntimeError."""
        self._closed = True
        for worker in self._workers:
            if worker.busy:
                # Its caller is waiting on the pipe: closing the pipe under it would leave it waiting for an
                # event that never comes. Killing the process wakes it with EOF; it cleans up itself.
                worker.proc.kill()
            else:
                worker.stop()

    def _idle_queue(self) -> asyncio.Queue[_Worker]:
        # An asyncio.Queue belongs to one loop; a new loop (e.g. a second asyncio.run) gets a fresh queue.
        loop = asyncio.get_running_loop()
        if self._idle_loop is not loop:
            self._idle = asyncio.Queue()
            for worker in self._workers:
                self._idle.put_nowait(worker)
            self._idle_loop = loop
        return self._idle

    async def _call(self, worker: _Worker, fn: Callable[..., Any], payload: memoryview, timeout_s: float) -> Any:
        if self._closed:  # closed while this caller waited for a worker
            raise RuntimeError("KillableProcessPool is closed")
        if not worker.proc.is_alive():  # died while idle (OOM killer, a stray signal): replace it quietly
            self._replace(worker)
        if not worker.ready:
            await self._wait_ready(worker)
        try:
            worker.conn.send_bytes(payload)
            reply = await _recv(worker.conn, timeout_s)
        except TimeoutError:
            self._replace(worker)
            raise RewardTimeoutError(f"{_name(fn)} took longer than {timeout_s}s; its worker was killed") from None
        except (EOFError, OSError):  # broken pipe on send or end of file on receive: the process is gone
            exitcode = self._replace(worker)
            raise RemoteCallError("WorkerDied", f"worker died in {_name(fn)} (exit code {exitcode})") from None
        except BaseException:
            # Cancelled: the worker is still busy with a call whose answer nobody will read.
            self._replace(worker)
            raise
        if reply[0] == "ok":
            return reply[1]
        _, remote_type, message, remote_traceback = reply
        raise RemoteCallError(remote_type, message, remote_traceback)

    async def _wait_ready(self, worker: _Worker) -> None:
        try:
            reply = await _recv(worker.conn, self._start_timeout_s)
        except (TimeoutError, EOFError, OSError) as e:
            self._replace(worker)
            raise RemoteCallError("WorkerStartFailed", f"worker did not start ({type(e).__name__})") from None
        if reply[0] != "ready":
            self._replace(worker)
            _, remote_type, message, remote_traceback = reply
            raise RemoteCallError(remote_type, f"initializer failed: {message}", remote_traceback)
        worker.ready = True

    def _replace(self, worker: _Worker) -> int | None:
        """Kills the worker's process and, unless the pool is closing, starts a fresh one in its place."""
        exitcode = worker.stop()
        if not self._closed:
            worker.start()
        return exitcode


class _Worker:
    """One process and the parent's end of its pipe; stop() then start() replaces the process in place."""

    def __init__(self, context: Any, initializer: Callable[[], Any] | None) -> None:
        self._context = context
        self._initializer = initializer
        self.busy = False  # a run() holds it
        self.start()

    def start(self) -> None:
        self.conn, child_conn = self._context.Pipe()
        self.proc = self._context.Process(target=_worker_main, args=(child_conn, self._initializer), daemon=True,
                                          name=WORKER_NAME)
        self.proc.start()
        child_conn.close()  # only the child holds its end now, so our end reads EOF the moment it dies
        self.ready = False  # until its "ready" message (sent after the initializer) has been read

    def stop(self) -> int | None:
        """Kills the process and returns its exit code (negative: killed by that signal)."""
        self.proc.kill()
        self.proc.join(timeout=5.0)
        self.conn.close()
        return self.proc.exitcode


async def _recv(conn: Connection, timeout_s: float) -> Any:
    """The next message, waiting without blocking the event loop; EOFError if the other end died."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()
    loop.add_reader(conn.fileno(), lambda: readable.done() or readable.set_result(None))
    try:
        await asyncio.wait_for(readable, timeout_s)
    finally:
        loop.remove_reader(conn.fileno())
    return conn.recv()


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", repr(fn))


def _worker_main(conn: Connection, initializer: Callable[[], Any] | None) -> None:
    """The loop of a worker process: one (fn, args) in, one reply out, until the owner goes away."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the owner, which then kills the pool
    try:
        if initializer is not None:
            initializer()
    except BaseException as e:
        conn.send(("init_error", type(e).__name__, str(e), traceback.format_exc()))
        return
    conn.send(("ready",))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return  # the owner closed the pipe or died
        try:
            reply = ("ok", fn(*args))
        except BaseException as e:  # also BaseException-derived timeouts such as math-verify's
            reply = ("error", type(e).__name__, str(e), traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as e:  # the result does not pickle; send() pickles before writing, so the pipe is intact
            conn.send(("error", type(e).__name__, f"result could not be sent back: {e}", ""))


def _die_with_parent() -> None:
    """A worker stuck in C code never reads its pipe's EOF; on Linux, have the kernel kill it when its parent
    (the forkserver, which exits with the owner) dies, so that no orphan keeps burning a core."""
    if not sys.platform.startswith("linux"):
        return
    # The forkserver lives until every holder of its "alive" pipe is gone, and it hands each child a copy (so
    # that children could start processes through it too). A busy worker holding one would keep its parent,
    # and so itself, alive after the owner died. Workers start nothing: let go of it.
    server = multiprocessing.forkserver._forkserver
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        os.close(alive_fd)
        server._forkserver_alive_fd = None
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
