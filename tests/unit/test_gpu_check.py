"""scripts/gpu_check.sh, the check a lent GPU machine runs: it skips cleanly without CUDA, its checks pass on CPU,
and it needs neither pydantic, Ray, vLLM nor DeepSpeed (the lent machine has only torch and transformers)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO

BLOCKED = ("pydantic", "ray", "vllm", "deepspeed")


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs its checks instead")
def test_without_cuda_it_says_so_and_exits_0():
    proc = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device here: skipped" in proc.stdout


def test_its_checks_pass_on_cpu_with_only_torch_and_transformers():
    code = (f"import sys\nfor m in {BLOCKED!r}: sys.modules[m] = None\n"
            "sys.path.insert(0, 'scripts')\nimport gpu_check\n"
            "sys.exit(gpu_check.main(['--device', 'cpu', '--no-timing']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for check in ("bf16 weights: gradient vs fp32", "bf16 weights: masters stay fp32", "correction weights vs CPU",
                  "rejected tokens leave denominator", "packed vs padded: logprobs, gradient"):
        (row,) = [line for line in lines if line.startswith(check)]
        assert row.rstrip().endswith("yes"), row


def test_its_timing_runs_every_configuration_over_the_same_real_tokens():
    import importlib

    sys.path.insert(0, str(REPO / "scripts"))
    gpu_check = importlib.import_module("gpu_check")
    timed = gpu_check.time_train_steps("cpu", "tiny", rows=6, width=24, steps=1, budgets=[48, 96],
                                       padded_rows=[2, 6])
    assert [name for name, *_ in timed] == ["fp32 padded 16", "bf16 padded 2", "bf16 padded 6", "bf16 packed 48",
                                            "bf16 packed 96"]
    # the same rows in every configuration: tokens/s x s/step is the batch's real token count each time
    tokens = {round(seconds * rate) for _, seconds, rate in timed}
    assert tokens == {int(gpu_check.make_train_batch(6, 24, seed=3)["attention_mask"].sum())}
