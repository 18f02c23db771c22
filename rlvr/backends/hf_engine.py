"""Generation engine on HF `generate`, behind the engine interface of DESIGN.md.

Callers ask for one prompt at a time (`await generate(prompt_ids, n, sampling)`), as the per-prompt scheduler
loop wants; the engine batches whatever requests are waiting into one `generate` call, because on CPU and GPU
alike a batch of 64 costs far less than 64 batches of one. The model runs in a single worker thread so that the
asyncio loop stays free to accept requests and aborts while a batch is being generated.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

from rlvr.backends.logprobs import token_logprobs
from rlvr.backends.seeded_sampling import request_seed, seeded_sampling_processors
from rlvr.data.types import Generation, SamplingParams

log = logging.getLogger(__name__)


@dataclass
class _Request:
    request_id: str
    prompt_ids: list[int]
    n: int
    sampling: SamplingParams
    future: asyncio.Future = field(repr=False)
    seed: int = 0  # sample i draws from seed + i (rlvr.backends.seeded_sampling)


class HFEngine:
    def __init__(self, model_path: str, dtype: str = "float32", max_batch_size: int = 64, seed: int = 0):
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
        self.model.eval()
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            self.eos_ids.add(self.tokenizer.eos_token_id)
        self.max_batch_size = max_batch_size
        self._version = 0
        self._pending: list[_Request] = []
        self._aborted: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._runner: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-engine")
        self._next_id = 0
        self._group = None  # weight-sync group, once joined
        self.stats = {"batches": 0, "sequences": 0, "tokens": 0, "busy_s": 0.0}
        self.seed = seed
        torch.manual_seed(seed)

    # ------------------------------------------------------------------ interface
    async def generate(self, prompt_ids: list[int], n: int, sampling: SamplingParams,
                       request_id: str | None = None) -> list[Generation]:
        self._ensure_runner()
        if request_id is None:
            self._next_id += 1
            request_id = f"req-{self._next_id}"
        req = _Request(request_id, list(prompt_ids), n, sampling, asyncio.get_running_loop().create_future(),
                       seed=request_seed(self.seed, request_id))
        self._pending.append(req)
        self._wake.set()
        return await req.future

    def abort(self, request_ids: list[str]) -> None:
        """Pending requests end at once with finish_reason 'abort'; a running batch finishes and its results for
        these ids are reported as aborted."""
        self._aborted.update(request_ids)
        keep = []
        for req in self._pending:
            if req.request_id in self._aborted:
                self._finish_aborted(req)
            else:
                keep.append(req)
        self._pending = keep

    async def load_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        # Runs on the model thread: never while a batch is being generated.
        await asyncio.get_running_loop().run_in_executor(self._thread, self._load, named_tensors, version)

    async def join_weight_group(self, address: tuple[str, int], rank_offset: int, world_size: int, backend: str,
                                timeout_s: float) -> None:
        """Joins actor_train's weight-sync group (rlvr/backends/weight_sync.py) as rank `rank_offset`."""
        from rlvr.backends.dist import node_ip
        from rlvr.backends.weight_sync import WeightGroup

        if self._group is not None:
            self._group.close()
        self._group = await asyncio.get_running_loop().run_in_executor(
            None, lambda: WeightGroup.join(address, rank_offset, world_size, backend, node_ip(), timeout_s))

    async def receive_weights(self, version: int) -> None:
        """The weights rank 0 broadcasts for `version`, loaded on the model thread (never during a batch)."""
        group = self._group

        def load() -> None:
            plan = group.plan_with(version, [name for name, _ in self.model.named_parameters()])
            self._load(dict(group.receive(plan)), version)

        await asyncio.get_running_loop().run_in_executor(self._thread, load)

    def policy_version(self) -> int:
        return self._version

    async def compute_logprobs(self, sequences: list[list[int]], temperature: float = 1.0) -> list[list[float]]:
        """Logprob of each token given its prefix (position 0 has none); used by the weight-sync parity check."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._logprobs, sequences, temperature)

    def rng_state(self) -> dict[str, int]:
        """Requests sample from seeds of their ids; what is left to restore is the count of requests that came
        without an id (they are named by it)."""
        return {"seed": self.seed, "counter": self._next_id}

    def set_rng_state(self, state: dict[str, int] | torch.Tensor) -> None:
        if isinstance(state, torch.Tensor):  # a checkpoint written before per-request seeds
            torch.set_rng_state(state)
            return
        self.seed, self._next_id = int(state.get("seed", self.seed)), int(state["counter"])

    # ------------------------------------------------------------------ batching loop
    def _ensure_runner(self) -> None:
        if self._runner is None or self._runner.done():
            self._wake = asyncio.Event()
            self._runner = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0.005)  # let requests that arrive together share a batch
            while self._pending:
                batch = self._take_batch()
                try:
                    results = await loop.run_in_executor(self._thread, self._generate_batch, batch)
                except Exception as err:  # a failed batch fails its requests, never the loop
                    log.exception("generation batch failed")
                    for req in batch:
                        if not req.future.done():
                            req.future.set_exception(err)
                    continue
                for req, gens in zip(batch, results):
                    if req.future.done():
                        continue
                    if req.request_id in self._aborted:
                        self._finish_aborted(req)
                    else:
                        req.future.set_result(gens)

    def _take_batch(self) -> list[_Request]:
        """Requests with the same sampling settings, up to max_batch_size sequences (at least one request)."""
        first = self._pending[0]
        batch, rest, size = [], [], 0
        for req in self._pending:
            if req.sampling == first.sampling and (not batch or size + req.n <= self.max_batch_size):
                batch.append(req)
                size += req.n
            else:
                rest.append(req)
        self._pending = rest
        return batch

    def _finish_aborted(self, req: _Request) -> None:
        self._aborted.discard(req.request_id)
        if not req.future.done():
            req.future.set_result([Generation([], "", "abort") for _ in range(req.n)])

    # ------------------------------------------------------------------ model thread
    @torch.no_grad()
    def _generate_batch(self, batch: list[_Request]) -> list[list[Generation]]:
        import time

        start = time.perf_counter()
        sampling = batch[0].sampling
        prompts = [req.prompt_ids for req in batch for _ in range(req.n)]
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):  # left padding: generation continues from the right edge
            input_ids[i, width - len(p):] = torch.tensor(p)
            attention[i, width - len(p):] = 1
        kwargs = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=self.pad_id,
                      eos_token_id=sorted(self.eos_ids) or None)
        if sampling.temperature > 0:  # each row from its own seed: the same tokens in any batch
            seeds = [req.seed + i for req in batch for i in range(req.n)]
            processors = seeded_sampling_processors(sampling.temperature, sampling.top_k, sampling.top_p, seeds)
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None,
                          logits_processor=LogitsProcessorList(processors))
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        out = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        responses = [self._cut(row[width:].tolist()) for row in out]
        logprobs = None
        if sampling.return_logprobs:
            temp = sampling.temperature if sampling.temperature > 0 else 1.0
            full = self._logprobs([p + r for p, (r, _) in zip(prompts, responses)], temp)
            logprobs = [lp[len(p):] for p, lp in zip(prompts, full)]
        gens = [
            Generation(ids, self.tokenizer.decode(ids, skip_special_tokens=True), reason,
                       logprobs[i] if logprobs else None, policy_version=self._version)
            for i, (ids, reason) in enumerate(responses)
        ]
        self.stats["batches"] += 1
        self.stats["sequences"] += len(gens)
        self.stats["tokens"] += sum(len(g.token_ids) for g in gens)
        self.stats["busy_s"] += time.perf_counter() - start
        grouped, i = [], 0
        for req in batch:
            grouped.append(gens[i : i + req.n])
            i += req.n
        return grouped

    def _cut(self, ids: list[int]) -> tuple[list[int], str]:
        """Response up to and including the first EOS ('stop'); without EOS it ran out of tokens ('length')."""
        for i, t in enumerate(ids):
            if t in self.eos_ids:
                return ids[: i + 1], "stop"
        return ids, "length"

    @torch.no_grad()
    def _logprobs(self, sequences: list[list[int]], temperature: float) -> list[list[float]]:
        width = max(len(s) for s in sequences)
        input_ids = torch.full((len(sequences), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, s in enumerate(sequences):
            input_ids[i, : len(s)] = torch.tensor(s)
            attention[i, : len(s)] = 1
        logits = self.model(input_ids=input_ids, attention_mask=attention).logits
        lp = token_logprobs(logits[:, :-1], input_ids[:, 1:], temperature)
        return [[0.0] + lp[i, : len(s) - 1].tolist() for i, s in enumerate(sequences)]

    def _load(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        params = dict(self.model.named_parameters())
        missing = [name for name in params if name not in named_tensors]
        if missing:
            raise KeyError(f"weight sync is missing {len(missing)} parameters, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(named_tensors[name].to(p.dtype))
        self._version = version  # set on the model thread: a batch reads the version of the weights it uses
