"""One build's clusters (actor_train, actor_infer, reference, reward workers) run by several tests one after the
other, each run from step 0: for test modules whose configs differ only in what the clusters never read (the
overlap switches, where a run writes). A tiny pipeline's build is ~7-9 s of process starts on 2 cores (each worker
imports torch and transformers), its three steps ~2 s: the overlap matrix built the same clusters eight times.

Each run gets what a run has of its own (run directory, fault log and supervisor, domain schedulers over the
data, trackers, the driver's state) and the clusters rewound to where the build left them: actor_train's
weights, optimizer, LR schedule and RNG from the state saved right after the build, actor_infer's RNG as a resume
restores it (the samples themselves are seeded per request id: rlvr/backends/seeded_sampling.py), the reward
workers' counters read and reset; actor_infer gets the rewound weights from step 0's sync as any run's first step
does (the collective sync loads whatever version it is sent, which the object-store one would not).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config.load import config_from_dict, save_resolved
from rlvr.config.root import Config
from rlvr.pipeline.build import build_episode_runners, new_run_dir
from rlvr.pipeline.parts import PipelineParts, build_pipeline, supervise_and_schedule
from rlvr.pipeline.preflight import preflight
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

# What may differ between the runs on one build: read by the driver and the schedulers only (return_logprobs
# follows overlap.one_step_off_policy and goes with each generation request)
RUN_OWN = {"overlap": None, "run": ("output_dir", "name"), "generation": ("return_logprobs",)}


def cluster_settings(cfg: Config) -> dict:
    """`cfg` less what each run may set for itself (RUN_OWN)."""
    tree = cfg.model_dump(mode="json")
    for section, keys in RUN_OWN.items():
        if keys is None:
            tree.pop(section)
        else:
            tree[section] = {k: v for k, v in tree[section].items() if k not in keys}
    return tree


class SharedClusters:
    def __init__(self, tree: dict, scratch: Path):
        """Builds the clusters for `tree` (a full pipeline, the owner of the clusters, never run) and saves
        actor_train's start state under `scratch`."""
        cfg = config_from_dict(tree)
        if cfg.actor_train.weight_sync != "collective":
            raise ValueError("shared clusters need actor_train.weight_sync=collective: an object-store sync "
                             "ignores older versions, so step 0's weights would not reach a used engine")
        if cfg.algorithm.needs_critic:
            raise ValueError("shared clusters do not rewind a critic")
        self.settings, self.checked = cluster_settings(cfg), preflight(cfg)
        self.owner = RLVRPipeline(cfg, build_pipeline(cfg, self.checked))
        self.clusters, self.waiter = self.owner.clusters, self.owner.waiter
        self.start_state = scratch / "actor_train_at_build"
        try:
            self.waiter.get(self.clusters.actor_train.save_async(str(self.start_state)), "actor_train.save")
            self.infer_rng = self.clusters.actor_infer.rng_states()
        except BaseException:
            self.owner.close()
            raise

    def pipeline(self, tree: dict) -> RLVRPipeline:
        """A run of `tree` from step 0 on the shared clusters; its close() leaves them up."""
        cfg = config_from_dict(tree)
        if cluster_settings(cfg) != self.settings:
            raise ValueError("this config differs from the shared build's beyond "
                             f"{sorted(RUN_OWN)}: build its own pipeline")
        self._rewind()
        run_dir = new_run_dir(cfg)
        save_resolved(cfg, run_dir)
        episodes = build_episode_runners(cfg, self.checked.tokenizer)
        faults, schedulers = supervise_and_schedule(cfg, self.checked.data, episodes, run_dir, self.waiter,
                                                    self.clusters)
        parts = PipelineParts(run_dir, self.checked.tokenizer, self.waiter, faults, self.clusters, schedulers,
                              owns_clusters=False)
        return RLVRPipeline(cfg, parts)

    def _rewind(self) -> None:
        clusters, get = self.clusters, self.waiter.get
        get(clusters.actor_train.load_async(str(self.start_state)), "actor_train.load")
        get([w.set_rng_state.remote(r) for w, r in zip(clusters.actor_infer.workers, self.infer_rng)],
            "actor_infer.set_rng_state")
        get([w.metrics.remote(True) for c in clusters.rewards.values() for w in c.workers], "rewards.metrics")

    def close(self) -> None:
        self.owner.close()
