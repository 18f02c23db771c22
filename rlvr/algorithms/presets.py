"""Named algorithm presets: `algorithm: <name>` expands to these values; any key the user sets wins.
docs/algorithms.md has the full table (paper, keys, defaults); in short:

| preset                | advantages                              | policy loss         | KL                          |
|-----------------------|-----------------------------------------|---------------------|-----------------------------|
| grpo                  | group mean / std (DeepSeekMath)         | ppo clip, token-mean| none                        |
| dr_grpo               | group mean only                         | seq-mean-token-sum-norm | none                    |
| rloo                  | leave-one-out mean                      | ppo clip            | none                        |
| reinforce             | batch-mean baseline (plain REINFORCE)   | ppo clip (ratio 1 on-policy) | none               |
| reinforce_pp          | REINFORCE++: token returns, global whitening | ppo clip       | k1 in the reward, 0.01      |
| reinforce_pp_baseline | group mean, batch whitening             | ppo clip            | none                        |
| ppo                   | GAE over critic values, whitened        | ppo clip            | k1 in the reward, 0.001     |
| topr                  | batch-mean baseline                     | TOPR (tapered)      | none                        |
| gspo                  | group mean / std                        | GSPO sequence ratio | none                        |
| dapo                  | group mean / std                        | clip 0.2/0.28       | none; overlong, zero-spread |
| gigpo                 | episode + anchor-state step level (env domains; GRPO on reward ones) | ppo clip | none  |
| multi_step_grpo       | episode level on every turn (GiGPO's baseline) | ppo clip     | none                        |

The KL loss term is off in every preset (kl_loss_coef: 0): recent recipes (DAPO, Dr.GRPO) drop it for verifiable
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
    "reinforce": {"algorithm": {**_COMMON, "adv_estimator": "reinforce"}},
    # REINFORCE++ (Hu et al., arXiv 2501.03262): the KL to the reference in the token rewards (k1, coefficient
    # 0.01: OpenRLHF's defaults), discounted returns, whitened over every response token of the batch.
    "reinforce_pp": {"algorithm": {**_COMMON, "adv_estimator": "reinforce_pp", "use_kl_in_reward": True,
                                   "kl_penalty": "k1", "kl_ctrl": {"type": "fixed", "kl_coef": 0.01}}},
    "reinforce_pp_baseline": {"algorithm": {**_COMMON, "adv_estimator": "reinforce_pp_baseline"}},
    # PPO with a critic (verl's defaults): GAE (gamma 1, lambda 0.95), a fixed k1 KL penalty in the reward.
    "ppo": {"algorithm": {**_COMMON, "adv_estimator": "gae", "gamma": 1.0, "lam": 0.95, "use_kl_in_reward": True,
                          "kl_penalty": "k1", "kl_ctrl": {"type": "fixed", "kl_coef": 0.001}}},
    # TOPR (Le Roux et al., arXiv 2503.14286): REINFORCE with a batch-mean baseline; the tapered loss.
    "topr": {"algorithm": {**_COMMON, "adv_estimator": "reinforce", "policy_loss": "topr"}},
    # GSPO (Zheng et al., arXiv 2507.18071): group advantages, a sequence-level ratio clipped at (3e-4, 4e-4),
    # sequences weighted equally.
    "gspo": {"algorithm": {**_COMMON, "adv_estimator": "grpo", "policy_loss": "gspo", "clip_eps_low": 3e-4,
                           "clip_eps_high": 4e-4, "loss_agg_mode": "seq-mean-token-mean"}},
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
    """The `algorithm` section: preset defaults under the user's keys (sub-sections merged key by key, so
    `algorithm.kl_ctrl.kl_coef=0.05` keeps the preset's kl_ctrl.type)."""
    name = _preset_name({"algorithm": user})
    return {**_merge(PRESETS[name]["algorithm"], user), "preset": name}


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
