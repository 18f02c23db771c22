"""The run's console: a header, one progress bar, one line per validation, our own warnings and every error.

Everything else (third-party logging, Python warnings, the stdout/stderr of Ray workers and of the engine
processes they start) goes to `<run>/logs/`: `driver.log` for this process, `workers/<worker>-<pid>.log` per
Ray worker, `judge_server/` for the local judge server. `--verbose` shows all of it on the console as well.

Errors are never hidden: an ERROR/CRITICAL record from any logger, a Python traceback or a fatal native log line
printed by any worker reaches the console at once, prefixed with the worker that printed it.

`install()` is called by the CLI (rlvr/cli/start.py), which hands it the run header's lines (rlvr/cli/describe.py:
the console sits below the pipeline, which writes to it, and so cannot import the CLI's modules). A pipeline built
without it (tests, notebooks) keeps Ray's and Python's default output.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from tqdm import tqdm

# Workers log in this format (worker_process_setup_hook below), so that the driver can tell a record's level and
# logger apart from the raw output of third-party code in the same stream.
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
OUR_PACKAGES = ("rlvr", "sandbox")
_PKG_DIRS = tuple(str(Path(__file__).resolve().parents[1] / p) + os.sep for p in OUR_PACKAGES)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = r"(?:\([\w.:\- ]+ pid=\d+\)\s*)?"  # vLLM tags its processes' lines, e.g. "(EngineCore pid=12) "
_ERROR_LINE = re.compile(
    rf"^{_PREFIX}(?:ERROR|CRITICAL|FATAL)\b"  # Python logging (ours, vLLM's), any logger
    r"|^\[?[EF]\d{4} \d\d:\d\d:\d\d"  # glog / c10 native error and fatal lines (E1124 14:20:01 ...)
    r"|^\*\*\* SIGSEGV|^Fatal Python error"
)
OUR_WARNING_LINE = re.compile(rf"^{_PREFIX}WARNING (?:{'|'.join(OUR_PACKAGES)})(?:\.[\w.]+)?: ")
_TRACEBACK_START = "Traceback (most recent call last):"


def is_ours(logger_name: str) -> bool:
    return logger_name.split(".", 1)[0] in OUR_PACKAGES


# ---------------------------------------------------------------------------------------- worker output lines


@dataclass
class LineFilter:
    """Which lines of one worker's output reach the console: errors and tracebacks always, our own warnings
    (quiet), everything (verbose). A traceback may span several batches of lines: the state is kept here."""

    verbose: bool = False
    in_traceback: bool = False

    def select(self, lines: list[str]) -> list[str]:
        out = []
        for raw in lines:
            line = _ANSI.sub("", raw)
            if self._keep(line):
                out.append(line)
        return out

    def _keep(self, line: str) -> bool:
        if self.in_traceback:
            # inside a traceback every line is indented until the exception line ("ValueError: ...")
            if line and not line[0].isspace():
                self.in_traceback = False
            return True
        if line.strip() == _TRACEBACK_START or line.endswith(_TRACEBACK_START):
            self.in_traceback = True
            return True
        return self.verbose or bool(_ERROR_LINE.search(line) or OUR_WARNING_LINE.search(line))


def worker_label(data: dict) -> str:
    """'ActorTrainWorker pid=123' from one of Ray's log batches (the actor's repr when it defines one)."""
    if data.get("pid") in ("raylet", "autoscaler"):
        return f"ray {data['pid']}"
    name = data.get("actor_name") or data.get("task_name") or "worker"
    return f"{name} pid={data.get('pid')}"


def _file_stem(data: dict) -> str:
    name = "ray" if data.get("pid") in ("raylet", "autoscaler") else (
        data.get("actor_name") or data.get("task_name") or "worker")
    return re.sub(r"[^\w.\-]+", "_", f"{name}-{data.get('pid')}").strip("_")


class WorkerOutputRouter:
    """Replaces Ray's printer of worker output (the `ray_print_logs` handler of its stream dispatcher): each
    worker's lines go to `<logs>/workers/<worker>-<pid>.log`, and the selected ones to the console, prefixed
    with the worker."""

    def __init__(self, logs_dir: Path | None, console: TextIO, verbose: bool):
        self.dir = logs_dir / "workers" if logs_dir else None
        self.console, self.verbose = console, verbose
        self.filters: dict[str, LineFilter] = {}
        self.files: dict[str, TextIO] = {}
        self.last_line_at = time.monotonic()

    def __call__(self, data: dict) -> None:
        lines = [l for l in data.get("lines", []) if "__ray_tqdm_magic_token__" not in l]
        if not lines:
            return
        self.last_line_at = time.monotonic()
        stem = _file_stem(data)
        if self.dir is not None:
            if stem not in self.files:
                self.dir.mkdir(parents=True, exist_ok=True)
                self.files[stem] = open(self.dir / f"{stem}.log", "a", buffering=1)
            self.files[stem].write("".join(_ANSI.sub("", l) + "\n" for l in lines))
        if data.get("pid") in ("raylet", "autoscaler"):  # Ray's own notices: OOM kills, node failures
            shown = [l for l in lines if self.verbose or re.search(r"(?i)error|killed|out of memory|\boom\b", l)]
        else:
            shown = self.filters.setdefault(stem, LineFilter(self.verbose)).select(lines)
        label = worker_label(data)
        for line in shown:
            tqdm.write(f"({label}) {line}", file=self.console)

    def wait_quiet(self, min_s: float, quiet_s: float, max_s: float) -> None:
        """Ray ships worker output to the driver a moment after it is written (its log monitor polls the files):
        before the workers are killed, wait until no line has arrived for `quiet_s`, so that the traceback of a
        worker that just raised is in its log, not lost with the cluster. At least `min_s`: under load the monitor
        lags, and lines written a moment ago may not have started arriving yet."""
        start = time.monotonic()
        while time.monotonic() - start < max_s and (time.monotonic() - start < min_s
                                                     or time.monotonic() - self.last_line_at < quiet_s):
            time.sleep(0.05)

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()


class FileFollower(threading.Thread):
    """The output of a process the driver started into a file (the judge server's stderr.log): its errors (and, with
    --verbose, every line) reach the console as they are written, named."""

    def __init__(self, path: Path, label: str, console: TextIO, verbose: bool, interval_s: float = 0.5):
        super().__init__(name=f"rlvr-follow-{label}", daemon=True)
        self.path, self.label, self.console, self.interval_s = Path(path), label, console, interval_s
        self.filter = LineFilter(verbose)
        self.stopped = threading.Event()

    def run(self) -> None:
        offset, partial = 0, ""
        while not self.stopped.wait(self.interval_s):
            try:
                with open(self.path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except OSError:
                continue
            offset += len(chunk)
            *lines, partial = (partial + chunk.decode("utf-8", "replace")).split("\n")
            for line in self.filter.select(lines):
                tqdm.write(f"({self.label}) {line}", file=self.console)

    def stop(self) -> None:
        self.stopped.set()


# ---------------------------------------------------------------------------------------- this process


class _ConsoleFilter(logging.Filter):
    def __init__(self, verbose: bool):
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if self.verbose or record.levelno >= logging.ERROR:
            return True
        if record.levelno < logging.WARNING:
            return False
        if record.name == "py.warnings":  # warnings.warn: ours when raised from our packages' code
            return any(d in str(record.args[0] if record.args else record.msg) for d in _PKG_DIRS)
        return is_ours(record.name)


class _TqdmHandler(logging.StreamHandler):
    """Writes above the progress bar instead of through it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # logging must never take the run down
            self.handleError(record)


class _Buffer(logging.Handler):
    """Holds the records logged before the run directory exists; they are written to driver.log once it does."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < 10_000:
            self.records.append(record)


@dataclass
class RunConsole:
    verbose: bool = False
    # The header printed once the run directory exists: header(cfg, run_dir) -> lines (the CLI's run header).
    header: Callable[[Any, Path], list[str]] | None = None
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    logs_dir: Path | None = None
    router: WorkerOutputRouter | None = None
    _handlers: list[logging.Handler] = field(default_factory=list)
    _buffer: _Buffer | None = None
    _followers: list[FileFollower] = field(default_factory=list)

    def install(self) -> None:
        if not self.verbose:
            # Progress bars of data loading and downloads, and W&B's banner, would interleave with ours.
            for key in ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"):
                os.environ.setdefault(key, "1")
            os.environ.setdefault("WANDB_SILENT", "true")
            if "datasets" in sys.modules:  # imported already (a program calling the CLI's main): it read the env then
                sys.modules["datasets"].disable_progress_bars()
        root = logging.getLogger()
        root.setLevel(logging.INFO)
        console = _TqdmHandler(self.stream)
        console.setFormatter(logging.Formatter(LOG_FORMAT))
        console.addFilter(_ConsoleFilter(self.verbose))
        self._buffer = _Buffer()
        self._handlers = [console, self._buffer]
        for h in self._handlers:
            h._rlvr = True  # type: ignore[attr-defined]
            root.addHandler(h)
        logging.captureWarnings(True)
        warnings.simplefilter("default")  # each distinct warning once, to the log
        adopt_library_loggers()

    def attach(self, run_dir: Path) -> Path:
        """Starts `<run>/logs/driver.log` with everything logged so far."""
        self.logs_dir = Path(run_dir) / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.logs_dir / "driver.log")
        handler.setFormatter(logging.Formatter("%(asctime)s " + LOG_FORMAT))
        handler.setLevel(logging.INFO)
        handler._rlvr = True  # type: ignore[attr-defined]
        root = logging.getLogger()
        if self._buffer is not None:
            for record in self._buffer.records:
                handler.handle(record)
            root.removeHandler(self._buffer)
            self._handlers.remove(self._buffer)
            self._buffer = None
        root.addHandler(handler)
        self._handlers.append(handler)
        adopt_library_loggers()  # libraries imported since install() brought their own stderr handlers
        return self.logs_dir

    def route_ray_output(self) -> None:
        """Once Ray is initialised with log_to_driver: worker output through our router instead of Ray's printer."""
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

        adopt_library_loggers()
        self.router = WorkerOutputRouter(self.logs_dir, self.stream, self.verbose)
        dispatcher.remove_handler("ray_print_logs")
        dispatcher.add_handler("rlvr_worker_output", self.router)

    def follow(self, path: Path, label: str) -> FileFollower:
        follower = FileFollower(path, label, self.stream, self.verbose)
        follower.start()
        self._followers.append(follower)
        return follower

    def uninstall(self) -> None:
        for follower in self._followers:
            follower.stop()
        self._followers.clear()
        root = logging.getLogger()
        for h in self._handlers:
            root.removeHandler(h)
            h.close()
        self._handlers.clear()
        if self.router is not None:
            try:
                from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

                dispatcher.remove_handler("rlvr_worker_output")
            except ImportError:
                pass
            self.router.close()
        logging.captureWarnings(False)


def adopt_library_loggers() -> None:
    """Libraries that print through a stderr handler of their own (transformers, datasets, Ray, vLLM, DeepSpeed)
    send their records through the root logger instead, where our handlers decide (file, or console)."""
    for logger in list(logging.root.manager.loggerDict.values()):
        if not isinstance(logger, logging.Logger) or is_ours(logger.name):
            continue
        streams = [h for h in logger.handlers if isinstance(h, logging.StreamHandler)
                   and not isinstance(h, logging.FileHandler) and not getattr(h, "_rlvr", False)]
        if streams:
            for h in streams:
                logger.removeHandler(h)
            logger.propagate = True


def setup_worker_logging() -> None:
    """Ray's worker_process_setup_hook: records in LOG_FORMAT (the driver's router reads level and logger from
    it), warnings through logging. Runs once in every worker process of the job. Our loggers at INFO, the rest at
    WARNING: an HTTP client's line per request would fill the worker's log."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    for name in OUR_PACKAGES:
        logging.getLogger(name).setLevel(logging.INFO)
    logging.captureWarnings(True)
    adopt_library_loggers()


_active: RunConsole | None = None


def install(verbose: bool = False, header: Callable[[Any, Path], list[str]] | None = None) -> RunConsole:
    global _active
    if _active is not None:
        _active.uninstall()
    _active = RunConsole(verbose=verbose, header=header)
    _active.install()
    return _active


def active() -> RunConsole | None:
    return _active


def drain_worker_output(min_s: float = 2.0, quiet_s: float = 1.0, max_s: float = 10.0) -> None:
    """Before the run's workers are killed: their last lines (an error's traceback) reach their logs first."""
    if _active is not None and _active.router is not None:
        _active.router.wait_quiet(min_s, quiet_s, max_s)


def uninstall() -> None:
    global _active
    if _active is not None:
        _active.uninstall()
        _active = None


# ---------------------------------------------------------------------------------------- what the run prints


def start_run(cfg, run_dir: Path) -> None:
    """The run directory exists: logs go under it, and the header is printed (CLI runs only)."""
    if _active is None:
        return
    _active.attach(run_dir)
    say("rlvr run " + Path(run_dir).name)
    for line in _active.header(cfg, run_dir) if _active.header else []:
        say("  " + line)


def say(text: str) -> None:
    """A line for the person at the console (above the progress bar)."""
    stream = _active.stream if _active else sys.stdout
    tqdm.write(text, file=stream)


def validation_line(step: int, metrics: dict[str, float], seconds: float | None = None) -> str:
    per_domain = sorted((k.split("/")[1], v) for k, v in metrics.items()
                        if k.startswith("val_correct/") and k.endswith("/mean") and k.split("/")[1] != "all")
    overall = metrics.get("val_correct/all/mean")
    head = f"validation @ step {step}: val_correct " + (f"{overall:.3f}" if overall is not None else "n/a")
    tail = f"  [{seconds:.1f} s]" if seconds is not None else ""
    return head + ("  (" + ", ".join(f"{d} {v:.3f}" for d, v in per_domain) + ")" if per_domain else "") + tail


@contextmanager
def stage(what: str) -> Iterator[None]:
    """One stage of start-up (Ray, a server, the workers and their engines): a line with its seconds once it is
    done, so the minute before the first step is not silent (CLI runs only; programmatic runs print nothing)."""
    start = time.perf_counter()
    yield
    stage_done(what, time.perf_counter() - start)


def stage_done(what: str, seconds: float) -> None:
    if _active is not None:
        say(f"  ready: {what} in {seconds:.1f} s")


def progress_postfix(metrics: dict[str, float], last_val: float | None) -> dict[str, str]:
    """The bar's postfix: each domain's training reward this step, and the latest val_correct."""
    out = {k.split("/")[0]: f"{v:.3f}" for k, v in sorted(metrics.items())
           if k.endswith("/reward/mean") and k.count("/") == 2 and not k.startswith("val")}
    if last_val is not None:
        out["val"] = f"{last_val:.3f}"
    return out
