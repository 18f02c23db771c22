"""DynamicSamplingScheduler: one async Ray actor per domain.

Per prompt: generate `group_size` responses on an actor_infer worker (which admits a capped number of requests
across all domains), send each finished sample to the domain's reward cluster at once, and release the group only
when all its rewards are in. Then the group filters decide (DAPO dynamic sampling):

- a kept group counts toward the step's quota; a dropped one is counted by reason and replaced at once by a new
  prompt, one refill round deeper; past `max_refill_rounds` the step goes on with what it has and says so;
- once the quota is met, requests still generating are aborted, and groups already being scored finish in the
  background and land in the carry-over buffer for the next step (at most `max_carry_staleness` steps old),
  instead of being thrown away.

Faults (docs/faults.md): a request in flight on an actor_infer or reward actor that died is sent again once
the actor is back (counted under `faults/<domain>/...`). When this actor itself dies, Ray restarts it and it
refuses work until the driver has `restore`d it from the snapshot `start_batch` returned: the data position,
the carry-over buffer, and the prompts consumed but not yet handed to the trainer (`pending`), which go first.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from rlvr.algorithms.reward_shaping import overlong_penalty
from rlvr.config.root import Config
from rlvr.data.reward_result import STATUSES, RewardResult
from rlvr.data.types import Group, Prompt, Sample, SamplingParams
from rlvr.rollout.metrics import episode_metrics
from rlvr.runtime.resend import resend
from rlvr.runtime.waiter import was_restarted
from rlvr.schedulers.group_filters import FilterSettings, drop_reason, load_user_filter
from rlvr.schedulers.step_run import Carried, StepRun

log = logging.getLogger(__name__)


class SchedulerRestarted(RuntimeError):
    """This scheduler actor was restarted after a crash and has not been restored yet (DomainSchedulers does)."""


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


def _question(prompt: Prompt) -> str:
    """What the model was asked: the raw prompt, or the last message of the chat."""
    return prompt.text if prompt.text is not None else (prompt.messages or [{}])[-1].get("content", "")


class DynamicSamplingScheduler:
    def __init__(self, domain: str, train_prompts: list[Prompt] | None, val_prompts: list[Prompt] | None,
                 infer_workers: list, reward_workers: list, cfg: Config, rank: int = 0, episodes=None):
        """`train_prompts=None`: the data and the workers come later, by `attach` (how DomainSchedulers starts
        the Ray actor; see `attach`)."""
        self.domain = domain
        self.cfg = cfg
        self.attached = False
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
        self._rr_infer = self._rr_reward = 0
        self.streaming = cfg.overlap.streaming_rewards
        self.buffer: list[Carried] = []
        self.runs: dict[int, StepRun] = {}  # started steps whose groups the trainer has not all taken yet
        self._background: set[asyncio.Task] = set()
        self._late: Counter[str] = Counter()  # outcomes of groups that finished after their step's quota
        self.faults: Counter[str] = Counter()  # re-sent and lost requests since the last step's metrics
        self.restored = not was_restarted()
        # Prompts taken from the cursor whose group is in flight, or kept and not yet handed to the trainer, by
        # group id: what a snapshot must give back if this actor dies. Restored ones go before the cursor.
        self.pending: dict[str, Prompt] = {}
        self._requeue: list[Prompt] = []
        self._skip: set[str] = set()  # prompt uids the trainer already has (handed over since the snapshot)
        if train_prompts is not None:
            self.attach(train_prompts, val_prompts or [], infer_workers, reward_workers, episodes)

    def attach(self, train_prompts: list[Prompt], val_prompts: list[Prompt], infer_workers: list,
               reward_workers: list, episodes=None) -> None:
        """The domain's data and the workers it sends to. A method, not constructor arguments, for the Ray
        actor: Ray logs an error on the console for every restartable actor whose constructor gets an object-store
        reference or an actor handle (both are here), so DomainSchedulers calls this after the actor starts and
        again after Ray restarts it, before `restore`."""
        # An env domain's groups are played by its EpisodeRunner (rlvr/rollout/episode.py) instead of being
        # generated and then scored: the env's feedback is part of generation, so streaming does not apply.
        self.episodes = episodes
        self.train_prompts = train_prompts
        self.val_prompts = val_prompts[: self.cfg.validation.max_prompts_per_domain]
        # as many validation prompts in flight as the workers admit (a router stands for all of them)
        self.val_in_flight = self.cfg.generation.max_in_flight_per_worker * max(
            1, len(infer_workers), self.cfg.generation.world_size)
        self.infer = infer_workers
        self.rewards = reward_workers
        self._order = self._permutation(self.epoch)
        self.attached = True

    # ------------------------------------------------------------------ data cursor
    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.train_prompts))

    def _next_prompt(self) -> Prompt:
        if self._requeue:
            return self._requeue.pop(0)
        while True:
            prompt = self._cursor_prompt()
            if prompt.uid not in self._skip:
                return prompt
            self._skip.discard(prompt.uid)

    def _cursor_prompt(self) -> Prompt:
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
        self._check_restored()
        epoch, pos = min([(self.epoch, self.pos)] + [r.cursor for r in self.runs.values()])
        pending = [c for r in sorted(self.runs.values(), key=lambda r: r.step) for c in r.carried]
        return {"epoch": epoch, "pos": pos, "buffer": pending + list(self.buffer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_attached()
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._permutation(self.epoch)
        self.buffer = list(state.get("buffer", []))
        self.restored = True

    def snapshot(self) -> dict[str, Any]:
        """Where this scheduler stands now, for `restore` after a crash (the driver keeps it)."""
        return {"epoch": self.epoch, "pos": self.pos, "buffer": list(self.buffer),
                "pending": list(self.pending.values())}

    def restore(self, snapshot: dict[str, Any], handed_over: list[str]) -> dict[str, int]:
        """Back to `snapshot`, except the prompts the trainer got since (uids in `handed_over`): nothing lost,
        nothing twice. Returns what was given back, for the fault counters."""
        done = set(handed_over)
        self.load_state_dict({**snapshot, "buffer": [c for c in snapshot["buffer"] if c.group.prompt.uid not in done]})
        self._requeue = [p for p in snapshot["pending"] if p.uid not in done]
        self._skip = done - {c.group.prompt.uid for c in snapshot["buffer"]} - {p.uid for p in snapshot["pending"]}
        return {"requeued": len(self._requeue), "buffer": len(self.buffer), "skipped": len(self._skip)}

    async def health(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "restored": self.restored, "steps": sorted(self.runs)}

    def _check_restored(self) -> None:
        self._check_attached()
        if not self.restored:
            raise SchedulerRestarted(f"{self.domain}: the scheduler was restarted and awaits its state")

    def _check_attached(self) -> None:
        if not self.attached:
            raise SchedulerRestarted(f"{self.domain}: the scheduler was restarted and awaits its data and workers")

    # ------------------------------------------------------------------ one prompt
    async def _run_group(self, prompt: Prompt, n: int, sampling: SamplingParams, version: int, request_id: str,
                         phase: dict | None = None, run: StepRun | None = None, lane: str = "train") -> Group:
        first = self._rr_infer
        self._rr_infer += 1
        if self.episodes is not None:  # an episode is not re-sent: a dead worker ends it as a failed sample
            worker = self.infer[first % len(self.infer)]
            if phase is not None:
                phase.update(state="generating", worker=worker)
            try:
                return await self.episodes.run_group(worker, prompt, n, sampling, version, request_id, phase)
            finally:
                if run is not None and phase is not None and phase.get("initial"):
                    run.initial_generated()

        async def send(attempt: int) -> list:
            worker = self.infer[(first + attempt) % len(self.infer)]  # a re-send goes to the next worker
            if phase is not None:
                phase.update(state="generating", worker=worker)
            return await worker.generate.remote(prompt.prompt_ids, n, sampling, request_id)

        try:
            gens = await resend(send, self.cfg.faults.resend_patience_s,
                                lambda err: self._fault("generate_resent", err))
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
        first = self._rr_reward
        self._rr_reward += 1
        light = replace(sample, prompt=replace(sample.prompt, prompt_ids=[]))  # rewards never need the ids
        if run is not None:
            run.reward_sent()

        async def send(attempt: int) -> RewardResult:
            return await self.rewards[(first + attempt) % len(self.rewards)].score.remote(light, lane)

        try:
            return await resend(send, self.cfg.faults.resend_patience_s, lambda err: self._fault("score_resent", err))
        except Exception as err:  # the reward actor itself failed: count it, never lose the sample silently
            self.faults["score_failed"] += 1
            log.warning("reward actor failed for %s: %s", sample.group_id, err)
            return RewardResult.failed("error", f"reward actor failure: {type(err).__name__}: {err}")
        finally:
            if run is not None:
                run.reward_landed()

    # ------------------------------------------------------------------ one step, streamed
    async def start_batch(self, n_groups: int, step: int, version: int) -> dict[str, Any]:
        """Starts collecting up to `n_groups` kept groups for `step` (fewer only when refill rounds run out).
        Returns at once, with the snapshot from before it took anything; `next_groups` hands the groups over
        as they complete. Several steps may be in flight."""
        self._check_restored()
        snapshot = self.snapshot()
        if step in self.runs:
            raise RuntimeError(f"{self.domain}: step {step} already started")
        # Groups that finished after the previous quota are counted in the step in which they land.
        run = StepRun(step, n_groups, Counter(self._late), cursor=(self.epoch, self.pos))
        self._late = Counter()
        self.runs[step] = run
        run.carried = self._take_carried(run)
        for c in run.carried:
            run.keep(c.group)
            self.pending[c.group.group_id] = c.group.prompt
        run.task = asyncio.create_task(self._collect(run, version))
        return snapshot

    async def next_groups(self, step: int) -> tuple[list[Group], dict[str, float] | None]:
        """Kept groups of `step` that completed since the last call (waits for at least one, or for the end).
        The second element is None while the step goes on, and the step's metrics once it is over."""
        self._check_restored()
        run = self.runs[step]
        items = [await run.ready.get()]
        while not run.ready.empty():
            items.append(run.ready.get_nowait())
        groups = [x for x in items if isinstance(x, Group)]
        for g in groups:
            self.pending.pop(g.group_id, None)
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
        self._check_restored()
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
                run.launched += 1
                phase: dict = {"initial": initial}
                # Named by the step and the launch count within it: an id (and so its sampling seed) that a
                # resumed or repeated run gives the same prompt again.
                request_id = f"s{step}:{run.launched}:{prompt.uid}"
                self.pending[request_id] = prompt
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
                    round_, phase = tasks.pop(task)
                    group = self._finished(task, run.counters)
                    if group is None or len(run.kept) >= run.n_groups:  # dropped, failed, or to the buffer
                        self.pending.pop(phase["request_id"], None)
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
                task.add_done_callback(lambda t, s=run.step, r=phase["request_id"]: self._landed(t, s, r))
                run.counters["finishing_late"] += 1
            else:
                # an episode has one live request per trajectory (one per turn, over time)
                aborting.setdefault(phase.get("worker"), []).extend(phase.get("live_requests") or
                                                                    [phase["request_id"]])
                self.pending.pop(phase["request_id"], None)
                task.cancel()
                run.counters["aborted"] += 1
        run.mark_generated()  # nothing more of this step will generate
        aborts = await asyncio.gather(*(w.abort.remote(ids) for w, ids in aborting.items() if w is not None),
                                      return_exceptions=True)
        for err in aborts:  # a worker that died took its requests with it: nothing left to abort there
            if isinstance(err, Exception):
                self._fault("abort_failed", err)

    def _landed(self, task: asyncio.Task, step: int, request_id: str) -> None:
        self._background.discard(task)
        self.pending.pop(request_id, None)
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
        metrics.update(episode_metrics(d, [s for g in run.kept for s in g.samples]))
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
        metrics.update({f"faults/{self.domain}/{k}": float(v) for k, v in self.faults.items()})
        self.faults.clear()
        return metrics

    def __repr__(self) -> str:  # names the actor in its log file and console lines
        return f"Scheduler[{self.domain}]"

    def _fault(self, what: str, err: BaseException) -> None:
        self.faults[what] += 1
        log.warning("%s: %s after a worker fault: %s", self.domain, what.replace("_", " "), err)

    # ------------------------------------------------------------------ validation and reward metrics
    async def validate(self, version: int) -> tuple[dict[str, float], dict[str, int], list[dict]]:
        """One response per validation prompt. Returns (metrics, counts for the all-domain mean, examples).
        At most as many prompts are in flight as the inference workers admit (a fixed set of lanes takes them in
        turn, so a validation set of any size costs no more tasks); a prompt whose generation failed is counted
        under val/<domain>/generation_errors, never dropped silently."""
        self._check_attached()
        todo = iter(enumerate(self.val_prompts))
        done: list[tuple[int, Sample]] = []
        failed = 0

        async def lane() -> None:
            nonlocal failed
            for i, p in todo:
                try:
                    group = await self._run_group(p, 1, self.val_sampling, version, f"val{version}:{i}:{p.uid}",
                                                  lane="val")
                    done.append((i, group.samples[0]))
                except Exception as err:  # the generation itself failed, after any re-sends
                    log.warning("%s: validation of %s failed: %r", self.domain, p.uid, err)
                    failed += 1

        await asyncio.gather(*(lane() for _ in range(min(self.val_in_flight, len(self.val_prompts)))))
        samples = [s for _, s in sorted(done, key=lambda x: x[0])]  # data order, whatever finished first
        scored = [s for s in samples if s.scored_ok and s.reward.correct is not None]
        n_correct = sum(bool(s.reward.correct) for s in scored)
        metrics = sample_metrics(f"val/{self.domain}/", samples)
        metrics.update(episode_metrics(f"val/{self.domain}/", samples))
        metrics.pop(f"val/{self.domain}/correct/mean", None)  # reported as val_correct/<domain>/mean instead
        if scored:
            metrics[f"val_correct/{self.domain}/mean"] = n_correct / len(scored)
        if failed:
            metrics[f"val/{self.domain}/generation_errors"] = float(failed)
        examples = [{"domain": self.domain, "prompt": s.prompt.uid, "question": _question(s.prompt),
                     "response": s.response_text,
                     "ground_truth": str(s.prompt.ground_truth), "reward": s.reward.reward if s.reward else None,
                     "correct": s.reward.correct if s.reward else None, "status": s.reward.status if s.reward else None,
                     "info": s.reward.info if s.reward else ""}
                    for s in samples]
        return metrics, {"correct": n_correct, "scored": len(scored), "total": len(samples) + failed}, examples

    async def reward_worker_metrics(self) -> dict[str, float]:
        self._check_attached()
        per_worker = await asyncio.gather(*(w.metrics.remote() for w in self.rewards), return_exceptions=True)
        out: dict[str, float] = {}
        for m in per_worker:
            if isinstance(m, Exception):  # a reward actor that died: its counters went with it
                self._fault("reward_metrics_lost", m)
                continue
            for k, v in m.items():
                if k.startswith("status/"):
                    continue  # status counts come from this step's samples (sample_metrics), not the lifetime
                name = k.removeprefix("faults/")
                key = f"faults/{self.domain}/{name}" if name != k else f"{self.domain}/reward/{k}"
                # Latency percentiles do not add up across workers: report the worst worker's (conservative).
                combine = max if (k.startswith("latency/") or k.endswith("_peak")) else (lambda a, b: a + b)
                out[key] = combine(out[key], v) if key in out else v
        return out
