"""`auto` precision: bf16 where the hardware computes it natively, fp32 elsewhere.

bf16 pays only where the machine has bf16 arithmetic: on a CPU with AMX-BF16 a bf16 matrix product ran 9.4x
faster than fp32 and a forward + backward of the default model 2.9x (docs/precision.md), but on a CPU with AVX2
only (an AMD EPYC of the same 2-core kind, 2026-11-26) torch emulates bf16: a 1024 x 1024 product ran at 0.001
TFLOP/s against 0.109 in fp32, and the main job's first step took 964 s against ~40 s. AVX512-BF16 alone is not
enough either: on a Xeon of this kind whose hypervisor hides AMX (family 6 model 207, 2026-11-28: `avx512_bf16`
listed, `amx_bf16` not) a 2048 x 2048 bf16 product ran at 0.17 TFLOP/s against 0.30 in fp32 and a forward +
backward of the default model at 0.82x fp32's tokens/s (docs/precision.md). On AMD the same flag is another
story: an AMD EPYC of this kind with AVX-512 (family 26, 2026-12-07: `avx512_bf16`, no AMX) ran the 2048 x 2048
bf16 product at 0.75 TFLOP/s against 0.19 in fp32 and an optimizer step of the default model at 3.18x fp32's
tokens/s (bench/precision_packing.py), vLLM's eager generation at 1.40-1.56x. So the shipped configs say
`auto` (generation.dtype, actor_train/critic.bf16_autocast) and each section resolves it when it is validated:

- bf16 when the section asks for GPUs (`num_gpus_per_worker` > 0) or this host has one (`nvidia-smi`, the check
  scripts/setup.sh uses to pick vLLM's build): tensor cores since Ampere;
- bf16 when this host's CPU has AMX-BF16 (`amx_bf16` in /proc/cpuinfo's flags), the matrix unit bf16 pays on;
- bf16 when it is an AMD CPU (`vendor_id` AuthenticAMD) with AVX512-BF16: measured on family 26 only; family 25
  (the first AMD CPUs with the flag) is taken on the same terms, unmeasured;
- fp32 otherwise.

The resolved value is what the run uses and saves (config.yaml); the host that resolves it is the driver's, so a
GPU cluster driven from a CPU-only head node should name its precision instead of `auto`.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

NATIVE_BF16_CPU_FLAGS = ("amx_bf16",)  # avx512_bf16 alone measured slower than fp32 on Intel (the docstring)
AMD_VENDOR = "AuthenticAMD"  # ... and 3.18x faster than fp32 on AMD
AUTO_KEYS = ("generation.dtype", "actor_train.bf16_autocast", "critic.bf16_autocast",  # the keys that take `auto`
             "judge_server.dtype")


def cpuinfo_field(cpuinfo: str, name: str) -> str:
    """One field of the first processor in a /proc/cpuinfo text ("" when it has none)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == name:
            return value.strip()
    return ""


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first processor in a /proc/cpuinfo text."""
    return set(cpuinfo_field(cpuinfo, "flags").split())


def bf16_native_on_cpu(flags: set[str], vendor: str = "") -> bool:
    return cpu_precision(flags, vendor)[0]


def cpu_precision(flags: set[str], vendor: str = "") -> tuple[bool, str]:
    """(bf16 is native on a CPU with these flags from this vendor, why)."""
    found = [f for f in NATIVE_BF16_CPU_FLAGS if f in flags]
    if found:
        return True, f"this CPU has {', '.join(found)}"
    if "avx512_bf16" in flags:
        if vendor == AMD_VENDOR:
            return True, "this AMD CPU has avx512_bf16"
        return False, "this CPU has avx512_bf16 but not amx_bf16 (bf16 measured slower than fp32 there)"
    return False, "this CPU has neither amx_bf16 nor avx512_bf16"


@functools.cache
def host_precision() -> tuple[bool, str]:
    """(bf16 is native here, why): read once per process."""
    if shutil.which("nvidia-smi"):
        return True, "this host has a GPU (nvidia-smi)"
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        return cpu_precision(cpu_flags(cpuinfo), cpuinfo_field(cpuinfo, "vendor_id"))
    except OSError:
        return cpu_precision(set())


def auto_bf16(num_gpus_per_worker: float | None) -> bool:
    """What `auto` means for a section that asks for `num_gpus_per_worker` GPUs per worker."""
    return bool(num_gpus_per_worker) or host_precision()[0]


def auto_dtype(num_gpus_per_worker: float | None) -> str:
    """What `auto` means for a dtype key (generation.dtype, judge_server.dtype)."""
    return "bfloat16" if auto_bf16(num_gpus_per_worker) else "float32"


__all__ = ["AUTO_KEYS", "auto_bf16", "auto_dtype", "bf16_native_on_cpu", "cpu_flags", "cpu_precision", "cpuinfo_field",
           "host_precision"]
