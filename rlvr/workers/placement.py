"""Where each cluster's workers run: Ray resources per worker, placement groups, colocation (docs/scaling.md).

The config (`placement.<cluster>`, `actor_train.num_gpus_per_worker`, `generation.num_gpus_per_worker`) becomes
one `Placement` per cluster: the Ray options of each rank. With a `strategy` the ranks are the bundles of one
placement group, created and waited for here (a cluster that cannot fit fails with what it asked for and what
the Ray cluster has, instead of hanging); a cluster colocated with actor_train puts its worker i into
actor_train's bundle i % world_size, whose size then includes it. The arithmetic is in pure functions.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlvr.config.base import ConfigError
from rlvr.config.cluster import PlacementConfig
from rlvr.config.root import Config

log = logging.getLogger(__name__)

TRAIN_GPUS = "actor_train.num_gpus_per_worker"


@dataclass(frozen=True)
class WorkerRequest:
    """What one worker asks Ray for."""

    num_cpus: float = 0.0
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)

    def bundle(self) -> dict[str, float]:
        """As a placement-group bundle (Ray's names; zero amounts left out)."""
        out = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return {k: float(v) for k, v in out.items() if v > 0}


def add_bundles(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in {*a, *b}}


def colocated_bundles(owner: list[WorkerRequest], members: list[list[WorkerRequest]]) -> list[dict[str, float]]:
    """The owner's bundles, each grown by the requests of the member workers that join it (member worker i joins
    bundle i % len(owner))."""
    bundles = [r.bundle() for r in owner]
    for workers in members:
        for i, request in enumerate(workers):
            bundles[i % len(bundles)] = add_bundles(bundles[i % len(bundles)], request.bundle())
    return bundles


def missing_resources(needed: dict[str, float], have: dict[str, float]) -> dict[str, float]:
    """Resources the cluster has too little of in total: {name: amount needed} (empty when it fits)."""
    return {k: v for k, v in needed.items() if v > have.get(k, 0.0) + 1e-9}


def gpus_per_worker(cfg: Config, cluster_gpus: float) -> tuple[float, float]:
    """(actor_train / reference, actor_infer) GPUs per worker: the configured numbers, or (None) one per rank
    and tensor_parallel_size per inference worker when the Ray cluster has GPUs, else 0. Clusters colocated with
    actor_train split its rank's GPU evenly by default (actor_infer colocated: 0.5 each)."""
    t, g, p = cfg.actor_train, cfg.generation, cfg.placement
    has = cluster_gpus >= 1
    sharing = 1 + bool(p.actor_infer.colocate_with) + bool(p.reference.colocate_with and cfg.reference_worker)
    share = 1.0 / sharing
    train = t.num_gpus_per_worker if t.num_gpus_per_worker is not None else (share if has else 0.0)
    own = share if p.actor_infer.colocate_with else float(g.tensor_parallel_size)
    infer = g.num_gpus_per_worker if g.num_gpus_per_worker is not None else (own if has else 0.0)
    return train, infer


def critic_gpus_per_worker(cfg: Config, cluster_gpus: float) -> float:
    """critic.num_gpus_per_worker, or (None) one per rank when the Ray cluster has GPUs, else 0."""
    c = cfg.critic.num_gpus_per_worker
    return c if c is not None else (1.0 if cluster_gpus >= 1 else 0.0)


def gpu_shortfall(cfg: Config, train: float, infer: float, critic: float, have: float) -> str | None:
    """Each cluster may fit the Ray cluster alone and all of them together not (Ray would then wait forever for
    the last actor): the error naming what every cluster asks for, or None when the GPUs suffice. Clusters
    colocated with actor_train use its bundles' GPUs, already counted in `train`'s share."""
    p = cfg.placement
    parts = [("actor_train", train * cfg.actor_train.world_size)]
    if cfg.reference_worker:
        parts.append(("reference", 0.0 if p.reference.colocate_with else train))
    if cfg.algorithm.needs_critic:
        parts.append(("critic", critic * cfg.critic.world_size))
    if not p.actor_infer.colocate_with:
        parts.append(("actor_infer", infer * cfg.generation.world_size))
    need = sum(n for _, n in parts)
    if need <= have + 1e-9:
        return None
    return (f"{need:g} GPUs needed in all ({' + '.join(f'{name} {n:g}' for name, n in parts if n)}); the Ray "
            f"cluster has {{GPU: {have:g}}}")


@dataclass
class Placement:
    """One cluster's Ray options per rank, and the placement group it owns (None: none, or a colocated
    cluster's, owned by actor_train)."""

    name: str
    options: list[dict[str, Any]]
    group: PlacementGroup | None = None

    def for_rank(self, rank: int) -> dict[str, Any]:
        return dict(self.options[rank])

    def release(self) -> None:
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None


def _options(request: WorkerRequest, group: PlacementGroup | None, bundle: int) -> dict[str, Any]:
    opts: dict[str, Any] = {"num_cpus": request.num_cpus, "num_gpus": request.num_gpus}
    if request.resources:
        opts["resources"] = dict(request.resources)
    if group is not None:
        opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=bundle)
    return opts


class Planner:
    """Builds the Placement of each cluster against the running Ray cluster."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.total = ray.cluster_resources()
        have = self.total.get("GPU", 0.0)
        self.train_gpus, self.infer_gpus = gpus_per_worker(cfg, have)
        self.critic_gpus = critic_gpus_per_worker(cfg, have)
        self._train_group: PlacementGroup | None = None
        self._planned: list[Placement] = []
        self._scheduler: Placement | None = None

    def request(self, spec: PlacementConfig, gpus: float = 0.0) -> WorkerRequest:
        return WorkerRequest(spec.num_cpus_per_worker, gpus, dict(spec.resources))

    # ------------------------------------------------------------------ clusters
    def actor_train(self) -> Placement:
        """actor_train's ranks; with colocated actor_infer / reference, one placement group sized for all."""
        have = self.total.get("GPU", 0.0)  # first, before anything is placed: every cluster's GPUs together
        if shortfall := gpu_shortfall(self.cfg, self.train_gpus, self.infer_gpus, self.critic_gpus, have):
            raise ConfigError(f"{TRAIN_GPUS}: {shortfall}")
        p = self.cfg.placement
        world = self.cfg.actor_train.world_size
        own = [self.request(p.actor_train, self.train_gpus)] * world
        members = [[self.request(p.actor_infer, self.infer_gpus)] * self.cfg.generation.world_size
                   if p.actor_infer.colocate_with else [],
                   [self.request(p.reference, self.train_gpus)]
                   if p.reference.colocate_with and self.cfg.reference_worker else []]
        if not any(members) and p.actor_train.strategy is None:
            return self._plain("actor_train", own, gpu_key=TRAIN_GPUS)
        bundles = colocated_bundles(own, [m for m in members if m])
        group = self._group("placement.actor_train", bundles, p.actor_train.strategy or "PACK", TRAIN_GPUS)
        self._train_group = group
        return self._keep(Placement("actor_train", [_options(r, group, i) for i, r in enumerate(own)], group))

    def actor_infer(self) -> Placement:
        spec, world = self.cfg.placement.actor_infer, self.cfg.generation.world_size
        return self._cluster("actor_infer", spec, [self.request(spec, self.infer_gpus)] * world,
                             gpu_key="generation.num_gpus_per_worker")

    def reference(self) -> Placement:
        spec = self.cfg.placement.reference
        return self._cluster("reference", spec, [self.request(spec, self.train_gpus)], gpu_key=TRAIN_GPUS)

    def critic(self) -> Placement:
        spec = self.cfg.placement.critic
        return self._cluster("critic", spec, [self.request(spec, self.critic_gpus)] * self.cfg.critic.world_size,
                             gpu_key="critic.num_gpus_per_worker")

    def reward(self, domain: str) -> Placement:
        reward = self.cfg.domains[domain].reward
        spec = reward.placement or self.cfg.placement.reward
        key = f"domains.{domain}.reward.placement" if reward.placement else "placement.reward"
        return self._cluster(f"reward/{domain}", spec, [self.request(spec)] * reward.world_size, key)

    def scheduler(self) -> Placement:
        """The per-domain schedulers' (rank i: domain i) and the router's, planned once for both."""
        if self._scheduler is None:
            spec = self.cfg.placement.scheduler
            self._scheduler = self._cluster("scheduler", spec, [self.request(spec)] * len(self.cfg.domains))
        return self._scheduler

    def release(self) -> None:
        for placement in self._planned:
            placement.release()
        self._planned = []

    # ------------------------------------------------------------------ helpers
    def _cluster(self, name: str, spec: PlacementConfig, requests: list[WorkerRequest], key: str | None = None,
                 gpu_key: str | None = None) -> Placement:
        key = key or f"placement.{name}"
        if spec.colocate_with:
            if self._train_group is None:
                raise RuntimeError("actor_train's placement must be planned before the clusters colocated with it")
            bundles = self.cfg.actor_train.world_size
            return self._keep(Placement(name, [_options(r, self._train_group, i % bundles)
                                               for i, r in enumerate(requests)]))
        if spec.strategy is None:
            return self._plain(name, requests, key, gpu_key)
        group = self._group(key, [r.bundle() for r in requests], spec.strategy, gpu_key)
        return self._keep(Placement(name, [_options(r, group, i) for i, r in enumerate(requests)], group))

    def _plain(self, name: str, requests: list[WorkerRequest], key: str | None = None,
               gpu_key: str | None = None) -> Placement:
        self._check_total(key or f"placement.{name}", [r.bundle() for r in requests], gpu_key)
        return self._keep(Placement(name, [_options(r, None, 0) for r in requests]))

    def _check_total(self, key: str, bundles: list[dict[str, float]], gpu_key: str | None) -> None:
        """A cluster that cannot fit even into an empty Ray cluster is a config error, not a hang."""
        needed: dict[str, float] = {}
        for bundle in bundles:
            needed = add_bundles(needed, bundle)
        lacking = missing_resources(needed, self.total)
        if lacking:
            key = gpu_key if gpu_key and "GPU" in lacking else key
            raise ConfigError(f"{key}: {len(bundles)} workers need {_fmt(needed)} in all; the Ray cluster has "
                              f"{_fmt({k: self.total.get(k, 0.0) for k in lacking})}")

    def _group(self, key: str, bundles: list[dict[str, float]], strategy: str,
               gpu_key: str | None = None) -> PlacementGroup:
        for i, bundle in enumerate(bundles):
            if not bundle:
                raise ConfigError(f"{key}: a placement group bundle needs a resource (worker {i} asks for none): "
                                  "set num_cpus_per_worker, a GPU count or resources")
        self._check_total(key, bundles, gpu_key)
        group = placement_group(bundles, strategy=strategy)
        timeout = self.cfg.ray.placement_timeout_s
        ready, _ = ray.wait([group.ready()], timeout=timeout)
        if not ready:
            remove_placement_group(group)
            raise ConfigError(f"{key}: placement group {bundles} ({strategy}) not placed within "
                              f"ray.placement_timeout_s={timeout:g}: no "
                              f"{'one node' if 'PACK' in strategy else 'set of nodes'} "
                              f"has these free (available now: {_fmt(ray.available_resources())})")
        return group

    def _keep(self, placement: Placement) -> Placement:
        self._planned.append(placement)
        return placement


def _fmt(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in sorted(resources.items()) if not k.startswith(("node:", "object_store", "memory"))}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in shown.items()) + "}"


def node_of(actor) -> ray.ObjectRef:
    """The Ray node id the actor runs on (any actor: no method of its own needed)."""
    return actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())


def write_placement(run_dir: Path, clusters, schedulers: dict[str, Any]) -> dict[str, Any]:
    """Where every actor of the run landed, in `<run_dir>/placement.json`: {"clusters": {name: [node id per
    rank]}, "nodes": {node id: {"address", "resources"}}}. Also what tests and operators check placement with."""
    groups: dict[str, list] = {"actor_train": clusters.actor_train.workers,
                               "actor_infer": clusters.actor_infer.workers}
    for name in ("reference", "critic"):
        if getattr(clusters, name) is not None:
            groups[name] = getattr(clusters, name).workers
    groups.update({f"reward/{d}": c.workers for d, c in clusters.rewards.items()})
    groups.update({f"scheduler/{d}": [a] for d, a in schedulers.items()})
    if clusters.router is not None:
        groups["router"] = [clusters.router]
    names = list(groups)
    refs = [[node_of(a) for a in groups[n]] for n in names]
    placed = {n: ray.get(r) for n, r in zip(names, refs)}
    used = {node for ids in placed.values() for node in ids}
    nodes = {n["NodeID"]: {"address": n["NodeManagerAddress"],
                           "resources": {k: v for k, v in n["Resources"].items()
                                         if not k.startswith(("node:", "object_store", "memory"))}}
             for n in ray.nodes() if n["NodeID"] in used}
    report = {"clusters": placed, "nodes": nodes}
    (Path(run_dir) / "placement.json").write_text(json.dumps(report, indent=1))
    if len(nodes) > 1:
        log.info("placement over %d nodes: %s", len(nodes), {n: [i[:8] for i in ids] for n, ids in placed.items()})
    return report


__all__ = ["Placement", "Planner", "WorkerRequest", "add_bundles", "colocated_bundles", "critic_gpus_per_worker",
           "gpu_shortfall", "gpus_per_worker", "missing_resources", "node_of", "write_placement"]
