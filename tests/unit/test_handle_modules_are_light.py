"""Ray imports the module of an actor's class in every process that receives a handle to it (ActorHandle
deserialization loads the class for its method metadata). The handles of these actors go to other actors (the
schedulers hold actor_infer's and the reward actors', the router actor_infer's), so their modules must not import
torch or transformers at module level: each receiving process would pay ~3.4 s of CPU and ~0.5 GB for nothing
(a tiny pipeline's build took 10.1 s against 7.4 s when actor_infer's module did)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

HANDED_AROUND = ("rlvr.workers.actor_infer", "rlvr.workers.rewards.reward_actor", "rlvr.workers.infer_router",
                 "rlvr.schedulers.dynamic_sampling")


@pytest.mark.parametrize("module", HANDED_AROUND)
def test_module_of_a_handed_around_actor_imports_no_torch(module):
    code = (f"import sys, {module}; heavy = [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules]; "
            "print(' '.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"importing {module} imports {out.stdout.strip()}"
