"""`auto` precision (rlvr/config/precision.py): bf16 only where the host computes it natively."""

from __future__ import annotations

import logging

import pytest

from rlvr.config import precision
from rlvr.config.cluster import JudgeServerConfig
from rlvr.config.generation import GenerationConfig
from rlvr.config.load import load_config
from rlvr.config.origin import config_origins
from rlvr.config.trainer import ActorTrainConfig, CriticConfig

EPYC_AVX2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 avx avx2 fma\n\nprocessor\t: 1\n"
XEON_AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
EPYC_AVX512 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
XEON_NO_AMX = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"


def test_cpu_flags_are_read_from_cpuinfo():
    assert precision.cpu_flags(EPYC_AVX2) == {"fpu", "sse", "sse2", "avx", "avx2", "fma"}
    assert precision.cpu_flags("no flags here") == set()
    assert not precision.bf16_native_on_cpu(precision.cpu_flags(EPYC_AVX2))
    assert precision.bf16_native_on_cpu(precision.cpu_flags(XEON_AMX))
    # AVX512-BF16 without AMX (a Xeon whose hypervisor hides AMX) ran bf16 slower than fp32: not native
    assert not precision.bf16_native_on_cpu({"avx512f", "avx512_bf16"})
    assert not precision.bf16_native_on_cpu({"avx512f", "avx512_bf16"}, "GenuineIntel")
    # ... but on an AMD EPYC with it bf16 ran 3.18x fp32's training step: native
    assert precision.bf16_native_on_cpu({"avx512f", "avx512_bf16"}, "AuthenticAMD")
    assert not precision.bf16_native_on_cpu(precision.cpu_flags(EPYC_AVX2), "AuthenticAMD")  # AVX2 only: emulated


def test_the_vendor_is_read_from_cpuinfo():
    assert precision.cpuinfo_field(EPYC_AVX512, "vendor_id") == "AuthenticAMD"
    assert precision.cpuinfo_field(EPYC_AVX512, "cpu family") == "26"
    assert precision.cpuinfo_field(XEON_AMX, "vendor_id") == ""
    for text, native in ((EPYC_AVX512, True), (XEON_NO_AMX, False), (EPYC_AVX2, False), (XEON_AMX, True)):
        assert precision.bf16_native_on_cpu(precision.cpu_flags(text),
                                            precision.cpuinfo_field(text, "vendor_id")) is native, text


def test_the_reason_names_what_decided():
    assert precision.cpu_precision(precision.cpu_flags(XEON_AMX)) == (True, "this CPU has amx_bf16")
    native, why = precision.cpu_precision({"avx512f", "avx512_bf16"})
    assert not native and "avx512_bf16 but not amx_bf16" in why
    assert precision.cpu_precision({"avx512_bf16"}, "AuthenticAMD") == (True, "this AMD CPU has avx512_bf16")
    assert precision.cpu_precision(precision.cpu_flags(EPYC_AVX2)) == (
        False, "this CPU has neither amx_bf16 nor avx512_bf16")


@pytest.fixture
def host(monkeypatch):
    """Pretend the host is native (True) or not (False); the real probe is cached per process."""
    def set_native(native: bool) -> None:
        monkeypatch.setattr(precision, "host_precision",
                            lambda: (native, "this CPU has amx_bf16" if native else "this CPU has neither"))
    return set_native


@pytest.mark.parametrize("native", [True, False])
def test_auto_resolves_by_host_when_validated(host, native):
    host(native)
    assert GenerationConfig(dtype="auto").dtype == ("bfloat16" if native else "float32")
    assert ActorTrainConfig().bf16_autocast is native  # the default is auto
    assert CriticConfig(bf16_autocast="auto").bf16_autocast is native
    cfg = GenerationConfig()
    cfg.dtype = "auto"  # assignment is validated too
    assert cfg.dtype == ("bfloat16" if native else "float32")


def test_a_section_on_gpus_is_bf16_whatever_the_cpu(host):
    host(False)
    assert GenerationConfig(num_gpus_per_worker=1, dtype="auto").dtype == "bfloat16"
    assert ActorTrainConfig(num_gpus_per_worker=0.5).bf16_autocast is True
    assert ActorTrainConfig(num_gpus_per_worker=0).bf16_autocast is False


def test_explicit_values_are_kept(host):
    host(False)
    assert GenerationConfig(dtype="bfloat16").dtype == "bfloat16"
    assert ActorTrainConfig(bf16_autocast=True).bf16_autocast is True
    host(True)
    assert GenerationConfig(dtype="float32").dtype == "float32"
    assert ActorTrainConfig(bf16_autocast=False).bf16_autocast is False


@pytest.mark.parametrize("native", [True, False])
def test_the_shipped_configs_follow_the_host(host, native):
    for name in ("configs/math.yaml", "configs/math_code_mix.yaml"):
        host(native)
        cfg = load_config(name)
        assert cfg.generation.dtype == ("bfloat16" if native else "float32")
        assert cfg.actor_train.bf16_autocast is native
        assert cfg.actor_train.uses_bf16_weights is native  # bf16_weights: true only matters with bf16


def test_print_config_says_auto_and_why(host):
    host(False)
    cfg = load_config("configs/math_code_mix.yaml", ["critic.bf16_autocast=auto"])
    origins = config_origins("configs/math_code_mix.yaml", ["critic.bf16_autocast=auto"], cfg)
    assert origins["generation.dtype"] == "file, auto: this CPU has neither"
    assert origins["critic.bf16_autocast"] == "override critic.bf16_autocast=auto, auto: this CPU has neither"
    cfg = load_config("configs/math_code_mix.yaml", ["judge_server.dtype=auto"])
    assert config_origins("configs/math_code_mix.yaml", ["judge_server.dtype=auto"], cfg)[
        "judge_server.dtype"] == "override judge_server.dtype=auto, auto: this CPU has neither"
    cfg = load_config("configs/math_code_mix.yaml", ["generation.dtype=float32"])
    assert config_origins("configs/math_code_mix.yaml", ["generation.dtype=float32"], cfg)[
        "generation.dtype"] == "override generation.dtype=float32"


def test_bf16_asked_for_on_a_host_that_emulates_it_is_warned(host, caplog):
    from rlvr.pipeline import preflight

    cfg = load_config("configs/math_code_mix.yaml", ["generation.dtype=bfloat16", "actor_train.bf16_autocast=true"])
    host(False)
    assert preflight.emulated_bf16_keys(cfg) == ["generation.dtype", "actor_train.bf16_autocast"]
    with caplog.at_level(logging.WARNING):
        preflight.preflight(cfg)
    assert "bf16 asked for (generation.dtype, actor_train.bf16_autocast), but this CPU has neither" in caplog.text
    host(True)
    assert preflight.emulated_bf16_keys(cfg) == []


@pytest.mark.parametrize("native", [True, False])
def test_the_judge_dtype_follows_the_host_only_when_asked(host, native):
    host(native)
    assert JudgeServerConfig(dtype="auto").dtype == ("bfloat16" if native else "float32")
    assert JudgeServerConfig().dtype is None  # the backend's own default (CPU: float32), as before the key
    assert load_config("configs/math_code_mix.yaml").judge_server.dtype is None


def test_the_judge_dtype_reaches_both_backends_and_vllm_args_win():
    js = JudgeServerConfig(dtype="bfloat16", threads=1, vllm_args=["--dtype", "float32"])
    vllm_args, server_args = js.backend_args()
    assert vllm_args == ["--dtype", "bfloat16", "--dtype", "float32"]  # vLLM's parser keeps the last
    assert server_args == ["--threads", "1", "--dtype", "bfloat16"]
    assert JudgeServerConfig().backend_args() == ([], [])


def test_a_bf16_judge_on_a_host_that_emulates_it_is_warned(host):
    from rlvr.pipeline import preflight

    host(False)
    cfg = load_config("configs/math_code_mix.yaml", ["judge_server.dtype=bfloat16"])
    assert preflight.emulated_bf16_keys(cfg) == ["judge_server.dtype"]
    math_only = load_config("configs/math.yaml", ["judge_server.dtype=bfloat16"])
    assert preflight.emulated_bf16_keys(math_only) == []  # no local judge, nothing to warn of
    host(True)
    assert preflight.emulated_bf16_keys(cfg) == []
