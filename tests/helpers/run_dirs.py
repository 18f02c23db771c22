"""Synthetic run directories, written as the pipeline writes them (config.yaml, metrics.jsonl, val_samples.jsonl),
with hand-chosen numbers the report tests check against. No model, no Ray."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

DOMAINS = ("math", "code")
# step -> values; val_correct at steps 0, 2 and the final validation at 3 (max_steps 3, eval_every 2)
VAL = {"math": {0: 0.25, 2: 0.75, 3: 0.5}, "code": {0: 0.5, 2: 0.5, 3: 0.5}}
REWARD = {"math": [0.1, 0.2, 0.3], "code": [0.0, 0.5, 1.0]}
LENGTH = {"math": [10.0, 20.0, 30.0], "code": [40.0, 40.0, 40.0]}
GENERATE_S, TRAIN_S, VAL_S = [2.0, 4.0, 6.0], [1.0, 1.0, 1.0], {0: 3.0, 2: 5.0}
GEN_TOKENS_PER_S, TRAIN_TOKENS_PER_S = [100.0, 200.0, 300.0], [50.0, 50.0, 50.0]


def _train_record(step: int) -> dict:
    r: dict = {"step": step, "time/generate": GENERATE_S[step], "time/train": TRAIN_S[step],
               "system/response_tokens_per_s": GEN_TOKENS_PER_S[step],
               "system/train_tokens_per_s": TRAIN_TOKENS_PER_S[step],
               "system/actor_train/0/rss_gib": 1.0 + step, "system/actor_infer/0/rss_gib": 2.0,
               "system/driver/rss_gib": 0.5, "system/total/rss_gib": 3.5 + step}
    if step:
        r["system/actor_train/0/cpu_percent"] = 150.0
    r.update({"rollout_corr/kl": 0.01 * (step + 1), "rollout_corr/k3_kl": 0.01, "rollout_corr/chi2_token": 0.02,
              "rollout_corr/chi2_seq": 0.2, "rollout_corr/ppl_ratio": 1.01, "rollout_corr/log_ppl_abs_diff": 0.01,
              "rollout_corr/rollout_is_eff_sample_size": 0.98, "rollout_corr/rollout_is_ratio_fraction_high": 0.0})
    if step in VAL_S:
        r["time/val"] = VAL_S[step]
    r["time/step"] = sum(v for k, v in r.items() if k.startswith("time/"))
    for d in DOMAINS:
        r.update({f"{d}/reward/mean": REWARD[d][step], f"{d}/response_length/mean": LENGTH[d][step],
                  f"{d}/reward/status/ok": 8.0, f"{d}/reward/status/error": 1.0 if (d, step) == ("math", 1) else 0.0,
                  f"{d}/reward/status/timeout": 0.0, f"{d}/reward/status/invalid": 0.0,
                  f"{d}/reward/latency/p50": 0.1, f"{d}/reward/latency/p95": 0.3 + step,
                  f"{d}/reward/latency/max": 0.5 + step, f"{d}/filter/kept_frac": 0.5,
                  f"{d}/filter/dropped_zero_spread": float(step), f"{d}/scheduler/groups_kept": 2.0,
                  f"{d}/scheduler/refill_rounds": 1.0})
    return r


def _val_record(step: int) -> dict:
    r = {"step": step, **{f"val_correct/{d}/mean": VAL[d][step] for d in DOMAINS}}
    r["val_correct/all/mean"] = sum(VAL[d][step] for d in DOMAINS) / len(DOMAINS)
    for d in DOMAINS:
        r[f"val/{d}/response_length/mean"] = 12.0 + step
    return r


def _samples(step: int) -> list[dict]:
    rows = []
    for d in DOMAINS:
        for i in range(4):
            correct = i < 4 * VAL[d][step]
            rows.append({"step": step, "domain": d, "prompt": f"{d}-{i}", "question": f"question {d} {i} <b>",
                         "response": f"answer {i} of {d} at step {step}", "ground_truth": str(i),
                         "reward": 1.0 if correct else 0.0, "correct": correct, "status": "ok"})
    return rows


def write_run(path: Path, crashed: bool = False) -> Path:
    """The finished run (3 steps), or (crashed) one killed during its 4th step of 6: no final validation and a
    torn last line in metrics.jsonl."""
    path.mkdir(parents=True)
    config = {"run": {"name": path.name, "max_steps": 6 if crashed else 3, "eval_every": 2},
              "domains": {d: {"reward": {"worker": "x.Y"}} for d in DOMAINS}}
    (path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # as save_resolved writes it
    lines, samples = [], []
    for step in range(3):  # as the pipeline logs: a step's validation in the same record as its training
        record = _train_record(step)
        if step in (0, 2):
            record |= _val_record(step)
            samples += _samples(step)
        lines.append(record)
    if not crashed:
        lines.append(_val_record(3))
        samples += _samples(3)
    text = "".join(json.dumps(r) + "\n" for r in lines)
    if crashed:
        text += json.dumps(_train_record(0) | {"step": 3})[:57]  # the record being written when it died
    (path / "metrics.jsonl").write_text(text)
    (path / "val_samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return path
