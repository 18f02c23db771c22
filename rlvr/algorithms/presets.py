"""Named algorithm presets: `algorithm: <name>` expands to these values; any key the user sets wins.

| preset       | advantages                         | loss aggregation          | notes                              |
|--------------|------------------------------------|---------------------------|------------------------------------|
| grpo         | group mean / std (DeepSeekMath)    | token-mean                | symmetric clip 0.2, no KL by default|
| dr_grpo      | group mean only (no std division)  | seq-mean-token-sum-norm   | Dr.GRPO (arXiv 2503.20783)         |
| rloo         | leave-one-out mean                 | token-mean                | RLOO (arXiv 2402.14740)            |
| reinforce_pp | group mean, batch whitening        | token-mean                | REINFORCE++-baseline               |
| dapo         | group mean / std                   | token-mean                | clip 0.2/0.28, overlong shaping,   |
|              |                                    |                           | zero-spread filter with refill     |
| gigpo        | episode + anchor-state step level  | token-mean                | GiGPO (arXiv 2505.10978): gamma    |
|              | (env domains; GRPO on reward ones) |                           | 0.95, omega 1, mean_norm (F = 1)   |
| multi_step_grpo | episode level on every turn     | token-mean                | GiGPO's baseline, F = 1            |

The KL term is off in every preset (kl_loss_coef: 0): recent recipes (DAPO, Dr.GRPO) drop it for verifiable
rewards, and it costs a reference forward pass. Set `algorithm.kl_loss_coef` to turn it on.
"""

from __future__ import annotations

import copy
from typing import Any

_COMMON: dict[str, Any] = {
    "norm_adv_by_std": True,
    "clip_eps_low": 0.2,
    "clip_eps_high": 0.2,
    "loss_agg_mode": "token-mean",
    "kl_loss_coef": 0.0,
    "kl_estimator": "low_var_kl",
    "entropy_coef": 0.0,
    "overlong_shaping": False,
}

# Each preset: defaults per config section. `algorithm` keys are merged in AlgorithmConfig; other sections in
# Config (expand_preset_sections). The user's keys always win.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "grpo": {"algorithm": {**_COMMON, "adv_estimator": "grpo"}},
    "dr_grpo": {"algorithm": {**_COMMON, "adv_estimator": "dr_grpo", "norm_adv_by_std": False,
                              "loss_agg_mode": "seq-mean-token-sum-norm"}},
    "rloo": {"algorithm": {**_COMMON, "adv_estimator": "rloo"}},
    "reinforce_pp": {"algorithm": {**_COMMON, "adv_estimator": "reinforce_pp_baseline"}},
    # DAPO (arXiv 2503.14476): clip-higher, token-level loss, soft overlong punishment, dynamic sampling that
    # drops groups whose accuracy is all 0 or all 1 and refills the batch; no KL term.
    "dapo": {
        "algorithm": {**_COMMON, "adv_estimator": "grpo", "clip_eps_high": 0.28, "overlong_shaping": True,
                      "overlong_penalty_factor": 1.0},
        "rollout": {"filter": {"zero_spread": True, "metric": "correct"}, "max_refill_rounds": 10},
    },
    # GiGPO with the paper's agent-benchmark settings (F_norm = 1 at both levels, gamma 0.95, omega 1; also
    # verl-agent's defaults). The step level's keys live under algorithm.gigpo.
    "gigpo": {"algorithm": {**_COMMON, "adv_estimator": "gigpo", "norm_adv_by_std": False}},
    "multi_step_grpo": {"algorithm": {**_COMMON, "adv_estimator": "multi_step_grpo", "norm_adv_by_std": False}},
}


def _preset_name(data: dict[str, Any]) -> str:
    algorithm = data.get("algorithm", "grpo")
    name = algorithm if isinstance(algorithm, str) else (algorithm or {}).get("preset", "grpo")
    if name not in PRESETS:
        raise ValueError(f"unknown algorithm preset '{name}'; known presets: {', '.join(sorted(PRESETS))}")
    return name


def _merge(defaults: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(defaults)
    for key, value in user.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def expand_preset(user: dict[str, Any]) -> dict[str, Any]:
    """The `algorithm` section: preset defaults under the user's keys."""
    name = _preset_name({"algorithm": user})
    return {**PRESETS[name]["algorithm"], **user, "preset": name}


def expand_preset_sections(data: dict[str, Any]) -> dict[str, Any]:
    """Sections other than `algorithm` that the preset gives defaults for, under the user's keys."""
    try:
        name = _preset_name(data)
    except ValueError:
        return data  # AlgorithmConfig reports the unknown preset with its key
    out = dict(data)
    for section, defaults in PRESETS[name].items():
        if section != "algorithm" and isinstance(out.get(section, {}), dict):
            out[section] = _merge(defaults, out.get(section, {}))
    return out
