"""Nothing left behind: a vLLM run of the CLI, ended by Ctrl-C (SIGINT to its process group, as a
terminal sends it) or by SIGKILL of the driver after its first step, leaves no process of its tree alive (Ray's
cluster and workers, vLLM's EngineCore, reward process pools, wandb, guardians), none of the /dev/shm segments
its processes mapped (the weight-sync files; vLLM's psm_* message queues when its model runs in a worker process
of its own), none of the socket files they bound (vLLM's ZeroMQ sockets) and not its temp dir (wandb's staging
dirs, multiprocessing's, vLLM's store file). Only this run's own processes and
files are looked at: other runs share the machine.

Reported before the fix: a driver SIGKILLed after step 2 left VLLM::EngineCore and VLLM::Worker alive holding
3.4 GB, and every run left a 160 MB and a 240 MB psm_* segment in /dev/shm; later, every vLLM engine left its
socket files in /tmp (678 of them on the development machine); later still, wandb's staging dirs of a killed driver
and vLLM's vllm_dist_* store files (18 in /tmp after a day of suite runs and benches).
"""

from __future__ import annotations

import signal

import pytest

from rlvr.backends.vllm_engine import vllm_available
from tests.lifecycle.cli_runs import trained, write_config
from tests.lifecycle.runwatch import RunWatch, cli_command, run_dir_of, trained_steps

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not importable (scripts/setup.sh installs it)")]

# Three steps with validation and saves: after step 0 is logged the run still has a while to go when the test
# sends its Ctrl-C (two bare steps of the tiny model end before it arrives).
SECTIONS = dict(run={"max_steps": 3, "eval_every": 1, "save_every": 1},
                trackers={"wandb": True, "wandb_mode": "offline", "tensorboard": True, "jsonl": True},
                generation={"engine": "vllm", "max_new_tokens": 8, "temperature": 1.0,
                            "vllm": {"max_model_len": 512, "kv_cache_gib": 0.25}})


FIRST_STEPS: dict[str, dict] = {}  # exit path -> its run's step-0 record (timing metrics left out)


# A run that ends normally is checked on the heaviest tree there is, the README's main command
# (tests/e2e/test_main_command.py::test_main_command_leaves_nothing_behind), instead of a third tiny run here.
@pytest.mark.parametrize("exit_path", ["ctrl_c", "sigkill"])
def test_a_run_leaves_nothing_behind(tiny_vllm_model_dir, tmp_path, exit_path):
    config = write_config(tmp_path, tiny_vllm_model_dir, "life", **SECTIONS)
    watch = RunWatch(cli_command(config), tmp_path / "driver.log")
    try:
        watch.wait_until(lambda: 0 in trained_steps(run_dir_of(tmp_path / "runs", "life")), 600)
        if exit_path == "ctrl_c":
            watch.signal(signal.SIGINT, group=True)
            assert watch.wait_exit(300) == 130, watch.log_tail()
        else:
            watch.signal(signal.SIGKILL)
            assert watch.wait_exit(60) == -signal.SIGKILL
        commands = [cmd for _, cmd in watch.processes.values()]
        assert any(c.startswith("VLLM::EngineCore") for c in commands), \
            f"the run did not start vLLM's engine; seen: {sorted(set(commands))}"
        # its ZeroMQ socket files (an engine of one worker has no psm_* queues: the model runs in EngineCore)
        assert any("rlvr-vllm-ipc-" in s for s in watch.segments), "vLLM's socket files were not seen"
        # the run's temp dir (TMPDIR of its tree, rlvr/lifecycle/run_tmpdir.py), where a killed driver's wandb
        # staging dirs and its engine's vllm_dist_* store file used to stay behind in /tmp
        assert any("/rlvr-run-" in s for s in watch.segments), "the run's temp dir was not seen"
        left = watch.leftovers(timeout_s=60)
        print(f"\n{exit_path}: {len(watch.processes)} processes and {len(watch.segments)} /dev/shm and socket files "
              f"seen; left: {len(left.processes)} processes, {len(left.segments)} files")
        assert not left, f"{exit_path}: the run left {left}"
        FIRST_STEPS[exit_path] = trained(run_dir_of(tmp_path / "runs", "life"))[0]
    finally:
        watch.clean_up()


def test_vllm_runs_of_one_config_train_alike():
    """The runs above are one config and seed: with vLLM's per-request seeds their step 0 (prompts, sampled
    tokens, hence rewards, lengths, losses) is the same (docs/lifecycle.md, "The same run twice", says where it
    may not be)."""
    if len(FIRST_STEPS) < 2:
        pytest.skip("needs at least two of the runs above in this session")
    (first_path, first), *others = FIRST_STEPS.items()
    for path, record in others:
        differ = {k: (first.get(k), record.get(k)) for k in first.keys() | record.keys() if first.get(k) != record.get(k)}
        assert not differ, f"step 0 of the {first_path} and {path} runs differ: {differ}"
