"""Step metrics about overlap: how long the trainer waited for rewards, how much reward time hid behind compute,
and the floor that the reward service sets (samples x mean latency / concurrency). Pure functions of the metrics
the phases already logged."""

from __future__ import annotations

from rlvr.config.root import Config

# Phases that keep the cores busy; `val` is left out (it is not part of a training step's critical path).
COMPUTE_PHASES = ("model_update", "generate", "generate_ahead", "batch", "forwards", "advantages", "critic_train",
                  "train")
SUMMED = ("batch/groups", "batch/samples", "batch/masked_samples", "batch/masked_truncated", "batch/response_tokens",
          "actor/updates", "actor/skipped_updates", "critic/updates", "critic/skipped_updates")


def merge_parts(parts: list[dict[str, float]]) -> dict[str, float]:
    """One step's metrics from its mini-batches' (pipeline): counts add up, maxima stay maxima, the rest is
    the mean over mini-batches."""
    out: dict[str, float] = {}
    for key in {k for p in parts for k in p}:
        values = [p[key] for p in parts if key in p]
        if key in SUMMED:
            out[key] = float(sum(values))
        elif key.endswith("/max"):
            out[key] = float(max(values))
        elif key.endswith("/min"):
            out[key] = float(min(values))
        else:
            out[key] = float(sum(values) / len(values))
    return out


def overlap_metrics(m: dict[str, float], cfg: Config) -> dict[str, float]:
    out: dict[str, float] = {}
    compute = sum(m.get(f"time/{p}", 0.0) for p in COMPUTE_PHASES)
    wait = m.get("time/reward_wait", 0.0)
    spans = [m.get(f"{d}/timing/reward_span", 0.0) for d in cfg.domains]
    span = max(spans, default=0.0)
    floors = []
    for d, dc in cfg.domains.items():
        if dc.reward is None:  # an env domain: no reward service
            continue
        n, latency = m.get(f"{d}/scheduler/samples_generated", 0.0), m.get(f"{d}/reward/latency/mean", 0.0)
        floors.append(n * latency / (dc.reward.max_concurrency * dc.reward.world_size))
    generation = m.get("time/generate", 0.0) + m.get("time/generate_ahead", 0.0)
    out.update({
        "timing/compute": compute,
        "timing/reward_wait": wait,
        "timing/reward_span": span,
        "timing/overlap": max(0.0, span - wait),  # reward time the trainer did not wait for
        "timing/reward_floor": max(floors, default=0.0),
        "reward/in_flight_peak": float(sum(m.get(f"{d}/reward/in_flight_peak", 0.0) for d in cfg.domains)),
        "time/step": sum(v for k, v in m.items() if k.startswith("time/") and k != "time/step"),
    })
    if generation > 0:
        out["system/response_tokens_per_s"] = m.get("batch/response_tokens", 0.0) / generation
    return out
