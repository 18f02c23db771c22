"""Where things run: the `ray` and `placement` sections and the servers the driver starts (`judge_server`,
`sandbox_server`). Part of rlvr/config/root.py's Config; a module of its own because placement
grew with the multi-node layout (docs/scaling.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rlvr.config.base import Strict, _keyed
from rlvr.config.precision import auto_dtype


class RayConfig(Strict):
    address: str | None = None  # None: an embedded local cluster; "auto" or ray://...: join an existing one
    num_cpus: int | None = None
    # How long to wait for a placement group's resources before failing with what the cluster lacks.
    placement_timeout_s: float = Field(120.0, gt=0)


class PlacementConfig(Strict):
    """Where one cluster's workers go on the Ray cluster (docs/scaling.md). Per worker: `num_cpus_per_worker`
    Ray CPUs and the custom `resources` (names the operator gave node types with `ray start --resources`).
    `strategy` set: the workers are the bundles of one placement group (PACK: as few nodes as possible, SPREAD:
    as many, STRICT_*: exactly one node / one node each); None: no placement group, Ray puts each worker where
    its resources fit. `colocate_with: actor_train` (actor_infer, reference): worker i joins bundle
    i % actor_train.world_size of actor_train's placement group, on the same node (and GPU) as that rank."""

    # one placement group of the workers, as Ray's strategy (PACK / SPREAD / STRICT_*); None: no placement group
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] | None = None
    num_cpus_per_worker: float = Field(0.0, ge=0)  # 0: phases take turns on the cores (a 2-core box)
    resources: dict[str, float] = {}  # custom Ray resources per worker, e.g. {cpu_node: 1} (node types)
    colocate_with: Literal["actor_train"] | None = None  # actor_train: worker i in actor_train's bundle i % world_size

    @field_validator("resources")
    @classmethod
    def _positive(cls, resources: dict[str, float]) -> dict[str, float]:
        for name, amount in resources.items():
            if name in ("CPU", "GPU"):
                raise ValueError(f"'{name}': set num_cpus_per_worker / num_gpus_per_worker instead")
            if not amount > 0:
                raise ValueError(f"resource '{name}' must be > 0, got {amount}")
        return resources


class PlacementSection(Strict):
    """Placement per cluster; `reward` is every reward cluster's (domains.<d>.reward.placement overrides it),
    `scheduler` the per-domain schedulers' and the inference router's."""

    actor_train: PlacementConfig = PlacementConfig()
    actor_infer: PlacementConfig = PlacementConfig()
    reference: PlacementConfig = PlacementConfig()
    critic: PlacementConfig = PlacementConfig()
    reward: PlacementConfig = PlacementConfig()
    scheduler: PlacementConfig = PlacementConfig()

    @model_validator(mode="after")
    def _colocation(self) -> "PlacementSection":
        for name in ("actor_train", "critic", "reward", "scheduler"):
            if getattr(self, name).colocate_with is not None:
                raise _keyed(f"{name}.colocate_with", "only actor_infer and reference can colocate with actor_train")
        return self


class JudgeServerConfig(Strict):
    """The embedded judge server, started only when an LLM-judge reward has `base_url: local` (or none)."""

    model: str = "smollm2-135m-instruct"  # the embedded default, or any local HF model directory
    # True: vLLM's OpenAI server when vLLM is installed (falls back to the transformers server if it fails to
    # start); False: always rlvr's transformers server. Same answers (both float32 on CPU); on 2 CPU cores vLLM
    # starts in about a minute against ~15 s, then answers concurrent requests faster (continuous batching).
    prefer_vllm: bool = True
    threads: int | None = None  # CPU threads of the server, either backend (None: its default)
    # The judge's weights and compute, either backend. None: the backend's default (CPU: float32, so that both
    # give the same verdicts; GPU: the checkpoint's bfloat16). auto: bfloat16 where this host computes it
    # natively, else float32 (as generation.dtype). A bf16 judge changes some verdicts: on the 40 shipped judge
    # rows, 141 of 160 yes_no_logprobs verdicts as in float32, accuracy 56.9% against 53.8% (docs/precision.md).
    dtype: Literal["auto", "float32", "bfloat16"] | None = None
    vllm_args: list[str] = []  # extra flags of vLLM's server, e.g. ["--max-model-len", "8192"] (override defaults)
    startup_timeout_s: float = Field(600.0, gt=0)
    # Address to bind. Loopback: reward workers on this node only; "0.0.0.0" (or a private address) for reward
    # workers on other nodes, which get this node's address in the URL. No authentication: private networks only.
    host: str = "127.0.0.1"

    @field_validator("dtype")
    @classmethod
    def _resolve_auto(cls, value: str | None) -> str | None:
        if value != "auto":
            return value
        # The server computes on a GPU when the driver's node has one, which host_precision() counts as native.
        return auto_dtype(None)

    def backend_args(self) -> tuple[list[str], list[str]]:
        """(vLLM server flags, transformers server flags) that this section asks for; vllm_args come last in
        the vLLM flags, so that they win."""
        dtype = ["--dtype", self.dtype] if self.dtype else []
        threads = ["--threads", str(self.threads)] if self.threads else []
        return [*dtype, *self.vllm_args], [*threads, *dtype]


class SandboxServerConfig(Strict):
    """One shared sandbox server started by the driver, for code rewards with `sandbox: http, url: local`
    (without `url` each reward worker starts its own on loopback)."""

    host: str = "127.0.0.1"  # as judge_server.host
    max_parallel: int = Field(2, ge=1)  # programs the shared server runs at once
    backend: Literal["bwrap", "docker"] = "bwrap"  # isolation of the programs (sandbox/README.md)
    startup_timeout_s: float = Field(30.0, gt=0)  # until the server answers /health
