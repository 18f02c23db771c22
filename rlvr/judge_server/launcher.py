"""Starting and stopping the local judge server as a child process (vLLM when installed, else transformers)."""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from rlvr.lifecycle.guardian import guard_path, guard_process
from rlvr.lifecycle.run_tmpdir import tmpdir_env

logger = logging.getLogger(__name__)

_TAIL_LINES = 30


class JudgeServerError(RuntimeError):
    """The judge server could not be started (it exited, or never became healthy)."""


class JudgeServerHandle:
    """A running judge server. `url` is the OpenAI base URL (`http://127.0.0.1:PORT/v1`): pass it as the
    judge worker's base_url. `stop()` ends the server's whole process group; it is idempotent, and also runs at
    interpreter exit. `restart()` starts it again after it died. Usable as a context manager."""

    def __init__(self, url: str, process: subprocess.Popen | None, backend: str, log_dir: Path, owns_log_dir: bool,
                 cmd: Sequence[str] = (), timeout_s: float = 600.0, env: dict[str, str] | None = None):
        self.url = url
        self.process = process
        self.backend = backend  # "vllm" | "transformers"
        self.log_dir = log_dir  # stdout.log and stderr.log of the server
        self.restarts = 0
        self._owns_log_dir = owns_log_dir
        self._cmd, self._timeout_s, self._env = list(cmd), timeout_s, env
        self._stopped = False
        self._sockets: str | None = None  # the vLLM server's socket files (see _start)
        atexit.register(self.stop)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def restart(self) -> None:
        """Starts the server again (after it died): its old process group is killed first, then the same command
        runs on the same port, or on a new one if that is taken meanwhile (`url` then changes: callers compare).
        Raises JudgeServerError, with the stderr tail, when it does not come back."""
        if self._stopped:
            raise JudgeServerError("restart() of a stopped judge server")
        _kill_group(self.process)
        try:
            self._start(_with_port(self._cmd, self.port), self.url)
        except JudgeServerError as e:
            logger.warning("judge server did not come back on its port (%s); trying a new port", e)
            if self.backend == "transformers":
                self._start(_with_port(self._cmd, 0), None)  # it prints the URL it bound
            else:
                host = _host_of(self._cmd)
                port = _free_port(host)
                self._start(_with_port(self._cmd, port), f"http://{_url_host(host)}:{port}/v1")
        self.restarts += 1

    def _start(self, cmd: list[str], url: str | None) -> None:
        """Runs `cmd` in its own process group and waits until /health answers; `url` None: the server prints it
        on its first stdout line. On failure nothing is left running."""
        env = dict(os.environ if self._env is None else self._env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if self.backend == "vllm":  # vLLM leaves its ZeroMQ socket files behind: in a directory we remove
            env["VLLM_RPC_BASE_PATH"] = self._socket_dir()
            # ... and its engine's torch FileStore (`vllm_dist_*`), which a killed server leaves in the temp dir
            env.update(tmpdir_env(self._socket_dir(), env))
        logger.info("starting the %s judge server: %s (logs in %s)", self.backend, " ".join(cmd), self.log_dir)
        with open(self.log_dir / "stdout.log", "wb") as out, open(self.log_dir / "stderr.log", "ab") as err:
            self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                            start_new_session=True)  # a process group of its own: stop() ends it all
        # ... and if this process is killed before stop() runs, its guardian ends the server and its engine processes
        guard_process(self.process.pid)
        self.url = url or ""
        started = time.monotonic()
        try:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise JudgeServerError(
                        f"the {self.backend} judge server exited with code {code} during start-up "
                        f"(command: {' '.join(cmd)}). Last lines of its stderr:\n{self.stderr_tail()}")
                if not self.url:
                    self.url = _first_line(self.log_dir / "stdout.log") or ""
                if self.url and is_healthy(self.root_url):
                    logger.info("%s judge server ready at %s in %.1fs", self.backend, self.url,
                                time.monotonic() - started)
                    return
                if time.monotonic() - started > self._timeout_s:
                    raise JudgeServerError(
                        f"the {self.backend} judge server was not healthy within {self._timeout_s:.0f}s "
                        f"(command: {' '.join(cmd)}). Last lines of its stderr:\n{self.stderr_tail()}")
                time.sleep(0.25)
        except BaseException:
            _kill_group(self.process)
            raise

    @property
    def root_url(self) -> str:
        """The server's address without the `/v1` suffix (where `/health` lives)."""
        return self.url.removesuffix("/").removesuffix("/v1")

    @property
    def port(self) -> int:
        return int(self.root_url.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _socket_dir(self) -> str:
        if self._sockets is None:
            self._sockets = tempfile.mkdtemp(prefix="rlvr-judge-sockets-")
            guard_path(self._sockets)
        return self._sockets

    def stderr_tail(self, lines: int = _TAIL_LINES) -> str:
        return _tail(self.log_dir / "stderr.log", lines)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to the process group, SIGKILL after `timeout_s`; then removes a temporary log directory."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        if self.process is not None:
            _stop_group(self.process, timeout_s)
        if self._owns_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)

    def __enter__(self) -> "JudgeServerHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else ("running" if self.alive() else "exited")
        pid = self.process.pid if self.process is not None else None
        return f"JudgeServerHandle(url={self.url!r}, backend={self.backend!r}, pid={pid}, {state})"


def vllm_available() -> bool:
    """vLLM is installed (found without importing it: importing vLLM is slow and initialises CUDA)."""
    return importlib.util.find_spec("vllm") is not None


def start_judge_server(
    model_path: str,
    port: int = 0,
    prefer_vllm: bool = True,
    *,
    host: str = "127.0.0.1",
    served_model_name: str = "judge",
    startup_timeout_s: float = 600.0,
    vllm_args: Sequence[str] = (),
    server_args: Sequence[str] = (),
    fallback_to_transformers: bool = True,
    log_dir: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
) -> JudgeServerHandle:
    """Starts an OpenAI-compatible server for `model_path` (a local HF directory) and waits until `/health` says
    it serves. The model is served under the name `served_model_name` ("judge", the worker's default).

    With `prefer_vllm` and vLLM installed: `python -m vllm.entrypoints.openai.api_server` with the defaults of
    `_vllm_defaults()` (CPU: float32, eager, 1 GiB KV cache; GPU: 20% of the device) overridden by `vllm_args`,
    and `--threads N` of `server_args` as its OpenMP threads; if that fails to start and
    `fallback_to_transformers`, a warning is logged and the transformers server (rlvr.judge_server, plus
    `server_args`) is started instead. port 0 picks a free port. Raises JudgeServerError, with the tail of the
    server's stderr, if the server exits during start-up or is not healthy within `startup_timeout_s`.
    Logs go to `log_dir` (a temporary directory removed by stop() when not given).
    """
    model_path = str(model_path)
    if prefer_vllm and vllm_available():
        # vLLM prints no machine-readable address, so the port is chosen here (free now; a race with another
        # process binding it in between shows up as a start-up failure).
        vllm_port = port or _free_port(host)
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
               "--host", host, "--port", str(vllm_port), "--served-model-name", served_model_name,
               *_vllm_defaults(), *vllm_args]  # later flags win: vllm_args override the defaults
        vllm_env = dict(os.environ if env is None else env)
        vllm_env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # no core pinning on a box shared with training
        threads = _flag_value(server_args, "--threads")
        if threads:  # the transformers server's --threads: OpenMP threads of vLLM's CPU worker
            vllm_env["OMP_NUM_THREADS"] = threads
        if "--enforce-eager" in cmd:  # no first-request inductor compile of the sampler (rlvr.backends.vllm_engine)
            vllm_env.setdefault("TORCH_COMPILE_DISABLE", "1")
        if not any(flag in cmd for flag in ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
                                            "--distributed-executor-backend")):
            vllm_env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the model in EngineCore (engine_env)
        try:
            return _launch(cmd, "vllm", f"http://{_url_host(host)}:{vllm_port}/v1", startup_timeout_s, log_dir,
                           vllm_env)
        except JudgeServerError as e:
            if not fallback_to_transformers:
                raise
            logger.warning("vLLM judge server did not start; using the transformers server instead. %s", e)
    cmd = [sys.executable, "-m", "rlvr.judge_server", "--model", model_path, "--host", host, "--port", str(port),
           "--served-model-name", served_model_name, "--exit-with-parent", *server_args]
    return _launch(cmd, "transformers", None, startup_timeout_s, log_dir, env)


def _vllm_defaults() -> list[str]:
    """vLLM server flags that make it answer like the transformers server: on CPU float32 (vLLM's "auto" would take
    the checkpoint's bfloat16, which turns SmolLM2-135M's greedy answers into nonsense), eager mode (inductor
    compilation costs minutes of start-up), an explicit 1 GiB KV cache and a 4096-token context (SmolLM2-135M
    float32: ~46 KB of KV per token). On GPU vLLM's own defaults, with a modest share of the device."""
    import torch

    if torch.cuda.is_available():
        return ["--gpu-memory-utilization", "0.2"]
    return ["--dtype", "float32", "--enforce-eager", "--max-model-len", "4096",
            "--kv-cache-memory-bytes", str(1 << 30)]


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    args = list(args)
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _launch(cmd: list[str], backend: str, url: str | None, timeout_s: float,
            log_dir: str | os.PathLike[str] | None, env: dict[str, str] | None) -> JudgeServerHandle:
    """Runs `cmd` in its own process group; `url` None: read it from the first stdout line."""
    owns = log_dir is None
    logs = Path(tempfile.mkdtemp(prefix=f"rlvr-judge-{backend}-")) if owns else Path(log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "stderr.log").write_bytes(b"")
    handle = JudgeServerHandle(url or "", None, backend, logs, owns, cmd=cmd, timeout_s=timeout_s, env=env)
    if owns:
        guard_path(str(logs))  # removed by the guardian too when this process is killed
    try:
        handle._start(cmd, url)
    except BaseException:  # the error says why (with the stderr tail); no server is left behind
        handle.stop()
        raise
    return handle


def _first_line(path: Path) -> str | None:
    """The first complete stdout line, if it is a URL (the transformers server prints its URL first)."""
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except OSError:
        return None
    if not line.endswith(b"\n"):
        return None
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith(("http://", "https://")):
        raise JudgeServerError(f"the judge server's first stdout line is not its URL: {text[:200]!r}")
    return text


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback never goes via a proxy


def is_healthy(root_url: str) -> bool:
    """GET {root_url}/health answers 200 (loopback: no proxy); also the chaos harness's test of a restarted server."""
    try:
        with _NO_PROXY.open(f"{root_url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):  # HTTPError (503 while loading) is a URLError
        return False


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _with_port(cmd: list[str], port: int) -> list[str]:
    out = list(cmd)
    i = out.index("--port")
    out[i + 1] = str(port)
    return out


def _host_of(cmd: list[str]) -> str:
    return cmd[cmd.index("--host") + 1]


def _kill_group(process: subprocess.Popen | None) -> None:
    """SIGKILL to the process group of `process` (whose leader may be dead already: its children are not)."""
    if process is None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        logger.warning("judge server (pid %d) still there 10 s after SIGKILL", process.pid)


def _stop_group(process: subprocess.Popen, timeout_s: float) -> None:
    if process.poll() is not None:
        _kill_group(process)  # the leader is gone; children it may have left (vLLM's engine) go too
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        logger.warning("judge server (pid %d) ignored SIGTERM for %.0fs: killing it", process.pid, timeout_s)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    else:
        # The leader is gone; children it may have left (vLLM's engine processes) go too.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _tail(path: Path, lines: int) -> str:
    try:
        data = path.read_bytes()[-64 * 1024:]
    except OSError:
        return "(no stderr log)"
    text = data.decode("utf-8", "replace").rstrip()
    return "\n".join(text.splitlines()[-lines:]) or "(stderr was empty)"
