"""The quiet console: which worker lines and log records reach it, where the rest goes, and what the run prints."""

from __future__ import annotations

import io
import logging
import os
import time
import warnings

import pytest

from rlvr.telemetry.console import (FileFollower, LineFilter, RunConsole, WorkerOutputRouter, progress_postfix,
                                    validation_line)

NOISE = [
    "(MainProcess pid=13864) WARNING 11-24 14:25:18 [arg_utils.py:3005] This model does not officially support ...",
    "(EngineCore pid=14439) WARNING 11-24 14:25:39 [cpu.py:224] Triton is not installed.",
    "/venv/lib/python3.11/site-packages/vllm/triton_utils/dispatcher.py:138: FutureWarning: `reduce_op` is deprecated",
    "  if hasattr(value, \"__dict__\"):",
    "[W1124 14:25:30.589871164 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy",
    "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:01<00:00,  1.09s/it]",
    "WARNING transformers.modeling_utils: Some weights were not initialized",
    "INFO rlvr.workers.actor_train: loaded the model",
    "[2026-11-24 14:25:00,000] [INFO] [config.py:100] DeepSpeed info",
]
ERRORS = [
    "ERROR rlvr.workers.rewards.base: reward call failed",
    "ERROR some.library: the library failed",
    "(EngineCore pid=14439) ERROR 11-24 14:25:39 [core.py:12] EngineCore failed to start.",
    "CRITICAL root: out of options",
    "E1124 14:20:01.123456 1234 core_worker.cc:99] worker died",
    "Fatal Python error: Segmentation fault",
]
OURS = ["WARNING rlvr.pipeline.build: math/train: 3 prompts longer than data.max_prompt_length=64 dropped",
        "WARNING sandbox.server: backend slow"]


def test_quiet_keeps_errors_and_our_warnings_only():
    f = LineFilter(verbose=False)
    assert f.select(NOISE) == []
    assert f.select(ERRORS) == ERRORS
    assert f.select(OURS) == OURS


def test_a_traceback_reaches_the_console_whole_even_across_batches():
    f = LineFilter(verbose=False)
    first = ["some noise", "Traceback (most recent call last):", '  File "x.py", line 1, in <module>']
    second = ["    raise ValueError('bad row 7')", "ValueError: bad row 7", "more noise after it"]
    assert f.select(first) == first[1:]
    assert f.select(second) == second[:2]


def test_verbose_keeps_everything_and_strips_colours():
    assert LineFilter(verbose=True).select(NOISE + ["\x1b[36mcoloured\x1b[0m"]) == NOISE + ["coloured"]


def test_router_writes_each_worker_to_its_file_and_names_it_on_the_console(tmp_path):
    console = io.StringIO()
    router = WorkerOutputRouter(tmp_path, console, verbose=False)
    router({"pid": 123, "actor_name": "RewardActor[math]", "is_err": True, "lines": NOISE[:2] + ERRORS[:1]})
    router({"pid": 77, "task_name": None, "actor_name": "", "is_err": False, "lines": OURS[:1]})
    router({"pid": "raylet", "lines": ["Task was killed due to the node running low on memory."]})
    router.close()
    shown = console.getvalue().splitlines()
    assert shown == [f"(RewardActor[math] pid=123) {ERRORS[0]}", f"(worker pid=77) {OURS[0]}",
                     "(ray raylet) Task was killed due to the node running low on memory."]
    files = {p.name: p.read_text() for p in (tmp_path / "workers").iterdir()}
    assert files["RewardActor_math_-123.log"] == "".join(l + "\n" for l in NOISE[:2] + ERRORS[:1])
    assert files["worker-77.log"] == OURS[0] + "\n"


@pytest.fixture
def run_console(monkeypatch):
    for key in ("WANDB_SILENT", "HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(key, raising=False)
    made = []

    def make(verbose: bool) -> tuple[RunConsole, io.StringIO]:
        stream = io.StringIO()
        c = RunConsole(verbose=verbose, stream=stream)
        c.install()
        made.append(c)
        return c, stream

    yield make
    for c in made:
        c.uninstall()


def test_driver_logs_sorted_between_console_and_driver_log(run_console, tmp_path):
    console, stream = run_console(verbose=False)
    third = logging.getLogger("some_library.module")
    third.warning("third-party warning before the run directory exists")
    logging.getLogger("rlvr.pipeline.x").warning("our warning")
    logging.getLogger("rlvr.pipeline.x").info("our info")
    third.error("third-party error")
    warnings.warn_explicit("a library's deprecation", FutureWarning, "/site-packages/lib/mod.py", 3)
    logs = console.attach(tmp_path / "run")
    third.warning("third-party warning after")
    shown = stream.getvalue()
    assert "WARNING rlvr.pipeline.x: our warning" in shown and "ERROR some_library.module: third-party error" in shown
    assert "third-party warning" not in shown and "our info" not in shown and "deprecation" not in shown
    log = (logs / "driver.log").read_text()
    for text in ("third-party warning before", "third-party warning after", "our info", "a library's deprecation"):
        assert text in log
    assert os.environ["WANDB_SILENT"] == "true"


def test_verbose_shows_third_party_warnings(run_console):
    _, stream = run_console(verbose=True)
    logging.getLogger("some_library.module").warning("visible now")
    assert "WARNING some_library.module: visible now" in stream.getvalue()


def test_a_library_with_its_own_stderr_handler_is_routed_through_ours(run_console):
    lib = logging.getLogger("noisy_library")
    own = logging.StreamHandler(io.StringIO())
    lib.addHandler(own)
    lib.propagate = False
    try:
        _, stream = run_console(verbose=False)
        lib.warning("library warning")
        lib.error("library error")
        assert own not in lib.handlers and lib.propagate
        assert own.stream.getvalue() == ""
        assert "library warning" not in stream.getvalue() and "library error" in stream.getvalue()
    finally:
        lib.handlers.clear()


def test_validation_line_and_progress_postfix():
    metrics = {"val_correct/all/mean": 0.5, "val_correct/math/mean": 0.75, "val_correct/code/mean": 0.25,
               "math/reward/mean": 0.3125, "code/reward/mean": 0.0, "val/math/reward/mean": 1.0,
               "math/reward/latency/mean": 2.0}
    assert validation_line(4, metrics) == "validation @ step 4: val_correct 0.500  (code 0.250, math 0.750)"
    assert progress_postfix(metrics, 0.5) == {"code": "0.000", "math": "0.312", "val": "0.500"}
    assert progress_postfix({}, None) == {}


def test_a_followed_file_shows_its_errors_as_they_are_written(tmp_path):
    log, console = tmp_path / "stderr.log", io.StringIO()
    follower = FileFollower(log, "judge_server pid=9", console, verbose=False, interval_s=0.01)
    follower.start()
    try:
        with open(log, "w") as f:
            f.write(NOISE[0] + "\n" + ERRORS[2][:30])  # an error line written in two parts
            f.flush()
            time.sleep(0.1)
            f.write(ERRORS[2][30:] + "\n")
        for _ in range(200):
            if console.getvalue():
                break
            time.sleep(0.01)
    finally:
        follower.stop()
        follower.join()
    assert console.getvalue() == f"(judge_server pid=9) {ERRORS[2]}\n"


def test_start_up_stages_print_their_seconds_only_on_an_installed_console(capsys):
    from rlvr.telemetry import console

    console.uninstall()
    with console.stage("Ray"):
        pass
    assert capsys.readouterr().out == ""  # programmatic runs (benches, tests) stay quiet
    stream = io.StringIO()
    installed = console.install()
    installed.stream = stream
    try:
        with console.stage("Ray"):
            pass
        console.stage_done("checks", 1.25)
    finally:
        console.uninstall()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("  ready: Ray in 0.") and lines[1] == "  ready: checks in 1.2 s"
    assert validation_line(0, {"val_correct/all/mean": 0.5}, 3.04) == "validation @ step 0: val_correct 0.500  [3.0 s]"
