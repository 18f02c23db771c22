"""The CLI behind `python -m rlvr.start --config configs/math.yaml [key=value ...]` (rlvr/start.py)."""

from __future__ import annotations

import argparse
import signal
import sys
import traceback

from rlvr.config.base import ConfigError
from rlvr.config.load import key_origin, load_config, overrides_by_key


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlvr.start", description="Train with `python -m rlvr.start --config configs/math.yaml "
        "[key=value ...]`.", epilog="Every key, its default and meaning, the algorithm presets (algorithm=grpo, "
        "ppo, dapo, gigpo, ...) and what is checked before start: docs/config.md; the presets' papers and keys: "
        "docs/algorithms.md.")
    parser.add_argument("--config", required=True, help="YAML config, e.g. configs/math.yaml")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. run.max_steps=2")
    parser.add_argument("--verbose", action="store_true", help="also show third-party logs and all worker output "
                        "on the console (they always go to <run>/logs/)")
    parser.add_argument("--dry-run", action="store_true", help="validate the config, load the data, print per-domain "
                        "counts, quotas and the resources it would request; start nothing")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config with each value's origin and exit")
    args = parser.parse_args(argv)
    from rlvr.cli.describe import header_lines
    from rlvr.telemetry import console

    console.install(verbose=args.verbose, header=header_lines)
    try:
        cfg = load_config(args.config, args.overrides)
        if args.print_config:
            from rlvr.config.origin import config_origins, render_with_origins

            print(render_with_origins(cfg, config_origins(args.config, args.overrides, cfg)))
            return 0
        from rlvr.pipeline.preflight import preflight  # the checks that need nothing started

        checked = preflight(cfg)
        if args.dry_run:
            from rlvr.cli.dry_run import dry_run

            print(dry_run(cfg, checked))
            return 0
    except ConfigError as err:
        return config_error(err, args)
    from rlvr.lifecycle.run_tmpdir import use_run_tmpdir

    use_run_tmpdir()  # before anything of the run starts: its temp files go with it, also when it is killed
    from rlvr.pipeline.parts import build_pipeline
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline  # heavy imports only once the config is valid
    from rlvr.report.finish import finish_run

    # A supervisor's SIGTERM ends the run as Ctrl-C does: the pipeline closes everything it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        pipeline = RLVRPipeline(cfg, build_pipeline(cfg, checked))
        try:
            run_dir = pipeline.run()
            report = finish_run(pipeline)
        except BaseException:
            pipeline.close()  # also ends the workers' output: the hint comes after their errors
            console.say(f"the run stopped; its report so far: python -m rlvr.report {pipeline.run_dir}")
            raise
        pipeline.close()
    except KeyboardInterrupt:
        print("interrupted: the run and everything it started are stopped", file=sys.stderr)
        return 130
    print(report)
    print(f"run directory: {run_dir}")
    return 0


def config_error(err: ConfigError, args: argparse.Namespace) -> int:
    """The one line a config mistake gets (the traceback too with --verbose), naming the key and the file or
    override that set it; the exit code 2."""
    if args.verbose:
        traceback.print_exc()
    where = f"{key_origin(err.key, args.config, overrides_by_key(args.overrides))}: " if err.key else ""
    print(f"error: {where}{err}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
