"""A run's set-up in a few lines, from its config alone: the console header and the dry run both print it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rlvr.config.root import Config
from rlvr.schedulers.quotas import allocate_quotas

QUOTA_HORIZON = 1000  # steps over which the quota range and mean are reported (quotas rotate with the credit)


@dataclass
class Quota:
    low: int
    high: int
    mean: float

    def __str__(self) -> str:
        if self.low == self.high:
            return f"{self.low}"
        return f"{self.low}-{self.high} (mean {self.mean:.2f})"


def quota_per_step(cfg: Config, steps: int = QUOTA_HORIZON) -> dict[str, Quota]:
    """Prompts per step of each domain: the exact per-step counts of allocate_quotas over `steps` steps."""
    probs, total = cfg.rollout.domain_interleave_probs, cfg.rollout.prompts_per_step
    seen: dict[str, list[int]] = {d: [] for d in probs}
    credit: dict[str, float] = {}
    for _ in range(steps):
        quotas, credit = allocate_quotas(probs, total, credit)
        for d, q in quotas.items():
            seen[d].append(q)
    return {d: Quota(min(q), max(q), sum(q) / len(q)) for d, q in seen.items()}


def short_class(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def reward_note(reward) -> str:
    """What a reward worker starts besides itself."""
    args = reward.args
    if short_class(reward.worker) == "LLMJudgeRewardWorker" or "base_url" in args:
        url = args.get("base_url")
        return "local judge server" if url in (None, "local") else f"judge at {url}"
    if args.get("sandbox") == "http":
        return "sandbox server"
    return ""


def engines_line(cfg: Config) -> str:
    gen, train = cfg.generation, cfg.actor_train
    strategy = train.strategy + (f" ZeRO-{train.deepspeed.zero_stage}" if train.strategy == "deepspeed" else "")
    precision = "bf16 weights" if train.uses_bf16_weights else "bf16 autocast" if train.bf16_autocast else "fp32"
    parts = [f"generation {gen.engine} x{gen.world_size} ({gen.dtype})",
             f"training {strategy} x{train.world_size} ({precision}{lora_part(train.lora)})",
             reference_part(cfg)]
    return " | ".join(parts)


def lora_part(lora) -> str:
    return f", LoRA rank {lora.rank} on {len(lora.target_modules)} kinds of layer" if lora is not None else ""


def reference_part(cfg: Config) -> str:
    if cfg.reference_worker:
        return "reference x1"
    return "reference: actor_train without adapters" if cfg.needs_reference else "no reference (no KL term)"


def trackers_line(cfg: Config) -> str:
    from rlvr.telemetry.trackers import wandb_mode

    t = cfg.trackers
    names = [n for n, on in (("metrics.jsonl", t.jsonl), ("tensorboard", t.tensorboard)) if on]
    if t.wandb:
        names.append(f"wandb ({wandb_mode(t.wandb_mode)}, project {t.wandb_project})")
    return ", ".join(names) or "none"


def domain_lines(cfg: Config) -> list[str]:
    quotas = quota_per_step(cfg)
    width = max(len(d) for d in cfg.domains)
    out = []
    for d, dc in cfg.domains.items():
        if dc.env is not None:  # a multi-turn env domain: played in its scheduler, no reward service
            out.append(f"{d:<{width}}  {quotas[d]} prompts/step  env {short_class(dc.env.path)}, "
                       f"up to {dc.env.max_turns} turns")
            continue
        r = dc.reward
        note = reward_note(r)
        out.append(f"{d:<{width}}  {quotas[d]} prompts/step  {short_class(r.worker)} x{r.world_size}"
                   + (f" ({note})" if note else ""))
    return out


def header_lines(cfg: Config, run_dir: str | os.PathLike) -> list[str]:
    r = cfg.rollout
    algo = cfg.algorithm
    lines = [
        f"model      {cfg.model.path}",
        f"algorithm  {algo.preset} ({algo.adv_estimator}, {algo.loss_agg_mode}) | {cfg.run.max_steps} steps of "
        f"{r.prompts_per_step} prompts x {r.group_size} responses",
    ]
    for i, line in enumerate(domain_lines(cfg)):
        lines.append(("domains    " if i == 0 else " " * 11) + line)
    lines += [f"engines    {engines_line(cfg)}",
              f"trackers   {trackers_line(cfg)}",
              f"run dir    {run_dir}  (third-party logs in logs/; --verbose shows them here)"]
    return lines


def resource_lines(cfg: Config, gpus_visible: int) -> list[str]:
    """The Ray actors and processes a run would start, with the resources each asks Ray for."""
    t, gen = cfg.actor_train, cfg.generation
    gpus = t.num_gpus_per_worker if t.num_gpus_per_worker is not None else (1.0 if gpus_visible else 0.0)
    cpus = cfg.ray.num_cpus if cfg.ray.num_cpus is not None else os.cpu_count()
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    rows = [("Ray", f"join {address}" if address else
             f"embedded local cluster, {cpus} CPUs, {gpus_visible} GPUs visible")]
    need = f", {gpus * (t.world_size + cfg.reference_worker):g} GPUs in all" if gpus else ""
    rows.append(("actor_train", f"{t.world_size} x {t.strategy} rank, {gpus:g} GPU each{need}"))
    if cfg.reference_worker:
        rows.append(("reference", f"1 x frozen policy, {gpus:g} GPU"))
    kv = f", KV cache {gen.vllm.kv_cache_gib:g} GiB each" if gen.engine == "vllm" else ""
    rows.append(("actor_infer", f"{gen.world_size} x {gen.engine} engine{kv}"))
    notes = set()
    for d, dc in cfg.domains.items():
        if dc.env is not None:
            rows.append((f"env/{d}", f"{short_class(dc.env.path)} in the domain's scheduler, "
                                     f"{dc.env.max_env_threads} threads for blocking steps"))
            continue
        note = reward_note(dc.reward)
        notes.add(note)
        extra = f", + a {note} process per actor" if note == "sandbox server" else ""
        rows.append((f"reward/{d}", f"{dc.reward.world_size} x {short_class(dc.reward.worker)}, "
                                    f"{dc.reward.max_concurrency} calls in flight each{extra}"))
    rows.append(("scheduler", f"{len(cfg.domains)} x DynamicSamplingScheduler (one per domain, 0 CPU)"))
    if "local judge server" in notes:
        js = cfg.judge_server
        rows.append(("judge_server", f"1 process: {js.model}, "
                                     f"{'vLLM when installed' if js.prefer_vllm else 'transformers'}"
                                     f"{f', {js.threads} threads' if js.threads else ''}"))
    width = max(len(name) for name, _ in rows)
    return [f"{name:<{width}}  {text}" for name, text in rows]
