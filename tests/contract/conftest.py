"""The contract tier's one early start: the vLLM engine of the engine contract (tests/helpers/early_start.py says
why). At collection the engine contract's tests move to the end of the tier and, when the session runs its vLLM
half, the engine starts in a thread at the tier's first test; the `engine` fixture takes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.early_start import EARLY_VLLM_ENGINE, EarlyStart

TIER = Path(__file__).resolve().parent
ENGINE_CONTRACT = TIER / "test_engines.py"


def pytest_collection_modifyitems(config, items):
    engine_items = [item for item in items if item.path == ENGINE_CONTRACT]
    if not engine_items:
        return
    others = [item for item in items if item.path != ENGINE_CONTRACT]
    in_tier = [i for i, item in enumerate(others) if item.path.parent == TIER]
    at = in_tier[-1] + 1 if in_tier else len(others)
    items[:] = others[:at] + engine_items + others[at:]  # the tier's other tests run while the engine starts
    module = engine_items[0].module
    wants_vllm = any(getattr(item, "callspec", None) and item.callspec.params.get("engine") == "vllm"
                     for item in engine_items)
    if wants_vllm and module.VLLM_ERROR is None and at > 0:
        config.stash[EARLY_VLLM_ENGINE] = EarlyStart(module.vllm_engine)


@pytest.fixture(scope="session", autouse=True)
def _vllm_engine_started_early(request):
    early = request.config.stash.get(EARLY_VLLM_ENGINE, None)
    if early is not None:
        early.begin(request.getfixturevalue("tiny_vllm_model_dir"))
    yield
    if early is not None:
        early.discard(lambda engine: engine.shutdown())
