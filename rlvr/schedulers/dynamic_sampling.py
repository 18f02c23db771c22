"""DynamicSamplingScheduler: one async Ray actor per domain.

Per prompt: generate `group_size` responses on an actor_infer worker (which admits a capped number of requests
across all domains), send each finished sample to the domain's reward cluster at once, and release the group only
when all its rewards are in. Then the group filters decide (DAPO dynamic sampling):

- a kept group counts toward the step's quota; a dropped one is counted by reason and replaced at once by a new
  prompt, one refill round deeper; past `max_refill_rounds` the step goes on with what it has and says so;
- once the quota is met, requests still generating are aborted, and groups already being scored finish in the
  background and land in the carry-over buffer for the next step (at most `max_carry_staleness` steps old),
  instead of being thrown away.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rlvr.algorithms.reward_shaping import overlong_penalty
from rlvr.backends.hf_engine import SamplingParams
from rlvr.config import Config
from rlvr.data.types import Group, Prompt, Sample
from rlvr.schedulers.group_filters import FilterSettings, drop_reason, load_user_filter
from rlvr.workers.rewards.result import STATUSES, RewardResult

log = logging.getLogger(__name__)


def sampling_from_config(cfg: Config, validation: bool = False) -> SamplingParams:
    gen = cfg.generation
    if not validation:
        return SamplingParams(gen.max_new_tokens, gen.temperature, gen.top_p, gen.top_k, gen.return_logprobs)
    val = cfg.validation
    return SamplingParams(val.max_new_tokens or gen.max_new_tokens, val.temperature, gen.top_p, gen.top_k, False)


def sample_metrics(prefix: str, samples: list[Sample]) -> dict[str, float]:
    """Reward, correctness, length and status counts of scored samples, under `prefix` (e.g. 'math/')."""
    statuses = Counter(s.reward.status if s.reward else "error" for s in samples)
    ok = [s for s in samples if s.scored_ok]
    out: dict[str, float] = {f"{prefix}reward/status/{st}": float(statuses.get(st, 0)) for st in STATUSES}
    lengths = [len(s.response_ids) for s in samples]
    if lengths:
        out[f"{prefix}response_length/mean"] = float(np.mean(lengths))
        out[f"{prefix}response_length/max"] = float(max(lengths))
        out[f"{prefix}response_length/clip_frac"] = sum(s.finish_reason == "length" for s in samples) / len(samples)
    if ok:
        out[f"{prefix}reward/mean"] = float(np.mean([s.reward.reward for s in ok]))
        judged = [s.reward.correct for s in ok if s.reward.correct is not None]
        if judged:
            out[f"{prefix}correct/mean"] = float(np.mean(judged))
    return out


@dataclass
class Carried:
    group: Group
    born_step: int  # the step whose policy generated it


@dataclass
class StepRun:
    """One step's collection. With one-step off-policy training two of them overlap, so nothing of a step
    lives on the scheduler itself: counters, kept groups and the generation barrier are here."""

    step: int
    n_groups: int
    counters: Counter
    cursor: tuple[int, int]  # the data cursor before this step took its prompts (what a checkpoint saves)
    kept: list[Group] = field(default_factory=list)
    carried: list[Carried] = field(default_factory=list)
    ready: asyncio.Queue = field(default_factory=asyncio.Queue)  # kept groups, then metrics (or an error)
    generated: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    _initial_left: int = 0
    _reward_times: list[float] = field(default_factory=lambda: [math.inf, -math.inf])
    _started: float = field(default_factory=lambda: asyncio.get_running_loop().time())
    _generate_span: float = 0.0

    def keep(self, group: Group) -> None:
        self.kept.append(group)
        self.ready.put_nowait(group)

    def expect_initial(self, count: int) -> None:
        self._initial_left = count
        if count == 0:
            self.mark_generated()

    def initial_generated(self) -> None:
        self._initial_left -= 1
        if self._initial_left <= 0:
            self.mark_generated()

    def mark_generated(self) -> None:
        """The step's initial generation is over (or nothing more of it will generate)."""
        if not self.generated.is_set():
            self._generate_span = asyncio.get_running_loop().time() - self._started
        self.generated.set()

    def reward_sent(self) -> None:
        self._reward_times[0] = min(self._reward_times[0], asyncio.get_running_loop().time())

    def reward_landed(self) -> None:
        self._reward_times[1] = max(self._reward_times[1], asyncio.get_running_loop().time())

    def generate_span(self) -> float:
        """Seconds from the step's start to the end of its initial generation (0 while it goes on)."""
        return self._generate_span

    def reward_span(self) -> float:
        """Seconds from this step's first reward request to its last result (0 when none was sent)."""
        first, last = self._reward_times
        return max(0.0, last - first) if math.isfinite(first) and math.isfinite(last) else 0.0


class DynamicSamplingScheduler:
    def __init__(self, domain: str, train_prompts: list[Prompt], val_prompts: list[Prompt], infer_workers: list,
                 reward_workers: list, cfg: Config, rank: int = 0):
        self.domain = domain
        self.train_prompts = train_prompts
        self.val_prompts = val_prompts[: cfg.validation.max_prompts_per_domain]
        self.infer = infer_workers
        self.rewards = reward_workers
        self.rollout = cfg.rollout
        self.group_size = cfg.rollout.group_size
        f = cfg.rollout.filter
        self.filters = FilterSettings(f.zero_spread, f.zero_spread_threshold, f.metric, f.mean_band, f.min_valid,
                                      f.user_fn)
        self.user_filter = load_user_filter(f.user_fn)
        algo = cfg.algorithm
        self.overlong = None
        if algo.overlong_shaping:
            max_len = cfg.generation.max_new_tokens
            self.overlong = (max_len, algo.overlong_cache_len or max(1, max_len // 4), algo.overlong_penalty_factor)
        self.sampling = sampling_from_config(cfg)
        self.val_sampling = sampling_from_config(cfg, validation=True)
        self.seed = cfg.run.seed
        self.epoch, self.pos = 0, 0
        self._order = self._permutation(0)
        self._rr_infer = self._rr_reward = self._launched = 0
        self.streaming = cfg.overlap.streaming_rewards
        self.buffer: list[Carried] = []
        self.runs: dict[int, StepRun] = {}  # started steps whose groups the trainer has not all taken yet
        self._background: set[asyncio.Task] = set()
        self._late: Counter[str] = Counter()  # outcomes of groups that finished after their step's quota

    # ------------------------------------------------------------------ data cursor
    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.train_prompts))

    def _next_prompt(self) -> Prompt:
        if self.pos >= len(self._order):
            self.epoch, self.pos = self.epoch + 1, 0
            self._order = self._permutation(self.epoch)
        prompt = self.train_prompts[int(self._order[self.pos])]
        self.pos += 1
        return prompt

    def state_dict(self) -> dict[str, Any]:
        """Cursor and carry-over buffer (finished groups); groups still being scored are not part of it. A step
        started but not yet trained (one-step off-policy) is saved as not started: its prompts and the carried
        groups it took come back on resume."""
        epoch, pos = min([(self.epoch, self.pos)] + [r.cursor for r in self.runs.values()])
        pending = [c for r in sorted(self.runs.values(), key=lambda r: r.step) for c in r.carried]
        return {"epoch": epoch, "pos": pos, "buffer": pending + list(self.buffer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._permutation(self.epoch)
        self.buffer = list(state.get("buffer", []))

    # ------------------------------------------------------------------ one prompt
    async def _run_group(self, prompt: Prompt, n: int, sampling: SamplingParams, version: int, request_id: str,
                         phase: dict | None = None, run: StepRun | None = None, lane: str = "train") -> Group:
        worker = self.infer[self._rr_infer % len(self.infer)]
        self._rr_infer += 1
        if phase is not None:
            phase.update(state="generating", worker=worker)
        try:
            gens = await worker.generate.remote(prompt.prompt_ids, n, sampling, request_id)
        finally:
            if run is not None and phase is not None and phase.get("initial"):
                run.initial_generated()
        if phase is not None:
            phase["state"] = "scoring"
        samples = [
            Sample(prompt=prompt, group_id=request_id, index=i, response_ids=g.token_ids, response_text=g.text,
                   finish_reason=g.finish_reason,
                   policy_version=version if g.policy_version is None else g.policy_version, logprobs=g.logprobs)
            for i, g in enumerate(gens)
        ]
        if any(s.finish_reason == "abort" for s in samples):
            raise asyncio.CancelledError  # aborted by us: the caller has already counted it
        if run is not None and not self.streaming:
            await run.generated.wait()  # the recipe's baseline: rewards only once the step's generation is over
        results = await asyncio.gather(*(self._score(s, lane, run) for s in samples))
        for s, r in zip(samples, results):
            s.reward = self._shaped(s, r)
        return Group(request_id, prompt, samples)

    def _shaped(self, sample: Sample, result: RewardResult) -> RewardResult:
        if self.overlong is None or result.status != "ok":
            return result
        penalty = overlong_penalty(len(sample.response_ids), *self.overlong)
        if penalty == 0.0:
            return result
        return replace(result, reward=result.reward + penalty, parts={**result.parts, "overlong": penalty})

    async def _score(self, sample: Sample, lane: str = "train", run: StepRun | None = None) -> RewardResult:
        worker = self.rewards[self._rr_reward % len(self.rewards)]
        self._rr_reward += 1
        light = replace(sample, prompt=replace(sample.prompt, prompt_ids=[]))  # rewards never need the ids
        if run is not None:
            run.reward_sent()
        try:
            return await worker.score.remote(light, lane)
        except Exception as err:  # the reward actor itself failed: count it, never lose the sample silently
            log.warning("reward actor failed for %s: %s", sample.group_id, err)
            return RewardResult.failed("error", f"reward actor failure: {type(err).__name__}: {err}")
        finally:
            if run is not None:
                run.reward_landed()

    # ------------------------------------------------------------------ one step, streamed
    async def start_batch(self, n_groups: int, step: int, version: int) -> None:
        """Starts collecting up to `n_groups` kept groups for `step` (fewer only when refill rounds run out).
        Returns at once; `next_groups` hands them over as they complete. Several steps may be in flight."""
        if step in self.runs:
            raise RuntimeError(f"{self.domain}: step {step} already started")
        # Groups that finished after the previous quota are counted in the step in which they land.
        run = StepRun(step, n_groups, Counter(self._late), cursor=(self.epoch, self.pos))
        self._late = Counter()
        self.runs[step] = run
        run.carried = self._take_carried(run)
        for c in run.carried:
            run.keep(c.group)
        run.task = asyncio.create_task(self._collect(run, version))

    async def next_groups(self, step: int) -> tuple[list[Group], dict[str, float] | None]:
        """Kept groups of `step` that completed since the last call (waits for at least one, or for the end).
        The second element is None while the step goes on, and the step's metrics once it is over."""
        run = self.runs[step]
        items = [await run.ready.get()]
        while not run.ready.empty():
            items.append(run.ready.get_nowait())
        groups = [x for x in items if isinstance(x, Group)]
        final = next((x for x in items if isinstance(x, BaseException | dict)), None)
        if isinstance(final, BaseException):
            del self.runs[step]
            raise final
        if final is not None:
            del self.runs[step]
        return groups, final

    async def wait_generated(self, step: int) -> None:
        """Returns once every group launched at the start of `step` has finished generating (its rewards may
        still be in flight): what a colocated trainer waits for before it takes the cores back."""
        run = self.runs.get(step)
        if run is not None:
            await run.generated.wait()

    async def cancel_batch(self, step: int) -> None:
        """Drops a started step that will never be trained (the run ends): in-flight requests are aborted."""
        run = self.runs.pop(step, None)
        if run is not None and run.task is not None:
            run.task.cancel()
            await asyncio.gather(run.task, return_exceptions=True)

    async def get_batch(self, n_groups: int, step: int, version: int) -> tuple[list[Group], dict[str, float]]:
        """The whole step at once: start_batch, then every group."""
        await self.start_batch(n_groups, step, version)
        groups: list[Group] = []
        while True:
            more, metrics = await self.next_groups(step)
            groups.extend(more)
            if metrics is not None:
                return groups, metrics

    async def _collect(self, run: StepRun, version: int) -> None:
        try:
            await self._collect_groups(run, version)
            metrics = self._metrics(run)
            metrics.update(await self.reward_worker_metrics())
            run.ready.put_nowait(metrics)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # handed to the trainer by next_groups: a broken step must not hang it
            log.exception("%s: step %d collection failed", self.domain, run.step)
            run.ready.put_nowait(err)

    async def _collect_groups(self, run: StepRun, version: int) -> None:
        tasks: dict[asyncio.Task, tuple[int, dict]] = {}
        step = run.step

        def launch(count: int, round_: int, initial: bool = False) -> None:
            for _ in range(count):
                prompt = self._next_prompt()
                self._launched += 1
                phase: dict = {"initial": initial}
                request_id = f"s{step}:{self._launched}:{prompt.uid}"
                task = asyncio.create_task(self._run_group(prompt, self.group_size, self.sampling, version,
                                                           request_id, phase, run))
                phase["request_id"] = request_id
                tasks[task] = (round_, phase)
                run.counters["prompts_started"] += 1
            run.counters["refill_rounds"] = max(run.counters["refill_rounds"], round_)

        short = run.n_groups - len(run.kept)
        initial = short + math.ceil(short * self.rollout.oversample_frac) if short > 0 else 0
        run.expect_initial(initial)
        if initial:
            launch(initial, 0, initial=True)
        try:
            while len(run.kept) < run.n_groups and tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    round_, _phase = tasks.pop(task)
                    group = self._finished(task, run.counters)
                    if group is not None and len(run.kept) < run.n_groups:
                        run.keep(group)
                    elif group is not None:
                        self._carry(group, step, run.counters)
                    elif self.rollout.refill == "shortfall":
                        self._refill(launch, 1, round_, run.counters)
                if self.rollout.refill == "full_batch" and not tasks and len(run.kept) < run.n_groups:
                    self._refill(launch, run.n_groups, run.counters["refill_rounds"], run.counters)
        finally:  # quota met, or cancelled: nothing of this step keeps generating
            await self._end_step(tasks, run)
        run.counters["groups_kept"] = len(run.kept)
        run.counters["quota_shortfall"] = run.n_groups - len(run.kept)

    def _refill(self, launch, count: int, round_: int, counters: Counter) -> None:
        if round_ < self.rollout.max_refill_rounds:
            launch(count, round_ + 1)
        else:
            counters["refill_exhausted"] += count

    def _finished(self, task: asyncio.Task, counters: Counter) -> Group | None:
        """The group if it passes the filters; None (counted) if it failed or was dropped."""
        if task.cancelled():
            counters["aborted"] += 1
            return None
        if task.exception() is not None:
            log.warning("%s: generation failed: %r", self.domain, task.exception())
            counters["generation_errors"] += 1
            return None
        group = task.result()
        counters["reward_failures"] += sum(not s.scored_ok for s in group.samples)
        counters["samples_generated"] += len(group.samples)
        reason = drop_reason(group, self.filters, self.user_filter)
        if reason is None:
            return group
        counters[f"dropped_{reason}"] += 1
        return None

    async def _end_step(self, tasks: dict[asyncio.Task, tuple[int, dict]], run: StepRun) -> None:
        """Quota met: abort requests still generating; groups already being scored finish in the background and
        go to the carry-over buffer."""
        aborting: dict[Any, list[str]] = {}
        for task, (_, phase) in tasks.items():
            if phase.get("state") == "scoring" and self.rollout.carry_over:
                self._background.add(task)
                task.add_done_callback(lambda t, s=run.step: self._landed(t, s))
                run.counters["finishing_late"] += 1
            else:
                aborting.setdefault(phase.get("worker"), []).append(phase["request_id"])
                task.cancel()
                run.counters["aborted"] += 1
        run.mark_generated()  # nothing more of this step will generate
        await asyncio.gather(*(w.abort.remote(ids) for w, ids in aborting.items() if w is not None))

    def _landed(self, task: asyncio.Task, step: int) -> None:
        self._background.discard(task)
        if task.cancelled() or task.exception() is not None:
            self._late["generation_errors"] += 1
            return
        group = task.result()
        reason = drop_reason(group, self.filters, self.user_filter)
        if reason is None:
            self.buffer.append(Carried(group, step))
            self._late["carried_over"] += 1
        else:
            self._late[f"dropped_{reason}"] += 1

    def _carry(self, group: Group, step: int, counters: Counter) -> None:
        if self.rollout.carry_over:
            self.buffer.append(Carried(group, step))
            counters["carried_over"] += 1
        else:
            counters["discarded_surplus"] += 1

    def _take_carried(self, run: StepRun) -> list[Carried]:
        step = run.step
        fresh = [c for c in self.buffer if step - c.born_step <= self.rollout.max_carry_staleness]
        run.counters["dropped_stale"] = len(self.buffer) - len(fresh)
        taken, self.buffer = fresh[: run.n_groups], fresh[run.n_groups :]
        run.counters["carried_used"] = len(taken)
        if taken:
            run.counters["carry_age_mean"] = float(np.mean([step - c.born_step for c in taken]))
        return taken

    def _metrics(self, run: StepRun) -> dict[str, float]:
        d = f"{self.domain}/"
        metrics = sample_metrics(d, [s for g in run.kept for s in g.samples])
        for key, value in run.counters.items():
            section = "filter" if key.startswith("dropped_") else "scheduler"
            metrics[f"{d}{section}/{key}"] = float(value)
        finished = run.counters["samples_generated"] // max(self.group_size, 1)
        if finished:
            metrics[f"{d}filter/kept_frac"] = (len(run.kept) - run.counters["carried_used"]) / finished
        metrics[f"{d}scheduler/buffer_size"] = float(len(self.buffer))
        metrics[f"{d}scheduler/epoch"] = float(self.epoch)
        metrics[f"{d}timing/reward_span"] = run.reward_span()
        metrics[f"{d}timing/generate_span"] = run.generate_span()
        return metrics

    # ------------------------------------------------------------------ validation and reward metrics
    async def validate(self, version: int) -> tuple[dict[str, float], dict[str, int], list[dict]]:
        """One response per validation prompt. Returns (metrics, counts for the all-domain mean, examples)."""
        tasks = [self._run_group(p, 1, self.val_sampling, version, f"val{version}:{i}:{p.uid}", lane="val")
                 for i, p in enumerate(self.val_prompts)]
        samples = [g.samples[0] for g in await asyncio.gather(*tasks)]
        scored = [s for s in samples if s.scored_ok and s.reward.correct is not None]
        n_correct = sum(bool(s.reward.correct) for s in scored)
        metrics = sample_metrics(f"val/{self.domain}/", samples)
        metrics.pop(f"val/{self.domain}/correct/mean", None)  # reported as val_correct/<domain>/mean instead
        if scored:
            metrics[f"val_correct/{self.domain}/mean"] = n_correct / len(scored)
        examples = [{"domain": self.domain, "prompt": s.prompt.uid, "response": s.response_text,
                     "ground_truth": str(s.prompt.ground_truth), "reward": s.reward.reward if s.reward else None,
                     "correct": s.reward.correct if s.reward else None, "status": s.reward.status if s.reward else None}
                    for s in samples]
        return metrics, {"correct": n_correct, "scored": len(scored), "total": len(samples)}, examples

    async def reward_worker_metrics(self) -> dict[str, float]:
        per_worker = await asyncio.gather(*(w.metrics.remote() for w in self.rewards))
        out: dict[str, float] = {}
        for m in per_worker:
            for k, v in m.items():
                if k.startswith("status/"):
                    continue  # status counts come from this step's samples (sample_metrics), not the lifetime
                key = f"{self.domain}/reward/{k}"
                # Latency percentiles do not add up across workers: report the worst worker's (conservative).
                combine = max if (k.startswith("latency/") or k.endswith("_peak")) else (lambda a, b: a + b)
                out[key] = combine(out[key], v) if key in out else v
        return out
