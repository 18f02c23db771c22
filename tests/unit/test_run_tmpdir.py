"""The temp dir of a run's own (rlvr/lifecycle/run_tmpdir.py): what it points where, and what it leaves alone."""

from __future__ import annotations

import tempfile

from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from rlvr.lifecycle.run_tmpdir import tmpdir_env


def test_temp_files_move_and_rays_logs_and_the_compile_cache_stay(monkeypatch):
    for key in ("RAY_TMPDIR", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)
    env = tmpdir_env("/tmp/rlvr-run-1-x")
    assert env["TMPDIR"] == "/tmp/rlvr-run-1-x"
    assert env["RAY_TMPDIR"] == tempfile.gettempdir()  # Ray's session dir under TMPDIR otherwise
    assert env["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()  # torch's own default, before TMPDIR moves


def test_a_users_own_places_win(monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", "/data/ray")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/data/inductor")
    env = tmpdir_env("/tmp/rlvr-run-1-x")
    assert (env["RAY_TMPDIR"], env["TORCHINDUCTOR_CACHE_DIR"]) == ("/data/ray", "/data/inductor")


def test_the_given_environment_wins_over_this_processs(monkeypatch):
    """A child started with an environment of its own (the judge server's `env`) keeps that environment's places."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/data/inductor")
    monkeypatch.setenv("RAY_TMPDIR", "/data/ray")
    env = tmpdir_env("/tmp/rlvr-run-1-x", {"TORCHINDUCTOR_CACHE_DIR": "/tmp/test-inductor"})
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/test-inductor"
    assert env["RAY_TMPDIR"] == tempfile.gettempdir()  # not in the given environment: the default, not ours
