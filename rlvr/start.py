"""CLI entry: `python -m rlvr.start --config configs/math.yaml [key=value ...]`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from rlvr.config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.start", description=__doc__)
    parser.add_argument("--config", required=True, help="YAML config, e.g. configs/math.yaml")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. run.max_steps=2")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline  # heavy imports only once the config is valid

    # A supervisor's SIGTERM ends the run as Ctrl-C does: the pipeline closes everything it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        pipeline = RLVRPipeline(cfg)
        try:
            run_dir = pipeline.run()
        finally:
            pipeline.close()
    except KeyboardInterrupt:
        print("interrupted: the run and everything it started are stopped", file=sys.stderr)
        return 130
    print(f"run directory: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
