"""What the critic's strategy trains: the value model (rlvr/models/value_model.py) as a `ModelSpec`."""

from __future__ import annotations

import functools

from rlvr.backends.train_strategy import ModelSpec
from rlvr.models.value_model import ValueModel, value_forward, value_forward_packed


def value_spec(head_seed: int) -> ModelSpec:
    """The ModelSpec of a value model: loaded with a value head drawn from `head_seed`."""
    return ModelSpec(load=functools.partial(ValueModel.from_pretrained, head_seed=head_seed), forward=value_forward,
                     export=ValueModel.export, forward_packed=value_forward_packed,
                     also_trained=("value_head",))
