"""Everything a run can find wrong before it starts anything: run by `build_pipeline` first and by `--dry-run`.

No directory, process or server exists yet when these checks run, so a mistake costs seconds, not a minute of
start-up, and leaves nothing behind. Each failure is a ConfigError keyed by the config key to change; the CLI
adds whether the value came from the file or an override (rlvr.config.load.key_origin). The table of checks is
in docs/config.md ("Checked before start").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from rlvr.config.base import ConfigError
from rlvr.config import precision
from rlvr.config.root import Config
from rlvr.data.dataset import BadRow
from rlvr.envs.base import check_args, resolve_env_class
from rlvr.models.default_model import ModelNotFoundError, resolve_model_path
from rlvr.pipeline import checkpoint
from rlvr.pipeline.build import DomainData, load_domain_data, local_judge_domains
from rlvr.workers.rewards.reward_actor import check_reward_args

log = logging.getLogger(__name__)


@dataclass
class Checked:
    """What the checks had to load anyway, handed on so the run does not load it twice."""

    model_path: str
    tokenizer: Any
    data: dict[str, DomainData]
    bad_rows: list[BadRow] = field(default_factory=list)
    resume_from: Path | None = None
    seconds: float = 0.0  # how long the checks took (the console's first start-up line)


def model_dir(key: str, name_or_path: str, cache_dir: str | None) -> str:
    try:
        return resolve_model_path(name_or_path, cache_dir)
    except ModelNotFoundError as err:
        raise ConfigError(f"{err.problem}; give a local Hugging Face model directory (with config.json) or "
                          "'smollm2-135m-instruct' (no model hub is reachable from here)", key=key) from None


def emulated_bf16_keys(cfg: Config) -> list[str]:
    """The keys that ask for bf16 where `auto` would not pick it (CPU workers of a host without native bf16)."""
    sections = [("generation.dtype", cfg.generation.dtype == "bfloat16", cfg.generation.num_gpus_per_worker),
                ("actor_train.bf16_autocast", cfg.actor_train.bf16_autocast, cfg.actor_train.num_gpus_per_worker)]
    if cfg.algorithm.needs_critic:
        sections.append(("critic.bf16_autocast", cfg.critic.bf16_autocast, cfg.critic.num_gpus_per_worker))
    if cfg.judge_server.dtype == "bfloat16" and local_judge_domains(cfg):  # the server runs on the driver's host
        sections.append(("judge_server.dtype", True, None))
    return [key for key, bf16, gpus in sections if bf16 and not precision.auto_bf16(gpus)]


def preflight(cfg: Config) -> Checked:
    """Resume target, models, reward and env arguments, data: in the order a user would fix them."""
    start = time.perf_counter()
    resume_from = None
    if cfg.run.resume:
        try:
            resume_from = checkpoint.find_resume_point(Path(cfg.run.output_dir), cfg.run.name, cfg.run.resume)
            checkpoint.check_optimizer_state(resume_from / "actor_train")
        except FileNotFoundError as err:
            raise ConfigError(str(err).removeprefix(f"run.resume={cfg.run.resume}: "), key="run.resume") from None
    model_path = model_dir("model.path", cfg.model.path, cfg.model.cache_dir)
    if cfg.critic.model_path:
        model_dir("critic.model_path", cfg.critic.model_path, cfg.model.cache_dir)
    for domain, dc in cfg.domains.items():
        if dc.env is not None:
            check_args(domain, resolve_env_class(domain, dc.env), dc.env)
        else:
            check_reward_args(domain, dc.reward)
    if local_judge_domains(cfg):
        model_dir("judge_server.model", cfg.judge_server.model, cfg.model.cache_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{model_path}: its tokenizer does not load: {err}", key="model.path") from None
    bad: list[BadRow] = []
    data = load_domain_data(cfg, tokenizer, bad_out=bad)
    if keys := emulated_bf16_keys(cfg):
        log.warning("bf16 asked for (%s), but %s: torch emulates bf16 there, a matrix product 100x slower than "
                    "fp32 on an AVX2 EPYC; `auto` picks fp32 on such a host", ", ".join(keys),
                    precision.host_precision()[1])
    return Checked(model_path, tokenizer, data, bad, resume_from, time.perf_counter() - start)
