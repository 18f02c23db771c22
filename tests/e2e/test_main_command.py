"""The README's main command on the embedded default model, shortened to one step by overrides, watched from outside
while it runs: its process tree, its shared memory, the sockets its servers listen on and where a planted judge
API key goes."""

from __future__ import annotations

import ipaddress
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlvr.config.precision import host_precision
from rlvr.report.plots import PLOTS
from rlvr.telemetry.console import OUR_WARNING_LINE
from tests.helpers.browser import check_page, chromium
from tests.helpers.exposure import ExposureProbe, new_canary
from tests.lifecycle.runwatch import Leftovers, RunWatch

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def main_command() -> list[str]:
    """The command as README.md writes it (after the setup part), so the test breaks if the README drifts."""
    readme = (REPO / "README.md").read_text()
    line = next(l for l in readme.splitlines() if "rlvr.start" in l)
    cmd = line.split("&&")[-1].strip().split()
    assert cmd[0].endswith("python"), cmd
    return [sys.executable] + cmd[1:]


DOMAINS = ("math", "code", "judge")


@dataclass
class MainRun:
    console: str  # stdout and stderr, as a person at the terminal sees them
    run_dir: Path
    commands: list[str]  # the command line of every process the run's tree had, while it ran
    segments: list[str]  # the /dev/shm and socket files its processes mapped or bound
    left: Leftovers  # what of those was still there once the command had ended
    console_log: Path
    exposure: ExposureProbe  # what its servers listened on, and where the judge key went, while it ran


@pytest.fixture(scope="module")
def main_run(default_model_dir, tmp_path_factory) -> MainRun:
    """One run of the main command (one step) shared by the tests of this module, watched from outside (every
    process of its tree, every shared-memory and socket file, every listening socket) so that one test can say it
    left nothing and another that it exposed nothing. A judge API key is planted in its environment, as a user
    would export it (the local judge server ignores it; the reward workers send it). One step between two
    validations holds every part (generation, the three rewards, the update, the weight sync and its check, the
    trained weights validated, a checkpoint); a second step added 23 s and nothing the integration tests lack.
    Four prompts a step (2 math, 1 code, 1 judge) instead of eight: every domain still trains, in half the
    training time (fp32 CPUs spent 37 s of the step's 62 s training)."""
    out = tmp_path_factory.mktemp("main-run")
    overrides = ["run.max_steps=1", "run.eval_every=1", "run.save_every=1", f"run.output_dir={out}",
                 "rollout.prompts_per_step=4", "generation.max_new_tokens=48", "validation.max_prompts_per_domain=4"]
    probe = ExposureProbe(new_canary())
    env = {"WANDB_MODE": "offline", "RLVR_JUDGE_API_KEY": probe.canary}
    watch = RunWatch(main_command() + overrides, out / "console.txt", env, cwd=REPO)
    try:
        code = watch.wait_exit(1200, each_poll=probe.poll)
        console = watch.log.read_text(errors="replace")  # kept in console.txt for a person looking into a failure
        assert code == 0, console[-4000:]
        left = watch.leftovers(timeout_s=60)
    finally:
        watch.clean_up()
    match = re.search(r"run directory: (\S+)", console)
    assert match, console[-2000:]
    run_dir = Path(match.group(1))
    if not run_dir.is_absolute():
        run_dir = REPO / run_dir
    return MainRun(console, run_dir, [cmd for _, cmd in watch.processes.values()], sorted(watch.segments), left,
                   watch.log, probe)


def test_main_command_leaves_nothing_behind(main_run):
    """The heaviest tree the project starts (Ray, vLLM's EngineCore, the judge server, the sandbox
    server, DeepSpeed, reward process pools, wandb) ends with the command: no process and no /dev/shm or socket
    file of it is left (tests/lifecycle/test_nothing_left_behind.py does the same for Ctrl-C and SIGKILL)."""
    assert any(c.startswith("VLLM::EngineCore") for c in main_run.commands), sorted(set(main_run.commands))
    assert any("rlvr-vllm-ipc-" in s for s in main_run.segments), "vLLM's socket files were not seen"
    assert not main_run.left, f"the main command left {main_run.left}"


def test_judge_key_never_written_and_servers_listen_on_loopback(main_run):
    """A judge API key from the environment reaches the reward workers and no file: the run directory (metrics,
    val samples, checkpoints, TensorBoard, W&B offline files), the console, the judge server's logs, the Ray
    session's logs. The servers rlvr starts (judge, sandbox) listen on loopback only."""
    probe = main_run.exposure
    assert probe.key_holders, "no reward worker ran with the key: the check below would be vacuous"
    assert not probe.leaked, f"the judge key is in {sorted(probe.leaked)}"
    roles = {role for _, role in probe.listening}
    assert {"judge", "sandbox"} <= roles, {f"{pid} {role}": sorted(a) for (pid, role), a in probe.listening.items()}
    for (pid, role), addresses in probe.listening.items():
        if role in ("judge", "sandbox"):
            for ip, port in addresses:
                assert ipaddress.ip_address(ip).is_loopback, f"{role} server (pid {pid}) listens on {ip}:{port}"
    written = probe.written_files(main_run.run_dir, main_run.console_log)
    assert any(p.suffix == ".wandb" for p in written) and any("tfevents" in p.name for p in written)
    assert (main_run.run_dir / "checkpoints").exists() and (main_run.run_dir / "val_samples.jsonl").exists()
    assert any(p.parts[-2:] == ("logs", "raylet.out") for p in written), "the Ray session's logs were not found"
    leaks = probe.files_holding_the_key(written)
    assert not leaks, f"the judge API key was written to {leaks}"


def test_main_command_runs_and_logs_to_all_trackers(main_run):
    run_dir = main_run.run_dir
    records = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if "val_correct/all/mean" in r]
    assert [r["step"] for r in val] == [0, 1]
    for r in val:
        for key in ("val_correct/math/mean", "val_correct/code/mean", "val_correct/judge/mean"):
            assert 0.0 <= r[key] <= 1.0
    assert any("actor/pg_loss" in r for r in records)
    # the main job runs on the real engines: vLLM generation, DeepSpeed training, weights synced and checked
    import yaml

    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["generation"]["engine"] == "vllm" and resolved["actor_train"]["strategy"] == "deepspeed"
    diffs = [r["actor/weight_sync_logprob_max_diff"] for r in records if "actor/weight_sync_logprob_max_diff" in r]
    # bf16 (shipped, where native): the engine's and DeepSpeed's bf16 kernels round differently, so only a gross
    # difference (a weight that did not arrive moves logprobs by several nats) fails; fp32 agrees to float rounding
    bf16 = host_precision()[0]
    assert resolved["generation"]["dtype"] == ("bfloat16" if bf16 else "float32")
    assert resolved["actor_train"]["bf16_autocast"] is bf16 and resolved["actor_train"]["bf16_weights"]
    # step 0's check is logged; the one after the update, before the final validation, stops the run when it
    # fails (the fixture asserted exit 0)
    assert len(diffs) >= 1 and max(diffs) < (0.5 if bf16 else 1e-3)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"val_correct/all/mean", "val_correct/math/mean", "val_correct/code/mean", "val_correct/judge/mean"} <= tags
    # every domain's reward statuses reached the trackers (math, code in the sandbox, judge over HTTP)
    assert {f"{d}/reward/status/ok" for d in ("math", "code", "judge")} <= tags

    wandb_files = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert wandb_files and wandb_files[0].stat().st_size > 0
    assert (run_dir / "config.yaml").exists()
    assert (run_dir / "checkpoints" / "step_000001" / "driver.json").exists()
    # system metrics of every worker, and throughput
    train = [r for r in records if "actor/pg_loss" in r]
    for key in ("system/actor_train/0/rss_gib", "system/actor_infer/0/rss_gib", "system/reward/code/0/rss_gib",
                "system/judge_server/rss_gib", "system/actor_train/0/cpu_percent", "system/train_tokens_per_s"):
        assert all(r[key] > 0 for r in train), key
    assert len(list((run_dir / "wandb").glob("offline-run-*/files/media/table/val/samples_*.table.json"))) == 2


def console_lines(console: str) -> list[str]:
    return [part for line in console.splitlines() for part in line.split("\r") if part.strip()]


def test_console_is_quiet_and_ends_with_the_summary(main_run):
    lines = console_lines(main_run.console)
    text = "\n".join(lines)
    # the header
    assert re.search(r"^  model +smollm2-135m-instruct$", text, re.M)
    assert re.search(r"domains +math +2 prompts/step +MathRuleRewardWorker x1$", text, re.M)
    assert re.search(r"^ +judge +1 prompts/step +LLMJudgeRewardWorker x1 \(local judge server\)$", text, re.M)
    dtype = "bfloat16" if host_precision()[0] else "float32"  # `auto` in the shipped config
    assert re.search(rf"^  engines +generation vllm x1 \({dtype}\) \| training deepspeed ZeRO-2", text, re.M)
    assert f"run dir    {main_run.run_dir}" in text
    val_lines = [l for l in lines if l.startswith("validation @ step")]
    assert [l.split(":")[0] for l in val_lines] == ["validation @ step 0", "validation @ step 1"]
    assert all(re.search(r": val_correct \d\.\d{3}  \(code \d\.\d{3}, judge \d\.\d{3}, math \d\.\d{3}\)  "
                         r"\[\d+\.\d s\]$", l) for l in val_lines), val_lines
    # start-up, stage by stage, each with its seconds (the servers and the workers start together: one stage; the
    # engines' load, which runs alongside, is waited for as a stage of its own)
    stages = [m.group(1) for l in lines if (m := re.match(r"^  ready: (.+) in \d+\.\d s$", l))]
    assert [s.split(" ")[0] for s in stages] == ["checks", "Ray", "servers", "engines"], stages
    assert "workers (actor_train" in stages[2], stages
    # no third-party warnings (vLLM, Ray, DeepSpeed, W&B, datasets, transformers, Python warnings) unless --verbose
    unprefixed = [re.sub(r"^\([^()]* pid=\w+\) ", "", l) for l in lines]  # a worker's line: "(Worker pid=N) ..."
    noisy = [l for l in unprefixed if re.search(r"(?i)warn", l) and not OUR_WARNING_LINE.search(l)]
    assert noisy == [], noisy[:10]
    assert not [l for l in lines if "core_worker.cc" in l], "a line of Ray's C++ log reached the console"
    # the summary table names every domain, and where the report is
    for domain in (*DOMAINS, "all"):
        assert re.search(rf"^{domain} +\d\.\d{{3}} -> \d\.\d{{3}} +\d\.\d{{3}} \(\d\)", text, re.M), domain
    assert f"report: {main_run.run_dir / 'report' / 'index.html'}" in text


# The main job corrects the engine-trainer bf16 mismatch (algorithm.rollout_correction.is_level: token), so its
# samples carry behaviour logprobs, it logs rollout_corr/* and the report draws every plot with data.
MAIN_JOB_PLOTS = set(PLOTS)


def test_report_files_and_logs(main_run):
    report, logs = main_run.run_dir / "report", main_run.run_dir / "logs"
    assert {p.stem for p in report.glob("*.png")} == MAIN_JOB_PLOTS
    page = (report / "index.html").read_text()
    assert all(f'src="{name}.png"' in page for name in MAIN_JOB_PLOTS)
    # what the console left out is in the logs: the driver's, each worker's (vLLM's warnings), the judge server's
    assert "Started a local Ray instance" in (logs / "driver.log").read_text()
    workers = {p.name.split("-")[0]: p.read_text() for p in (logs / "workers").glob("*.log")}
    assert "WARNING" in workers["ActorInferWorker"]
    assert (logs / "judge_server" / "stderr.log").stat().st_size > 0


@pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed (Debian package `chromium`: "
                    "scripts/setup.sh installs it)")
def test_report_page_in_a_browser(main_run, tmp_path):
    page = check_page(main_run.run_dir / "report" / "index.html", tmp_path / "report.png")
    assert page.images == len(MAIN_JOB_PLOTS) and page.broken == []
    assert page.summary_cells == [*DOMAINS, "all"]
