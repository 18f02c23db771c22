"""Generation engine on vLLM (V1 `AsyncLLM`), behind the same interface as `HFEngine`.

Callers ask for one prompt at a time (`await generate(prompt_ids, n, sampling, request_id)`); vLLM batches every
request in flight itself (continuous batching). What this module adds on top of vLLM:

- Behaviour logprobs equal to the trainer's `log_softmax(logits / T)` (`rlvr.backends.logprobs`). vLLM's
  `processed_logprobs` are taken after top-k / top-p truncation; a wrapper around the worker's sampler
  (`_WorkerExtension.rlvr_setup`) returns them before the truncation instead. Greedy requests: T = 1.
- Weights updated in place, no restart: `load_weights` writes the trainer's tensors to one safetensors file in
  shared memory and the worker runs vLLM's own reload (`Worker.reload_weights`: fused qkv / gate_up, tied
  embeddings, and the CPU backend's prepacked weight copies, which a plain `param.copy_()` would miss). The prefix
  cache is reset afterwards. (The model runs in a separate process; `collective_rpc` does not carry tensors
  reliably, hence the file.)
- One policy version per response: `load_weights` (and `compute_logprobs` at T != 1) waits for the requests inside
  the engine to finish and holds new ones back, as HFEngine's single model thread does.
- `abort(request_ids)` ends those `generate` calls at once with finish_reason "abort" and cancels the vLLM requests
  (their KV blocks are freed).
- Per-request seeds from (engine seed, request id) (`rlvr.backends.seeded_sampling`): a request samples the same
  tokens whatever else is in flight, in any arrival order (up to float rounding, which batch composition can
  change: docs/lifecycle.md, "The same run twice"). `rng_state()` is the count of requests that came without an
  id. Chunked prefill is off: vLLM 0.32's CPU worker crashes on a seeded request whose prefill is split ("CPU
  Generator does not use offset"), and whole prompts are what a short-prompt RL workload sends anyway.

vLLM starts its engine processes with `spawn`: a script that builds this engine must guard its entry point with
`if __name__ == "__main__":`.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from typing import Any

import torch

from rlvr.backends.seeded_sampling import request_seed
from rlvr.data.types import Generation, SamplingParams
from rlvr.lifecycle.guardian import child_pids, guard_path, guard_process
from rlvr.lifecycle.run_tmpdir import tmpdir_env

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_S = 1.0  # how long shutdown() lets the EngineCore end on its own before vLLM kills it


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # ImportError, or a broken install (e.g. a torchvision built for another torch)
        return False
    return True


class VLLMEngine:
    def __init__(self, model_path: str, dtype: str = "float32", max_batch_size: int = 64, seed: int = 0, *,
                 max_model_len: int = 1024, kv_cache_gib: float = 1.0, gpu_memory_utilization: float = 0.5,
                 enforce_eager: bool | None = None, omp_threads: int | None = None, tensor_parallel_size: int = 1,
                 **engine_kwargs: Any):
        """`kv_cache_gib` sizes the KV cache on CPU, `gpu_memory_utilization` on GPU. `omp_threads`: the model
        worker's OpenMP threads (None: all cores). `enforce_eager` None: True on CPU (inductor compilation costs
        minutes of start-up for little gain on small models). `tensor_parallel_size` > 1: that many model worker
        processes beside this one (vLLM's multiprocessing executor, on the GPUs this process sees), never Ray's
        executor, which would ask the Ray cluster for GPUs of its own. Other keywords go to `AsyncEngineArgs`."""
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # no core pinning on a box shared with training
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        from vllm import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        on_cpu = current_platform.is_cpu()
        args = dict(model=model_path, dtype=dtype, seed=seed, max_model_len=max_model_len,
                    max_num_seqs=max_batch_size, max_num_batched_tokens=max(max_model_len, 4096),
                    enable_chunked_prefill=False, logprobs_mode="processed_logprobs",
                    worker_extension_cls=f"{__name__}._WorkerExtension", disable_log_stats=True,
                    enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
                    tensor_parallel_size=tensor_parallel_size)
        if tensor_parallel_size > 1:
            args["distributed_executor_backend"] = "mp"
        if on_cpu:
            args["kv_cache_memory_bytes"] = int(kv_cache_gib * (1 << 30))
        else:
            args["gpu_memory_utilization"] = gpu_memory_utilization
        args.update(engine_kwargs)
        before = set(child_pids())
        # vLLM binds its ZeroMQ sockets to files under VLLM_RPC_BASE_PATH (default /tmp) and leaves them there
        # when it ends: a directory of this engine's own, removed on shutdown or with this process.
        self._ipc_dir = tempfile.mkdtemp(prefix=f"rlvr-vllm-ipc-{os.getpid()}-")
        guard_path(self._ipc_dir)
        one_worker = (args["tensor_parallel_size"] == args.get("pipeline_parallel_size", 1) == 1
                      and "distributed_executor_backend" not in args)
        env = engine_env(self._ipc_dir, omp_threads, args["enforce_eager"], one_worker)
        with _environ(env):  # read here and by the spawned processes
            self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
        # The engine's processes (EngineCore, its workers) and their shared-memory queues end with this process,
        # also when it is killed (ray.kill, a SIGKILLed driver): vLLM itself only stops them on shutdown().
        for pid in set(child_pids()) - before:
            guard_process(pid)
        guard_path(_weights_pattern())
        self.max_model_len = max_model_len
        self.eos_ids = _eos_ids(model_path)
        self._expected = _checkpoint_names(model_path)
        # cached_prompt_tokens: prompt tokens served by the prefix cache (a group's shared prompt, an episode's
        # previous turns)
        self.stats = {"requests": 0, "sequences": 0, "tokens": 0, "prompt_tokens": 0, "cached_prompt_tokens": 0,
                      "aborted": 0, "busy_s": 0.0}
        self._seed = seed
        self._next_id = 0
        self._version = 0
        self._inflight: dict[str, asyncio.Future] = {}  # request id -> its abort signal
        self._gate = _Gate(self.stats)
        self._setup: asyncio.Future | None = None

    # ------------------------------------------------------------------ interface
    async def generate(self, prompt_ids: list[int], n: int, sampling: SamplingParams,
                       request_id: str | None = None) -> list[Generation]:
        if request_id is None:
            self._next_id += 1
            request_id = f"req-{self._next_id}"
        if request_id in self._inflight:
            raise ValueError(f"request id {request_id!r} is already in flight")
        abort = asyncio.get_running_loop().create_future()
        self._inflight[request_id] = abort
        try:
            while not self._gate.open.is_set():  # a weight update is waiting or running
                if not (await _race(abort, self._gate.open.wait()))[0]:
                    return self._aborted(n)
            with self._gate.shared():  # entered with no await since the gate was seen open
                await self._ensure_setup()
                version = self._version
                finished, final = await _race(abort, self._request(request_id, prompt_ids, self._params(n, sampling, request_id)))
        finally:
            self._inflight.pop(request_id, None)
        if not finished or final is None:
            return self._aborted(n)
        return self._generations(final, n, len(prompt_ids), version)

    def abort(self, request_ids: list[str]) -> None:
        """In-flight requests among these end at once with finish_reason 'abort'; other ids are ignored."""
        for request_id in request_ids:
            signal = self._inflight.get(request_id)
            if signal is not None and not signal.done():
                signal.set_result(None)

    async def load_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        """The trainer's `named_parameters()` (HF checkpoint names; `lm_head.weight` is optional with tied
        embeddings) into the running engine. A missing name raises KeyError before anything is touched."""
        missing = [name for name in self._expected if name not in named_tensors]
        if missing:
            raise KeyError(f"weight sync is missing {len(missing)} parameters, e.g. {missing[:3]}")
        tensors = {name: named_tensors[name] for name in self._expected}
        await self._ensure_setup()
        async with self._gate.exclusive():
            path = await asyncio.get_running_loop().run_in_executor(None, _write_shared, tensors)
            try:
                loaded = await self.llm.collective_rpc("rlvr_load_weights", args=(path,))
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            if any(count != len(tensors) for count in loaded):
                raise RuntimeError(f"weight sync: the workers read {loaded} of {len(tensors)} tensors")
            await self.llm.reset_prefix_cache()  # its KV blocks were computed with the old weights
            self._version = version

    async def join_weight_group(self, address: tuple[str, int], rank_offset: int, world_size: int, backend: str,
                                timeout_s: float) -> None:
        """Every model worker process joins actor_train's weight-sync group (rlvr/backends/weight_sync.py), as
        rank `rank_offset` + its tensor-parallel rank: the group ends where the weights live."""
        from rlvr.backends.dist import node_ip

        await self._ensure_setup()
        await self.llm.collective_rpc("rlvr_join_weight_group",
                                      args=(tuple(address), rank_offset, world_size, backend, timeout_s, node_ip()))

    async def receive_weights(self, version: int) -> None:
        """The weights actor_train rank 0 broadcasts for `version`, loaded in place by every model worker (as
        `load_weights`, without the file); a name the engine needs but the sender lacks raises KeyError once the
        broadcast is drained, before anything is loaded."""
        await self._ensure_setup()
        async with self._gate.exclusive():
            loaded = await self.llm.collective_rpc("rlvr_receive_weights", args=(version, self._expected))
            if any(count != len(self._expected) for count in loaded):
                raise RuntimeError(f"weight sync: the workers read {loaded} of {len(self._expected)} tensors")
            await self.llm.reset_prefix_cache()
            self._version = version

    def policy_version(self) -> int:
        return self._version

    async def compute_logprobs(self, sequences: list[list[int]], temperature: float = 1.0) -> list[list[float]]:
        """Logprob of each token given its prefix (position 0 has none: 0.0), as `log_softmax(logits / T)`.

        vLLM's prompt logprobs take no temperature: T != 1 runs exclusively, with the model's logit scale set to
        1/T in the worker meanwhile. Sequences must be shorter than `max_model_len` (vLLM generates one token)."""
        if not sequences:
            return []
        if max(len(s) for s in sequences) >= self.max_model_len:
            raise ValueError(f"compute_logprobs: a sequence of {max(len(s) for s in sequences)} tokens; "
                             f"max_model_len is {self.max_model_len} (sequences must be shorter by one)")
        if temperature <= 0:
            raise ValueError("compute_logprobs needs temperature > 0")
        await self._ensure_setup()
        if temperature == 1.0:
            while not self._gate.open.is_set():
                await self._gate.open.wait()
            with self._gate.shared():
                return list(await asyncio.gather(*map(self._prompt_logprobs, sequences)))
        async with self._gate.exclusive():
            await self.llm.collective_rpc("rlvr_set_logit_scale", args=(1.0 / temperature,))
            try:
                return list(await asyncio.gather(*map(self._prompt_logprobs, sequences)))
            finally:
                await self.llm.collective_rpc("rlvr_set_logit_scale", args=(1.0,))

    def rng_state(self) -> dict[str, int]:
        """Requests sample from seeds of their ids; what is left to restore is the count of requests that came
        without an id (they are named by it)."""
        return {"seed": self._seed, "counter": self._next_id}

    def set_rng_state(self, state: dict[str, int]) -> None:
        if not isinstance(state, dict) or "counter" not in state:
            raise TypeError(f"VLLMEngine.set_rng_state expects the dict from rng_state(), got {type(state)}")
        self._seed, self._next_id = int(state.get("seed", self._seed)), int(state["counter"])

    def shutdown(self) -> None:
        """Stops the engine processes (also done when the engine is garbage collected). vLLM sends its EngineCore
        SIGTERM and waits for it, 5 s by default, then kills it; on this CPU build the core never ended within
        those 5 s (measured in every run of the main job and standalone: `force killing remaining process
        EngineCore` after 5.0 s), so the wait is cut short: what the kill leaves is removed here and by the
        guardian either way."""
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.shutdown(timeout=SHUTDOWN_GRACE_S)
            shutil.rmtree(self._ipc_dir, ignore_errors=True)

    # ------------------------------------------------------------------ requests
    async def _request(self, request_id: str, prompt_ids: list[int], params):
        from vllm.inputs import TokensPrompt

        final = None
        async for out in self.llm.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), params,
                                           request_id=request_id):
            final = out
        return final

    def _params(self, n: int, sampling: SamplingParams, request_id: str):
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind

        kwargs = dict(max_tokens=sampling.max_new_tokens, stop_token_ids=sorted(self.eos_ids),
                      logprobs=0 if sampling.return_logprobs else None, output_kind=RequestOutputKind.FINAL_ONLY)
        if sampling.temperature <= 0:  # greedy: the n responses are one
            return VSamplingParams(n=1, temperature=0.0, **kwargs)
        seed = request_seed(self._seed, request_id)  # vLLM seeds sample i of n with seed + i
        return VSamplingParams(n=n, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                               seed=seed, **kwargs)

    def _generations(self, final, n: int, prompt_len: int, version: int) -> list[Generation]:
        gens = []
        for out in sorted(final.outputs, key=lambda o: o.index):
            if out.finish_reason in (None, "abort"):
                gens.append(Generation([], "", "abort"))
                continue
            ids = list(out.token_ids)
            logprobs = None if out.logprobs is None else [float(step[t].logprob) for t, step in zip(ids, out.logprobs)]
            gens.append(Generation(ids, out.text, out.finish_reason, logprobs, policy_version=version))
        if len(gens) not in (1, n):
            raise RuntimeError(f"vLLM returned {len(gens)} completions for n={n}")
        gens += [Generation(list(gens[0].token_ids), gens[0].text, gens[0].finish_reason,
                            None if gens[0].logprobs is None else list(gens[0].logprobs), version)
                 for _ in range(n - len(gens))]  # greedy: copies of the one response
        self.stats["requests"] += 1
        self.stats["sequences"] += n
        self.stats["tokens"] += sum(len(g.token_ids) for g in gens)
        self.stats["prompt_tokens"] += prompt_len
        self.stats["cached_prompt_tokens"] += getattr(final, "num_cached_tokens", None) or 0
        return gens

    def _aborted(self, n: int) -> list[Generation]:
        self.stats["aborted"] += 1
        return [Generation([], "", "abort") for _ in range(n)]

    async def _prompt_logprobs(self, sequence: list[int]) -> list[float]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = VSamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False,
                                 output_kind=RequestOutputKind.FINAL_ONLY)
        final = await self._request(f"logprobs-{uuid.uuid4().hex}", sequence, params)
        return [0.0] + [float(step[t].logprob) for t, step in zip(sequence[1:], final.prompt_logprobs[1:])]

    async def _ensure_setup(self) -> None:
        """Once, before the first request (it needs the event loop, hence not in __init__)."""
        if self._setup is None:
            self._setup = asyncio.ensure_future(self._run_setup())
        await asyncio.shield(self._setup)

    async def _run_setup(self) -> None:
        if not all(await self.llm.collective_rpc("rlvr_setup")):
            log.warning("vLLM's sampler layout is not the known one: with top-k / top-p, behaviour logprobs are "
                        "those of the truncated distribution")


class _Gate:
    """Requests share the engine; an exclusive section (weight update) waits for them to leave and holds new ones
    back (`open` is cleared from the moment it waits). Adds the time the engine had work to `stats["busy_s"]`."""

    def __init__(self, stats: dict[str, float]):
        self.active, self.stats, self._since = 0, stats, 0.0
        self.open, self.idle, self.lock = asyncio.Event(), asyncio.Event(), asyncio.Lock()
        self.open.set()
        self.idle.set()

    @contextlib.contextmanager
    def shared(self):
        if self.active == 0:
            self._since = time.perf_counter()
            self.idle.clear()
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            if self.active == 0:
                self.stats["busy_s"] += time.perf_counter() - self._since
                self.idle.set()

    @contextlib.asynccontextmanager
    async def exclusive(self):
        async with self.lock:
            self.open.clear()
            try:
                await self.idle.wait()
                yield
            finally:
                self.open.set()


# ---------------------------------------------------------------------- helpers (driver side)
def engine_env(ipc_dir: str, omp_threads: int | None, eager: bool, one_worker: bool = True) -> dict[str, str]:
    """Environment of the engine's spawned processes (a value the user set wins in each case but TMPDIR).

    An eager engine gets TORCH_COMPILE_DISABLE: vLLM's sampler still wraps its logprob-rank count in
    `torch.compile`, and the first request asking for logprobs compiled it into C++ kernels, 15 s of step 0's first
    weight sync on a fresh machine (an empty inductor cache in /tmp); eager, that count is one comparison over the
    vocabulary.

    An engine with one model worker (no tensor parallelism) gets VLLM_ENABLE_V1_MULTIPROCESSING=0, which on CPU
    keeps vLLM's in-process executor: the model runs inside the EngineCore process instead of a third process fed
    through a shared-memory queue (vLLM's CPU platform picks that multiprocessing executor whenever the switch is
    on, to set the worker's OpenMP binding, which rlvr turns off: VLLM_CPU_OMP_THREADS_BIND=nobind). On the AMX
    Xeon, bf16, 8 prompts x 4 samples x 96 tokens: start-up 11.0 s against 17-18 s, generation 2.9-3.3 s against
    4.1-6.6 s (the queue's polling shares two cores with the model). AsyncLLM still runs its EngineCore in a
    process of its own, and on GPU one worker already runs in it.

    The engine's temp dir is `ipc_dir` too. Its workers rendezvous through a torch FileStore (`vllm_dist_<uuid>`)
    that only a clean exit removes, and every engine ends killed with its Ray actor: the file goes with that
    directory instead of staying in /tmp, one per engine."""
    env = {"VLLM_RPC_BASE_PATH": ipc_dir, **tmpdir_env(ipc_dir)}
    if omp_threads:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    if eager:
        env["TORCH_COMPILE_DISABLE"] = os.environ.get("TORCH_COMPILE_DISABLE", "1")
    if one_worker:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return env


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    old = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def _race(abort: asyncio.Future, coro) -> tuple[bool, Any]:
    """(True, result) if `coro` finishes first; (False, None) if `abort` is set first, and `coro` is cancelled (a
    cancelled vLLM stream aborts its request in the engine). Cancelling the caller cancels `coro` too."""
    task = asyncio.ensure_future(coro)
    try:
        await asyncio.wait({task, abort}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task.done():
        return True, task.result()
    task.cancel()
    try:
        return True, await task  # it finished before the cancellation landed
    except asyncio.CancelledError:
        return False, None


def _eos_ids(model_path: str) -> set[int]:
    """The ids HFEngine stops at: the generation config's eos_token_id (int or list) and the tokenizer's."""
    from transformers import AutoTokenizer, GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:  # no generation_config.json
        eos = None
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    tokenizer_eos = AutoTokenizer.from_pretrained(model_path).eos_token_id
    return ids | ({tokenizer_eos} if tokenizer_eos is not None else set())


def _checkpoint_names(model_path: str) -> list[str]:
    """Tensor names of the HF checkpoint (the trainer's named_parameters), without lm_head.weight when the
    embeddings are tied (the trainer then has none)."""
    from safetensors import safe_open

    names: list[str] = []
    for file in sorted(glob.glob(os.path.join(model_path, "*.safetensors"))):
        with safe_open(file, "pt") as f:
            names.extend(f.keys())
    with open(os.path.join(model_path, "config.json")) as f:
        config = json.load(f)
    if config.get("tie_word_embeddings", config.get("text_config", {}).get("tie_word_embeddings", False)):
        names = [name for name in names if name != "lm_head.weight"]
    return names


def _weights_dir() -> str:
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _weights_pattern() -> str:
    """This process's weight files (named by its pid, so that its guardian removes them if it is killed)."""
    return os.path.join(_weights_dir(), f"rlvr-weights-{os.getpid()}-*")


def _write_shared(tensors: dict[str, torch.Tensor]) -> str:
    """One safetensors file in shared memory (tmpfs) that the worker process reads back with mmap."""
    from safetensors.torch import save_file

    fd, path = tempfile.mkstemp(prefix=os.path.basename(_weights_pattern()).rstrip("*"), suffix=".safetensors",
                                dir=_weights_dir())
    os.close(fd)
    seen: set[int] = set()
    flat = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach().to("cpu").contiguous()
        if tensor.untyped_storage().data_ptr() in seen:  # safetensors refuses shared storage
            tensor = tensor.clone()
        seen.add(tensor.untyped_storage().data_ptr())
        flat[name] = tensor
    try:
        save_file(flat, path)
    except BaseException:
        os.unlink(path)
        raise
    return path


# ---------------------------------------------------------------------- worker side
class _WorkerExtension:
    """Mixed into vLLM's worker class (`worker_extension_cls`); its methods run in the worker process, called by
    name through `collective_rpc`."""

    def rlvr_load_weights(self, path: str) -> int:
        from safetensors import safe_open

        def weights():
            with safe_open(path, "pt") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)

        return self._rlvr_reload(weights())

    def rlvr_join_weight_group(self, address: tuple[str, int], rank_offset: int, world_size: int, backend: str,
                               timeout_s: float, host: str) -> int:
        from vllm.distributed import get_tensor_model_parallel_rank

        from rlvr.backends.weight_sync import WeightGroup

        rank = rank_offset + get_tensor_model_parallel_rank()
        if getattr(self, "_rlvr_group", None) is not None:
            self._rlvr_group.close()
        self._rlvr_group = WeightGroup.join(address, rank, world_size, backend, host, timeout_s)
        return rank

    def rlvr_receive_weights(self, version: int, expected: list[str]) -> int:
        group = self._rlvr_group
        plan = group.plan_with(version, expected)
        wanted = set(expected)
        stream = group.receive(plan)
        count = self._rlvr_reload((name, t) for name, t in stream if name in wanted)
        for _ in stream:  # buckets the loader did not ask for: the sender waits until every rank has them
            pass
        return count

    def _rlvr_reload(self, named_tensors) -> int:
        """vLLM's in-place reload from (name, tensor) pairs in checkpoint format; returns how many were read."""
        from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

        count = 0

        def weights():
            nonlocal count
            for name, tensor in named_tensors:
                count += 1
                yield name, tensor

        # vLLM's in-place reload: model.load_weights plus the post-load processing (CPU weight prepacking). Its
        # "Failed to load weights" warnings for the rotary cache and a tied lm_head are expected: the caller
        # checks the count of tensors read instead.
        layerwise = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        level = layerwise.level
        layerwise.setLevel(logging.ERROR)
        try:
            self.reload_weights(weights_iterator=weights(), is_checkpoint_format=True)
        finally:
            layerwise.setLevel(level)
        # A tied lm_head gets no tensor of its own, so the reload skips its post-load processing and, on CPU, its
        # prepacked GEMM copy would keep the old embedding: redo it for every unquantized embedding-like module.
        for module in self.model_runner.get_model().modules():
            method = getattr(module, "quant_method", None)
            if isinstance(method, UnquantizedEmbeddingMethod):
                method.process_weights_after_loading(module)
        return count

    def rlvr_set_logit_scale(self, factor: float) -> None:
        processor = self.model_runner.get_model().logits_processor
        if not hasattr(self, "_rlvr_base_scale"):
            self._rlvr_base_scale = processor.scale
        processor.scale = self._rlvr_base_scale * factor

    def rlvr_setup(self) -> bool:
        """Behaviour logprobs before top-k / top-p truncation: vLLM's sampler divides the logits by T, then its
        top-k/top-p sampler truncates them and (processed_logprobs) returns the log-softmax of the truncated
        logits. The wrapper returns the log-softmax of the tempered logits it receives instead. False if the
        sampler is not laid out as expected (vLLM's truncated logprobs stay)."""
        runner = getattr(self, "model_runner", None)
        inner = getattr(getattr(runner, "sampler", None), "topk_topp_sampler", None)
        if inner is None or getattr(runner.sampler, "logprobs_mode", None) != "processed_logprobs":
            return False
        if not getattr(inner, "_rlvr_patched", False):
            original = inner.forward

            def forward(logits, generators, k, p):
                logprobs = logits.log_softmax(dim=-1, dtype=torch.float32)  # first: the sampler edits in place
                sampled, _ = original(logits, generators, k, p)
                return sampled, logprobs

            inner.logprobs_mode = "raw_logprobs"  # the original no longer computes its (truncated) copy
            inner.forward = forward
            inner._rlvr_patched = True
        return True


__all__ = ["VLLMEngine", "engine_env", "vllm_available"]
