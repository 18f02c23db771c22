"""Training strategy on DeepSpeed ZeRO (stage 2 or 3): data parallel over `world_size` processes.

The update loop, the row split over ranks and the logprob pass are shared with `TorchStrategy`
(rlvr/backends/train_strategy.py: every micro-batch's loss is normalised by the GLOBAL token / sequence count of its
mini-batch). What DeepSpeed adds, and how it keeps the update independent of the split:
  * `engine.backward(loss, scale_wrt_gas=False)`: no 1/gradient_accumulation_steps factor (the number of
    micro-batches follows the mini-batch; the accumulation boundary is set by hand);
  * DeepSpeed *averages* gradients over the data-parallel ranks (divides the reduced sum by W), so each loss is
    multiplied by W before backward: (1/W) * sum_r W * g_r = sum_r g_r = the full mini-batch gradient.

Precision (from `cfg.bf16_autocast` and `cfg.uses_bf16_weights`, as TorchStrategy's):
  * bf16_autocast=False: fp32 weights and compute.
  * bf16_autocast=True, bf16_weights=True (default): DeepSpeed bf16, i.e. bf16 module weights and compute,
    fp32 master weights and optimizer states in the ZeRO optimizer, gradient accumulation in fp32. After each
    step the masters are rounded into the module by dithered rounding (rlvr/backends/bf16_rounding.py), over
    DeepSpeed's round-to-nearest copy, unless `cfg.bf16_rounding` is "nearest".
  * bf16_autocast=True, bf16_weights=False: fp32 weights with DeepSpeed's `torch_autocast` (bf16 compute), the
    numerics of TorchStrategy's autocast, fp32 communication; `forward_logprobs(autocast=False)` is then a full fp32
    forward (what the weight-sync check against an fp32 inference engine needs).

Device-agnostic: NCCL on CUDA, gloo on CPU (DS_ACCELERATOR=cpu is set when no CUDA device is visible).
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from rlvr.backends import dist as rdist
from rlvr.backends.bf16_rounding import dither_thresholds, dithered_bf16_into
from rlvr.backends.train_strategy import (CAUSAL_LM, ModelSpec, TrainStrategy, adamw, lr_lambda, rng_states,
                                          set_rng_states)
from rlvr.config.trainer import TrainerConfig
from rlvr.data.batch import TrainBatch

CKPT_TAG = "ckpt"


class DeepSpeedStrategy(TrainStrategy):
    def __init__(self, model_path: str, cfg: TrainerConfig, *, total_steps: int, seed: int, rank: int,
                 world_size: int, master_addr: str, master_port: int, zero_stage: int = 2,
                 trainable: bool = True, bf16_weights: bool = True, spec: ModelSpec = CAUSAL_LM):
        if zero_stage not in (2, 3):
            raise ValueError(f"zero_stage must be 2 or 3, got {zero_stage}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world_size {world_size}")
        deepspeed = rdist.import_deepspeed()

        self.cfg, self.rank, self.world_size, self.zero_stage, self.spec = cfg, rank, world_size, zero_stage, spec
        self.trainable = trainable
        # Ranks on one machine share its cores.
        torch.set_num_threads(cfg.torch_threads or max(1, (os.cpu_count() or 1) // world_size))
        torch.manual_seed(seed)
        rdist.init_process_group(rank, world_size, master_addr, master_port, use_deepspeed=True)
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")

        if not cfg.bf16_autocast:
            self.precision = "fp32"
        else:
            self.precision = "bf16" if bf16_weights else "autocast"
        self.ds_config = self._ds_config()
        model = self._load_model(model_path)
        self.model_config = model.config
        model.config.use_cache = False
        self.optimizer = self.scheduler = None
        if trainable:
            if cfg.gradient_checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            # A torch AdamW (the same update as TorchStrategy's, on any device); ZeRO wraps it and hands it the
            # fp32 partitions of the parameters (under LoRA, of the adapters only).
            trained = [p for p in model.parameters() if p.requires_grad]
            self.optimizer = adamw(trained, cfg)
            self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=self.optimizer,
                                                        config=self.ds_config)
            # The schedule is stepped once per train_step call (not per optimizer step), so DeepSpeed does not
            # own it; it acts on the param_groups that ZeRO re-pointed at its fp32 partitions.
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lr_lambda(cfg.lr_schedule, cfg.warmup_steps, total_steps))
        else:
            model.eval().requires_grad_(False)
            self.engine, _, _, _ = deepspeed.initialize(model=model, config=self.ds_config)
        self.module = self.engine.module
        self.thresholds: list[torch.Tensor] = []
        if trainable and self.precision == "bf16" and cfg.bf16_rounding == "dithered":
            # one threshold per element of this rank's fp32 partitions, from the seed and the rank
            generator = torch.Generator().manual_seed(seed * 65_536 + rank)
            self.thresholds = [dither_thresholds(master.shape, generator).to(master.device)
                               for master, _ in self._partitions()]

    # ------------------------------------------------------------------ config
    def _ds_config(self) -> dict:
        cfg = self.cfg
        # A frozen model has no gradients or optimizer states to shard: ZeRO-2 (which insists on an optimizer) is
        # then plain replication, stage 0; ZeRO-3 still shards the parameters.
        stage = self.zero_stage if self.trainable or self.zero_stage == 3 else 0
        zero: dict = {"stage": stage, "overlap_comm": self.device.type == "cuda",
                      "contiguous_gradients": True, "reduce_scatter": True, "reduce_bucket_size": 50_000_000,
                      "allgather_bucket_size": 50_000_000}
        if stage == 2:  # a load takes the masters from model/, not from the partitions' copy (`_weights_left_out`)
            zero.update(load_from_fp32_weights=False, elastic_checkpoint=False)
        if stage == 3:
            zero.update(stage3_param_persistence_threshold=10_000, stage3_prefetch_bucket_size=50_000_000,
                        stage3_gather_16bit_weights_on_model_save=False)
        ds: dict = {
            "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
            # Accumulation boundaries are set by hand (the number of micro-batches follows the mini-batch).
            "gradient_accumulation_steps": 1,
            "gradient_clipping": float(cfg.max_grad_norm or 0.0),
            "zero_optimization": zero,
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 2**31 - 1,
            "wall_clock_breakdown": False,
        }
        if self.precision == "bf16":
            ds["bf16"] = {"enabled": True}
            ds["data_types"] = {"grad_accum_dtype": "fp32"}
        elif self.precision == "autocast":
            # No "lower precision safe modules": by default DeepSpeed tags nn.Linear weights to be all-gathered
            # (ZeRO-3) and gradient-reduced in bf16, so even an autocast=False forward would see bf16 weights.
            ds["torch_autocast"] = {"enabled": True, "dtype": "bfloat16", "lower_precision_safe_modules": []}
        return ds

    def _policy_module(self) -> torch.nn.Module:
        return self.module

    # ------------------------------------------------------------------ TrainStrategy hooks
    def _set_train_mode(self, train: bool) -> None:
        self.module.train(train)

    def _forward(self, micro: TrainBatch, *, train: bool, autocast: bool = True, start: int = 0) -> torch.Tensor:
        if train:  # through the engine: its backward hooks and (precision "autocast") its autocast context
            return self._run_spec(self.engine, micro, start)
        # the module itself (ZeRO-3 gathers through module hooks), under our own autocast choice; with bf16
        # weights the forward is bf16 whatever `autocast` says (the module holds no fp32 weights)
        autocast_ctx = self.precision == "autocast" and autocast
        with torch.autocast(self.device.type, dtype=torch.bfloat16) if autocast_ctx else nullcontext():
            return self._run_spec(self.module, micro, start)

    def _begin_micro(self, first: bool, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)

    def _backward(self, loss: torch.Tensor) -> None:
        # x W: undo DeepSpeed's average over ranks (see the module docstring)
        self.engine.backward(loss * self.world_size, scale_wrt_gas=False)

    def _optimizer_step(self) -> float:
        self.engine.step()
        self._round_masters_into_module()
        self.engine.set_gradient_accumulation_boundary(None)  # back to DeepSpeed's own counting
        grad_norm = self.engine.get_global_grad_norm()  # global, before clipping, the same on every rank
        return float(grad_norm) if grad_norm is not None else float("nan")

    # ------------------------------------------------------------------ dithered rounding of the masters
    def _partitions(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(fp32 master partition, the bf16 flat partition the module's parameters view) of this rank, per
        parameter group: what ZeRO's own round-to-nearest copies after a step."""
        optimizer = self.engine.optimizer
        if self.zero_stage == 3:
            return [(master, low) for master, low in zip(optimizer.fp32_partitioned_groups_flat,
                                                         optimizer.fp16_partitioned_groups_flat) if low is not None]
        pairs = []
        for i, master in enumerate(optimizer.single_partition_of_fp32_groups):
            own = torch.distributed.get_rank(group=optimizer.real_dp_process_group[i])
            pairs.append((master, optimizer.parallel_partitioned_bit16_groups[i][own]))
        return pairs

    @torch.no_grad()
    def _round_masters_into_module(self) -> None:
        """Each rank rounds its partitions, then the ranks all-gather what DeepSpeed's own step gathers: under
        ZeRO-2 the module's bf16 weights, under ZeRO-3 its persistent parameters (those under
        stage3_param_persistence_threshold stay gathered; the rest are gathered from the partitions at each
        forward)."""
        if not self.thresholds:
            return
        optimizer = self.engine.optimizer
        if self.zero_stage == 3:  # as its step does: release gathered copies, so that the gather below refreshes them
            optimizer._partition_all_parameters()
        for (master, low), thresholds in zip(self._partitions(), self.thresholds):
            dithered_bf16_into(low, master, thresholds)
        if self.zero_stage == 3:
            if optimizer.persistent_parameters:
                optimizer.persistent_parameters[0].all_gather(optimizer.persistent_parameters)
            optimizer.invalidate_secondary_tensor()
        else:
            from deepspeed.runtime.zero.stage_1_and_2 import all_gather_dp_groups

            all_gather_dp_groups(groups_flat=optimizer.bit16_groups_flat,
                                 partitioned_param_groups=optimizer.parallel_partitioned_bit16_groups,
                                 dp_process_group=optimizer.real_dp_process_group,
                                 start_alignment_factor=optimizer.nccl_start_alignment_factor,
                                 allgather_bucket_size=optimizer.allgather_bucket_size)

    # ------------------------------------------------------------------ weights
    def _named(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Full, unsharded tensors on rank 0 (other ranks return {}). Collective. Asked for the module's own dtype
        (bf16 weights -> bfloat16, fp32 weights -> any) the module's tensors are exact (DeepSpeed rounds the fp32
        masters into them after each step); asked for float32 while the module holds bf16, the fp32 masters are
        assembled from the optimizer's partitions (frozen LoRA base weights have none)."""
        from deepspeed.utils import safe_get_full_fp32_param

        use_masters = self.trainable and self.precision == "bf16" and dtype != torch.bfloat16
        out: dict[str, torch.Tensor] = {}
        for name, p in self.module.named_parameters():
            if use_masters and p.requires_grad:
                full = safe_get_full_fp32_param(p)
            elif self.zero_stage == 3:
                full = self._gathered(p)
            else:
                full = p.detach()
            if self.rank == 0:
                out[name] = full.detach().to("cpu", dtype).clone()
        return out

    def _gathered(self, p: torch.nn.Parameter) -> torch.Tensor:
        import deepspeed

        with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
            return p.detach().clone()

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: str) -> None:
        """Collective. <dir>/deepspeed: DeepSpeed's checkpoint (module and optimizer states, one file per rank;
        under ZeRO-2 without any weights: `_weights_left_out`); <dir>/train_state_rank<r>.pt: LR schedule and RNG
        states; <dir>/model: a plain HF model (config + safetensors, fp32 masters) written by rank 0, or under LoRA
        <dir>/adapter: the adapters only (rlvr/backends/lora.py)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        if self.trainable:
            with self._weights_left_out():
                # ZeRO-2 would also save the frozen parameters (a LoRA base: the run's model.path, as loaded)
                self.engine.save_checkpoint(str(path / "deepspeed"), tag=CKPT_TAG, save_latest=True,
                                            exclude_frozen_parameters=self.zero_stage == 2)
        torch.save({"scheduler": self.scheduler.state_dict() if self.scheduler else None, "rng": rng_states(),
                    "world_size": self.world_size, "zero_stage": self.zero_stage},
                   path / f"train_state_rank{self.rank}.pt")
        weights = self._named(torch.float32)
        if self.rank == 0:
            self._write_weights(weights, self.model_config, path)
        rdist.barrier()

    @contextmanager
    def _weights_left_out(self):
        """The weights are in model/ (the fp32 masters as a plain model) and nowhere else: under ZeRO-2 DeepSpeed's
        model-states file is saved without the module's weights, and its optimizer-states files without their
        fp32 partitions of the masters (each 538 MB for the default model); `load` takes both from model/.
        ZeRO-3's module holds only partition placeholders and its optimizer its own layout: left as they are."""
        if self.zero_stage == 3:
            yield
            return
        from deepspeed.checkpoint.constants import SINGLE_PARTITION_OF_FP32_GROUPS

        optimizer = self.engine.optimizer
        full_state_dict = optimizer.state_dict

        def without_masters() -> dict:
            state = full_state_dict()
            del state[SINGLE_PARTITION_OF_FP32_GROUPS]  # a load that asked for them would fail, not skip them
            return state

        self.engine.module_state_dict = lambda *args, **kwargs: {}  # read by save_checkpoint for the file
        optimizer.state_dict = without_masters
        try:
            yield
        finally:
            del self.engine.module_state_dict  # the methods again
            del optimizer.state_dict

    def _module_from_export(self, exact: dict[str, torch.Tensor] | None):
        """The module's weights for a ZeRO-2 load: the checkpoint's plain export of the fp32 masters (under LoRA:
        its adapters; the frozen base is as loaded), cast to the module's dtype as DeepSpeed casts the masters
        after a step (ZeRO-2 copies only the masters back)."""
        if exact is None:
            return None

        def load(src, dst) -> None:
            with torch.no_grad():
                dst.load_state_dict(exact, strict=self.lora is None)
        return load

    def _masters_from_export(self, exact: dict[str, torch.Tensor] | None) -> None:
        """ZeRO-2 with bf16 weights: DeepSpeed refilled the fp32 masters from the bf16 module (their partitions are
        not saved); model/ holds them exactly. (fp32 weights: the module is the masters already.)"""
        if exact is None or self.precision != "bf16":
            return
        from deepspeed.utils import safe_set_full_fp32_param

        for name, p in self.module.named_parameters():
            if p.requires_grad:
                safe_set_full_fp32_param(p, exact[name].to(p.device))

    def load(self, directory: str) -> None:
        """Collective; the checkpoint must come from the same world size and ZeRO stage."""
        path = Path(directory)
        state_file = path / f"train_state_rank{self.rank}.pt"
        if not state_file.exists():
            raise FileNotFoundError(f"{state_file}: no state for rank {self.rank} (saved with another world size?)")
        state = torch.load(state_file, weights_only=False)
        if (state["world_size"], state["zero_stage"]) != (self.world_size, self.zero_stage):
            raise ValueError(f"{directory}: saved with world_size={state['world_size']}, zero_stage="
                             f"{state['zero_stage']}; this strategy has {self.world_size}, {self.zero_stage}")
        if self.trainable:
            if not list((path / "deepspeed").glob(f"{CKPT_TAG}/*optim_states.pt")):
                raise FileNotFoundError(f"{path}: no DeepSpeed optimizer state to resume from (dropped by "
                                        "run.keep_optimizer=last?)")
            # ZeRO-2: the weights come from model/ (or adapter/), read once for the module and the masters
            exact = self._read_weights(path) if self.zero_stage == 2 else None
            load_path, _ = self.engine.load_checkpoint(str(path / "deepspeed"), tag=CKPT_TAG,
                                                       load_optimizer_states=True, load_lr_scheduler_states=False,
                                                       custom_load_fn=self._module_from_export(exact))
            if load_path is None:
                raise FileNotFoundError(f"{path / 'deepspeed'}: no DeepSpeed checkpoint tagged {CKPT_TAG!r}")
            self._masters_from_export(exact)
            self._round_masters_into_module()
            self.scheduler.load_state_dict(state["scheduler"])
        set_rng_states(state["rng"])


__all__ = ["DeepSpeedStrategy"]
