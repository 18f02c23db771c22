"""`python -m tests.helpers.console_probe RUN_DIR [--verbose]`: the CLI's console set-up around a real local Ray
and one worker that prints like third-party code does (a library's warning, a plain print), logs our own warning
and a library's error. tests/integration/test_console_ray.py reads what reached the console and the logs."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import ray

from rlvr.config.load import config_from_dict
from rlvr.pipeline.build import start_ray
from rlvr.telemetry import console


class NoisyWorkerForTest:
    def speak(self) -> int:
        import os

        logging.getLogger("vllm.engine.fake").warning("a third-party warning")
        print("a plain third-party print", flush=True)
        logging.getLogger("rlvr.workers.fake").warning("our own warning")
        logging.getLogger("some_library").error("a library error")
        return os.getpid()


def main() -> int:
    run_dir, verbose = Path(sys.argv[1]), "--verbose" in sys.argv
    run_console = console.install(verbose=verbose)
    run_console.attach(run_dir)
    cfg = config_from_dict({"data": {"train_files": ["x.jsonl"]}, "ray": {"num_cpus": 1},
                            "domains": {"d": {"reward": {"worker": "x.Y"}}}})
    start_ray(cfg)
    try:
        actor = ray.remote(NoisyWorkerForTest).options(num_cpus=0).remote()
        pid = ray.get(actor.speak.remote())
        deadline = time.monotonic() + 30  # worker output reaches the driver asynchronously
        log = run_dir / "logs" / "workers" / f"NoisyWorkerForTest-{pid}.log"
        while time.monotonic() < deadline and not (log.exists() and "a library error" in log.read_text()):
            time.sleep(0.2)
        print(f"worker pid {pid}", flush=True)
    finally:
        ray.shutdown()
        console.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
