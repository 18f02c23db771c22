"""Named algorithm presets: `algorithm: <name>` expands to these values; any key the user sets wins.

| preset       | advantages                         | loss aggregation          | notes                              |
|--------------|------------------------------------|---------------------------|------------------------------------|
| grpo         | group mean / std (DeepSeekMath)    | token-mean                | symmetric clip 0.2, no KL by default|
| dr_grpo      | group mean only (no std division)  | seq-mean-token-sum-norm   | Dr.GRPO (arXiv 2503.20783)         |
| rloo         | leave-one-out mean                 | token-mean                | RLOO (arXiv 2402.14740)            |
| reinforce_pp | group mean, batch whitening        | token-mean                | REINFORCE++-baseline               |

The KL term is off in every preset (kl_loss_coef: 0): recent recipes (DAPO, Dr.GRPO) drop it for verifiable
rewards, and it costs a reference forward pass. Set `algorithm.kl_loss_coef` to turn it on.
"""

from __future__ import annotations

from typing import Any

_COMMON: dict[str, Any] = {
    "norm_adv_by_std": True,
    "clip_eps_low": 0.2,
    "clip_eps_high": 0.2,
    "loss_agg_mode": "token-mean",
    "kl_loss_coef": 0.0,
    "kl_estimator": "low_var_kl",
    "entropy_coef": 0.0,
}

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {**_COMMON, "adv_estimator": "grpo"},
    "dr_grpo": {**_COMMON, "adv_estimator": "dr_grpo", "norm_adv_by_std": False,
                "loss_agg_mode": "seq-mean-token-sum-norm"},
    "rloo": {**_COMMON, "adv_estimator": "rloo"},
    "reinforce_pp": {**_COMMON, "adv_estimator": "reinforce_pp_baseline"},
}


def expand_preset(user: dict[str, Any]) -> dict[str, Any]:
    """Preset defaults under the user's keys. An unknown preset name is an error listing the known ones."""
    name = user.get("preset", "grpo")
    if name not in PRESETS:
        raise ValueError(f"unknown algorithm preset '{name}'; known presets: {', '.join(sorted(PRESETS))}")
    return {**PRESETS[name], **user, "preset": name}
