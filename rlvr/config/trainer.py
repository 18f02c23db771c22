"""The `actor_train` and `critic` sections: strategy, optimizer, batching of each trained model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from rlvr.config.base import Strict, _keyed
from rlvr.config.precision import auto_bf16


class DeepSpeedConfig(Strict):
    """actor_train.strategy = deepspeed: ZeRO data parallelism over actor_train.world_size processes."""

    zero_stage: Literal[2, 3] = 2  # 2: optimizer states and gradients sharded; 3: parameters too

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "bf16_weights" in data:
            raise _keyed("bf16_weights", "moved one level up, for both strategies: <section>.bf16_weights")
        return data


# The projections of Llama-style blocks (Llama, Qwen, Mistral, SmolLM): every linear layer but the LM head
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraConfig(Strict):
    """<section>.lora: train low-rank adapters (peft's LoRA) instead of every weight: W x + (alpha / rank) B A x,
    only A and B (and a critic's value head) in the optimizer and the checkpoints; generation gets the merged
    weights. Adapters learn at larger rates than full fine-tuning (docs/lora.md)."""

    rank: int = Field(8, ge=1)  # r: the adapters' inner dimension
    alpha: float | None = Field(None, gt=0)  # the scale is alpha / rank; None: 2 x rank (a scale of 2)
    dropout: float = Field(0.0, ge=0, lt=1)  # on the adapters' input, in training only
    # names (last part) of the linear layers that get adapters
    target_modules: list[str] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1)

    @property
    def scale(self) -> float:
        return (self.alpha if self.alpha is not None else 2.0 * self.rank) / self.rank


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
    # Packed micro-batches: rows laid end to end with per-row position ids (no pad tokens), at most this many tokens
    # per forward/backward, bins of similar totals (micro_batch_size then unused). Also the reference's and the
    # old-logprob forwards (actor_train's). The loss still averages over the whole mini-batch's tokens. Each row
    # (or unit of rows that share a prompt, below) attends to itself alone (rlvr/models/segment_attention.py: one
    # SDPA call per row or unit on CPU, flash attention's varlen kernel on CUDA in bf16 for rows alone), not through
    # an L x L mask over the stream (bench/precision_packing.py, fp32 on a 2-core EPYC: 1.18x the padded step's
    # tokens/s, the old dense mask 1.07x).
    max_tokens_per_micro_batch: int | None = Field(None, ge=16)
    # With packing: rows whose tokens before their first loss target are the same (a group's samples of one prompt)
    # are packed as one unit, the prompt once and each response attending to it and to itself (a tree mask), so a
    # group of G computes its prompt once, not G times; outputs equal the per-row packing's within float rounding.
    share_prompt_prefix: bool = True
    ppo_epochs: int = Field(1, ge=1)  # passes over each batch
    # bf16 compute in forward and backward: over fp32 weights (autocast), or with bf16 weights (bf16_weights).
    # auto: true where this host computes bf16 natively (a GPU, AMX-BF16, AMD AVX512-BF16), else false (fp32;
    # rlvr/config/precision.py); resolved when validated.
    bf16_autocast: bool | Literal["auto"] = Field("auto", validate_default=True)
    # With bf16_autocast: true -> bf16 module weights and compute, fp32 master weights, gradient accumulation and
    # optimizer states (DeepSpeed's "bf16" mode; the torch strategy keeps fp32 masters itself): AMX / tensor-core
    # matmuls without autocast's casts, half the weight memory. false -> fp32 weights under bf16 autocast (an
    # fp32 forward stays possible, for the weight-sync check). None: true for deepspeed, false for torch.
    bf16_weights: bool | None = None
    # With bf16 weights, how the fp32 masters are rounded into the bf16 module after each step (both strategies):
    # "dithered" (a fixed random threshold per weight, rlvr/backends/bf16_rounding.py) moves the module as far as
    # the masters on average; "nearest" (DeepSpeed's own) leaves weights that start on the bf16 grid frozen until
    # their updates cross half a bf16 step (at lr 1e-5 ~25 steps for a weight of 0.1): docs/precision.md.
    bf16_rounding: Literal["dithered", "nearest"] = "dithered"
    gradient_checkpointing: bool = False  # recompute activations in backward to save memory
    torch_threads: int | None = None  # CPU threads of the trainer (None: every core)
    lora: LoraConfig | None = None  # low-rank adapters instead of full fine-tuning (None: every weight trains)

    @field_validator("bf16_autocast")
    @classmethod
    def _resolve_auto(cls, value: bool | str, info: ValidationInfo) -> bool:
        return auto_bf16(info.data.get("num_gpus_per_worker")) if value == "auto" else value

    @model_validator(mode="after")
    def _world_size_needs_deepspeed(self) -> "TrainerConfig":
        if self.world_size > 1 and self.strategy != "deepspeed":
            raise _keyed("world_size", f"{self.world_size} ranks need strategy: deepspeed (the torch strategy is "
                         "one process)")
        return self

    @property
    def uses_bf16_weights(self) -> bool:
        """The module holds bf16 weights (fp32 masters beside them): its forward is bf16 throughout, so there is
        no fp32 forward to compare an fp32 engine with."""
        default = self.strategy == "deepspeed"
        return self.bf16_autocast and (default if self.bf16_weights is None else self.bf16_weights)


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
