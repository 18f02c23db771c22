"""bench/async_at_scale.py --measured: a saved run is turned into the simulation of its own settings. Checked on a
run whose truth is known: a simulated "measurement" (written in bench/async_reward.py's save format, with the
latencies its judge drew and a transport overhead on top) must be reproduced by the agreement path, and a
measurement the simulation cannot explain (a slower device than the calibration said) must be flagged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlvr.sim.latency import LatencyModel
from rlvr.sim.pipeline import DOMAIN, OVERLAP_MODES, SimSpec, simulate
from tests.helpers.bench_modules import load_bench

SETTINGS = dict(prompts=4, group_size=5, mini_batches=4, engine_batches=4, concurrency=2, deadline_s=120.0,
                steps=5, warmup_steps=2, low=0.2, high=2.0)  # compute and rewards both matter
OFFSET_S = 0.03  # the transport overhead the "measured" calls carry on top of the judge's draws
BEHAVIOUR_S = 2.0  # what generation costs more when it returns behaviour logprobs (the overlapped modes)


def _bench():
    return load_bench("async_at_scale")


def _spec(latency: LatencyModel, draws: tuple[float, ...] = (), slow: float = 1.0, generate_s: float = 6.0
          ) -> SimSpec:
    s = SETTINGS
    return SimSpec(prompts_per_step=s["prompts"], group_size=5, concurrency=s["concurrency"], latency=latency,
                   generate_s=generate_s * slow, train_s=4.0 * slow, model_update_s=0.5 * slow,
                   old_logprobs_s=1.0 * slow, behaviour_logprobs_s=BEHAVIOUR_S * slow, steps=s["steps"],
                   replay_latencies=draws)


def _saved(tmp_path: Path, slow_modes: tuple[str, ...] = ()) -> Path:
    """A saved 'measurement': a calibration with instant rewards (and one whose generation returns behaviour
    logprobs: sync itself never asks for them), then each mode with the judge's draws."""
    samples = SETTINGS["prompts"] * 5 * SETTINGS["steps"]
    rng = np.random.default_rng(0)
    instant = LatencyModel("uniform", low=0.0, high=0.0)
    calibration = simulate(_spec(instant), OVERLAP_MODES["sync"])
    behaviour = simulate(_spec(instant, generate_s=6.0 + BEHAVIOUR_S), OVERLAP_MODES["sync"])
    modes = {}
    for name, mode in OVERLAP_MODES.items():
        draws = tuple(float(x) for x in rng.uniform(SETTINGS["low"], SETTINGS["high"], samples))
        latency = LatencyModel("uniform", low=SETTINGS["low"], high=SETTINGS["high"], offset_s=OFFSET_S)
        records = simulate(_spec(latency, draws, slow=2.0 if name in slow_modes else 1.0), mode)
        modes[name] = {"records": records, "draws": list(draws)}
    path = tmp_path / "measured.json"
    path.write_text(json.dumps({"settings": SETTINGS, "calibration": calibration,
                                "calibration_behaviour": behaviour, "modes": modes}))
    return path


def test_a_known_run_is_reproduced_from_its_saved_form(tmp_path, capsys):
    bench = _bench()
    saved = json.loads(_saved(tmp_path).read_text())
    spec = bench.measured_spec(saved, "streaming")
    assert spec.generate_s == pytest.approx(6.0, abs=0.02)  # + the engine's 5 ms gathering per wave
    assert spec.train_s == pytest.approx(4.0)
    assert spec.old_logprobs_s == pytest.approx(1.0)  # the sync loop's old-logprob pass (time/forwards)
    assert spec.behaviour_logprobs_s == pytest.approx(BEHAVIOUR_S, abs=0.02)
    assert spec.model_update_s == pytest.approx(0.5)
    assert spec.latency.offset_s == pytest.approx(OFFSET_S, abs=1e-3)
    assert bench.agreement_table(tmp_path / "measured.json")
    assert "agree" in capsys.readouterr().out


def test_a_measurement_the_simulation_cannot_explain_is_flagged(tmp_path, capsys):
    bench = _bench()
    path = _saved(tmp_path, slow_modes=("both",))  # its device ran 2x slower than the calibration says
    assert not bench.agreement_table(path)
    out = capsys.readouterr().out
    assert "DISAGREE" in out
    row = next(line for line in out.splitlines() if line.startswith("| both |"))
    assert float(row.split("|")[4]) < 1 - bench.AGREEMENT  # simulated / measured


def test_saved_records_carry_the_keys_the_agreement_reads():
    records = simulate(_spec(LatencyModel("uniform", low=0.1, high=0.2)), OVERLAP_MODES["sync"])
    for key in ("time/step", "time/reward_wait", "time/model_update", "time/generate", "time/forwards",
                "time/batch", "time/advantages", "time/train", f"{DOMAIN}/reward/latency/mean"):
        assert all(key in r for r in records), key
