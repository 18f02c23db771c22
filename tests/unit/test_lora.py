"""LoRA (rlvr/backends/lora.py) in the torch strategy: only the adapters train, the merged weights are peft's own
merge, the reference is the base model with adapters off, checkpoints hold the adapters only (peft reads them) and
resume exactly, in fp32 and with bf16 weights."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
from rlvr.backends.lora import (ADAPTER_DIR, ADAPTER_WEIGHTS, adapters_disabled, add_lora, is_adapter,
                                merge_saved_adapter, merged_weights)
from rlvr.backends.torch_strategy import TorchStrategy
from rlvr.backends.train_strategy import load_causal_lm
from rlvr.config.base import ConfigError
from rlvr.config.load import config_from_dict
from rlvr.config.trainer import ActorTrainConfig, LoraConfig
from tests.helpers.train_batches import make_small_vocab_llama, make_train_batch

SETTINGS = ObjectiveSettings(loss_agg_mode="token-mean", max_response_len=16)
LORA = {"rank": 4, "alpha": 16.0}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return make_small_vocab_llama(tmp_path_factory.mktemp("tiny-llama"))


def strategy(model_dir: str, bf16: bool = False, lora: dict | None = LORA, lr: float = 1e-2) -> TorchStrategy:
    cfg = ActorTrainConfig(lr=lr, micro_batch_size=2, bf16_autocast=bf16, bf16_weights=bf16, max_grad_norm=None,
                           lora=lora)
    return TorchStrategy(model_dir, cfg, total_steps=8, seed=0)


def train(s: TorchStrategy, seed: int = 0) -> dict[str, float]:
    torch.manual_seed(seed)
    batch = make_train_batch(4, 16, advantages=[1.0, -0.5, -1.2, 0.7])
    return s.train_step(batch, lambda logp, ent, mb, nt, ns: actor_objective(logp, ent, mb.tensors, SETTINGS, nt, ns))


def logits(model: torch.nn.Module) -> torch.Tensor:
    ids = make_train_batch(2, 12, advantages=[1.0, 1.0])["input_ids"]
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_only_the_adapters_train_and_the_value_head_when_asked(tiny_llama):
    s = strategy(tiny_llama)
    trained = set(s.trained_names)
    assert trained and all(is_adapter(n) for n in trained)
    assert len(trained) == 2 * 7 * 2  # A and B on 7 projections in each of 2 layers
    optimized = {id(p) for g in s.optimizer.param_groups for p in g["params"]}
    assert optimized == {id(p) for n, p in s.model.named_parameters() if n in trained}
    before = {n: p.detach().clone() for n, p in s.model.named_parameters()}
    train(s), train(s)  # B starts at 0: A moves only from the second step on
    moved = {n for n, p in s.model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == trained

    model = add_lora(load_causal_lm(tiny_llama), LoraConfig(rank=2), also_trained=("lm_head", "model.norm"))
    assert {n for n, p in model.named_parameters() if p.requires_grad and not is_adapter(n)} == {"model.norm.weight"}


def test_merged_weights_are_peft_merge_and_keep_the_base_names(tiny_llama):
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    base_names = {n for n, _ in load_causal_lm(tiny_llama).named_parameters()}
    torch.manual_seed(1)
    ours = add_lora(load_causal_lm(tiny_llama), LoraConfig(**LORA))
    with torch.no_grad():  # non-zero B, so that the merge has something to add
        for n, p in ours.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    merged = merged_weights({n: p.detach() for n, p in ours.named_parameters()}, LoraConfig(**LORA).scale)
    assert set(merged) == base_names

    peft_model = get_peft_model(load_causal_lm(tiny_llama), PeftLoraConfig(r=4, lora_alpha=16.0,
                                                                          target_modules=LoraConfig().target_modules))
    peft_model.base_model.model.load_state_dict(ours.state_dict())
    reference = dict(peft_model.merge_and_unload().named_parameters())
    for name, tensor in merged.items():
        torch.testing.assert_close(tensor, reference[name], rtol=1e-6, atol=1e-6, msg=name)
    plain = load_causal_lm(tiny_llama)
    plain.load_state_dict(merged, strict=False)
    torch.testing.assert_close(logits(plain), logits(ours.eval()), rtol=1e-4, atol=1e-4)


def test_the_reference_is_the_base_model(tiny_llama):
    s = strategy(tiny_llama)
    train(s), train(s)
    base = load_causal_lm(tiny_llama)
    with adapters_disabled(s.model):
        torch.testing.assert_close(logits(s.model.eval()), logits(base), rtol=0, atol=0)
    assert not torch.allclose(logits(s.model), logits(base))  # switched back on
    batch = make_train_batch(4, 16, advantages=[1.0, -0.5, -1.2, 0.7])
    plain = TorchStrategy(tiny_llama, ActorTrainConfig(bf16_autocast=False), total_steps=1, seed=0, trainable=False)
    expected = plain.forward_logprobs(batch, 0.7, loss_positions_only=True)
    torch.testing.assert_close(s.reference_logprobs(batch, 0.7), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-weights"])
def test_checkpoints_hold_the_adapters_only_and_resume_exactly(tiny_llama, tmp_path, bf16):
    s = strategy(tiny_llama, bf16=bf16)
    train(s), train(s)
    s.save(str(tmp_path / "ckpt"))
    assert not (tmp_path / "ckpt" / "model").exists()
    adapter = tmp_path / "ckpt" / ADAPTER_DIR
    assert (adapter / ADAPTER_WEIGHTS).exists() and (adapter / "adapter_config.json").exists()
    continued = train(s, seed=5)
    after = s.named_parameters_for_sync(torch.float32)

    resumed = strategy(tiny_llama, bf16=bf16)
    resumed.load(str(tmp_path / "ckpt"))
    again = train(resumed, seed=5)
    assert again == continued
    for name, tensor in resumed.named_parameters_for_sync(torch.float32).items():
        assert torch.equal(tensor, after[name]), name


def test_peft_loads_a_saved_adapter_and_the_export_merge_matches(tiny_llama, tmp_path):
    from peft import PeftModel

    s = strategy(tiny_llama)
    train(s), train(s)
    s.save(str(tmp_path / "ckpt"))
    peft_model = PeftModel.from_pretrained(load_causal_lm(tiny_llama), str(tmp_path / "ckpt" / ADAPTER_DIR))
    torch.testing.assert_close(logits(peft_model.eval()), logits(s.model.eval()), rtol=1e-5, atol=1e-5)
    base = {n: p.detach() for n, p in load_causal_lm(tiny_llama).named_parameters()}
    exported = merge_saved_adapter(base, tmp_path / "ckpt" / ADAPTER_DIR)
    synced = s.named_parameters_for_sync(torch.float32)
    assert exported.keys() == synced.keys()
    for name in synced:
        torch.testing.assert_close(exported[name], synced[name], rtol=0, atol=0, msg=name)


def test_a_checkpoint_of_other_adapters_is_refused(tiny_llama, tmp_path):
    s = strategy(tiny_llama)
    s.save(str(tmp_path / "ckpt"))
    other = strategy(tiny_llama, lora={"rank": 4, "target_modules": ["q_proj", "v_proj", "o_proj", "k_proj",
                                                                    "gate_proj", "up_proj", "down_proj"]})
    other.load(str(tmp_path / "ckpt"))  # the same layers, listed in another order: fine
    fewer = strategy(tiny_llama, lora={"rank": 4, "target_modules": ["q_proj"]})
    more = strategy(tiny_llama, lora={"rank": 4, "target_modules": ["q_proj", "lm_head"]})
    fewer.save(str(tmp_path / "fewer"))
    with pytest.raises(ValueError, match="trained tensors missing"):
        more.load(str(tmp_path / "fewer"))
    plain = strategy(tiny_llama, lora=None)
    with pytest.raises(FileNotFoundError, match="no adapter weights"):
        s.load(str(_plain_checkpoint(plain, tmp_path / "plain")))
    with pytest.raises(FileNotFoundError, match="LoRA adapters .adapter/., no full weights"):
        plain.load(str(tmp_path / "ckpt"))


def _plain_checkpoint(s: TorchStrategy, path):
    s.save(str(path))
    return path


def test_unknown_target_modules_are_a_precise_error(tiny_llama):
    with pytest.raises(ValueError, match=r"lora.target_modules \['qkv'\]"):
        strategy(tiny_llama, lora={"rank": 2, "target_modules": ["qkv"]})


def test_the_config_section(tmp_path):
    from tests.conftest import tiny_config

    cfg = config_from_dict(tiny_config("m", str(tmp_path), actor_train={"lora": {"rank": 8}}))
    assert cfg.actor_train.lora.rank == 8 and cfg.actor_train.lora.scale == 2.0
    assert LoraConfig(rank=16, alpha=8).scale == 0.5
    cfg = config_from_dict(tiny_config("m", str(tmp_path), actor_train={"lora": {"rank": 8}},
                                       algorithm={"preset": "grpo", "kl_loss_coef": 0.01}))
    assert cfg.needs_reference and not cfg.reference_worker  # actor_train with its adapters off
    for bad, match in (({"rank": 0}, "rank"), ({"rank": 4, "target_modules": []}, "target_modules"),
                       ({"rank": 4, "dropout": 1.0}, "dropout"), ({"rnk": 4}, "rnk")):
        with pytest.raises(ConfigError, match=match):
            config_from_dict(tiny_config("m", str(tmp_path), actor_train={"lora": bad}))


def test_the_critic_trains_its_adapters_and_its_whole_value_head(tiny_llama, tmp_path):
    from rlvr.backends.value_spec import value_spec
    from rlvr.config.trainer import CriticConfig

    s = TorchStrategy(tiny_llama, CriticConfig(bf16_autocast=False, lora={"rank": 2}), total_steps=1, seed=0,
                      spec=value_spec(0))
    trained = set(s.trained_names)
    assert "value_head.weight" in trained and all(is_adapter(n) for n in trained - {"value_head.weight"})
    s.save(str(tmp_path / "critic"))
    from rlvr.backends.lora import load_adapter

    saved = load_adapter(tmp_path / "critic" / ADAPTER_DIR, s.trained_names)
    assert torch.equal(saved["value_head.weight"], s.model.value_head.weight.detach())
