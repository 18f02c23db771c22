"""`system/...` metrics: per-worker resident memory and CPU use (with the processes each worker started, such as
vLLM's engine core), GPU memory and utilisation when the worker holds a GPU, and tokens/s of generation and
training. Each worker measures itself (through Ray's `__ray_call__`, so it works on any node and needs no method on
the worker classes); the driver turns CPU seconds into a utilisation between two samples."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import ray

GIB = float(1 << 30)


@dataclass
class ProcessSample:
    rss_bytes: float  # resident memory of the process and its descendants
    cpu_seconds: float  # user + system CPU time of the process and its descendants (living ones)
    wall: float  # time.monotonic() when taken, on the worker's node
    gpu_mem_bytes: float | None = None
    gpu_util_percent: float | None = None


def sample_process(pid: int | None = None, children: bool = True) -> ProcessSample:
    """The calling process (or `pid`) and, with `children`, everything it started."""
    import psutil

    root = psutil.Process(pid or os.getpid())
    rss = cpu = 0.0
    procs = [root]
    try:
        procs += root.children(recursive=True) if children else []
    except psutil.Error:
        pass
    pids = []
    for p in procs:
        try:
            with p.oneshot():
                rss += p.memory_info().rss
                t = p.cpu_times()
                cpu += t.user + t.system
                pids.append(p.pid)
        except psutil.Error:  # a child that ended meanwhile
            continue
    gpu_mem, gpu_util = _gpu_usage(pids)
    return ProcessSample(rss, cpu, time.monotonic(), gpu_mem, gpu_util)


def _gpu_usage(pids: list[int]) -> tuple[float | None, float | None]:
    """GPU memory of these processes and the utilisation of the GPUs they use (NVML), or torch's view of this
    process when NVML is missing; (None, None) on a machine or worker without a GPU."""
    try:
        import pynvml  # nvidia-ml-py, shipped with CUDA builds of torch / vLLM

        pynvml.nvmlInit()
    except Exception:
        torch = sys.modules.get("torch")  # never import torch into a worker just to ask
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return float(torch.cuda.memory_reserved()), None
        return None, None
    mem, utils, wanted = 0.0, [], set(pids)
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            used = [p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                    if p.pid in wanted]
            if used:
                mem += sum(used)
                utils.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
    finally:
        pynvml.nvmlShutdown()
    if not utils:
        return None, None
    return mem, sum(utils) / len(utils)


def cpu_percent(before: ProcessSample, after: ProcessSample) -> float:
    """CPU utilisation between two samples of the same process tree, in percent of one core (200 = two busy
    cores). Children that ended in between take their CPU seconds with them: never below 0."""
    wall = after.wall - before.wall
    if wall <= 0:
        return 0.0
    return max(0.0, 100.0 * (after.cpu_seconds - before.cpu_seconds) / wall)


def worker_metrics(name: str, sample: ProcessSample, before: ProcessSample | None) -> dict[str, float]:
    out = {f"system/{name}/rss_gib": sample.rss_bytes / GIB}
    if before is not None:
        out[f"system/{name}/cpu_percent"] = cpu_percent(before, sample)
    if sample.gpu_mem_bytes is not None:
        out[f"system/{name}/gpu_mem_gib"] = sample.gpu_mem_bytes / GIB
    if sample.gpu_util_percent is not None:
        out[f"system/{name}/gpu_util_percent"] = sample.gpu_util_percent
    return out


def throughput_metrics(m: dict[str, float]) -> dict[str, float]:
    """Training tokens/s: the batch's response tokens (the tokens the loss sees) over the train phase.
    Generation tokens/s is `system/response_tokens_per_s` (rlvr/telemetry/overlap_metrics.py)."""
    train = m.get("time/train", 0.0)
    if train > 0 and m.get("batch/response_tokens"):
        return {"system/train_tokens_per_s": m["batch/response_tokens"] / train}
    return {}


def _probe(actor) -> ProcessSample:  # runs inside the worker, through __ray_call__
    return sample_process()


class SystemMonitor:
    """Samples named workers (`{"actor_train/0": handle, ...}`), local processes the driver started (`{"judge_server":
    pid}`, with their children) and the driver itself (alone: the Ray processes it started are counted per worker)."""

    def __init__(self, workers: dict[str, object], local_pids: dict[str, int] | None = None, timeout_s: float = 10.0):
        self.workers = workers
        self.local_pids = local_pids or {}
        self.timeout_s = timeout_s
        self.previous: dict[str, ProcessSample] = {}

    @classmethod
    def for_pipeline(cls, pipeline) -> "SystemMonitor":
        judge = getattr(pipeline, "judge_server", None)
        monitor = cls(pipeline_workers(pipeline.clusters, pipeline.schedulers.actors),
                      {"judge_server": judge.process.pid} if judge is not None else None)
        monitor.sample(timeout_s=600)  # the CPU baseline, once every worker has started (loading models takes a while)
        return monitor

    def sample(self, timeout_s: float | None = None) -> dict[str, float]:
        """A worker that does not answer within the timeout (busy in a long call) is left out of this sample."""
        names = list(self.workers)
        refs = [self.workers[n].__ray_call__.remote(_probe) for n in names]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s or self.timeout_s)
        samples: dict[str, ProcessSample] = {"driver": sample_process(children=False)}
        for name, pid in self.local_pids.items():
            try:
                samples[name] = sample_process(pid)
            except Exception:  # it exited; whoever owns it reports that
                continue
        for name, ref in zip(names, refs):
            if ref in ready:
                try:
                    samples[name] = ray.get(ref)
                except Exception:  # a worker that died: its error surfaces where the pipeline calls it
                    continue
        out: dict[str, float] = {}
        for name, s in samples.items():
            out.update(worker_metrics(name, s, self.previous.get(name)))
        out["system/total/rss_gib"] = sum(s.rss_bytes for s in samples.values()) / GIB
        self.previous.update(samples)  # a worker left out this time keeps its last sample as the CPU baseline
        return out


def pipeline_workers(clusters, schedulers: dict) -> dict[str, object]:
    """Every actor of a pipeline under its metric name: actor_train/0, actor_infer/0, reward/math/0, ..."""
    named: dict[str, object] = {}
    groups = {"actor_train": clusters.actor_train, "actor_infer": clusters.actor_infer,
              "reference": clusters.reference, "critic": getattr(clusters, "critic", None),
              **{f"reward/{d}": c for d, c in clusters.rewards.items()}}
    for prefix, cluster in groups.items():
        if cluster is not None:
            for rank, w in enumerate(cluster.workers):
                named[f"{prefix}/{rank}"] = w
    for d, actor in schedulers.items():
        named[f"scheduler/{d}"] = actor
    return named
