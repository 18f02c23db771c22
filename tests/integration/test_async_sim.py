"""The simulator (rlvr/sim) drives rlvr's own step loop, scheduler and reward agent in simulated time; here at a
small scale, every overlap mode: each sample is scored once and trained once, all simulated time is in the
logged phases, no run beats what its device and reward service can do, and the modes order as they must.
No Ray, no model: this runs in a few seconds."""

from __future__ import annotations

import pytest

from rlvr.sim.latency import LatencyModel
from rlvr.sim.pipeline import DOMAIN, OVERLAP_MODES, SimSpec, simulate, steady

SPEC = SimSpec(prompts_per_step=8, concurrency=4, latency=LatencyModel("uniform", low=1.0, high=4.0),
               generate_s=8.0, train_s=8.0, model_update_s=1.0, old_logprobs_s=2.0, steps=5)


@pytest.fixture(scope="module")
def runs():
    return {name: simulate(SPEC, mode) for name, mode in OVERLAP_MODES.items()}


@pytest.mark.parametrize("name", list(OVERLAP_MODES))
def test_every_sample_is_scored_once_and_trained_once(runs, name):
    records = runs[name]
    assert [r["step"] for r in records] == list(range(SPEC.steps))
    last = records[-1]
    assert last["sim/reward_calls"] == SPEC.steps * SPEC.samples
    assert last["sim/trained_rows"] == SPEC.steps * SPEC.samples
    for r in records:
        assert r["batch/samples"] == SPEC.samples
        assert r[f"{DOMAIN}/reward/status/ok"] == SPEC.samples


@pytest.mark.parametrize("name", list(OVERLAP_MODES))
def test_simulated_time_is_all_in_the_phases_and_respects_the_bounds(runs, name):
    records = runs[name]
    end, last = records[-1]["sim/end_s"], records[-1]
    assert sum(r["time/step"] for r in records) == pytest.approx(end)
    assert end >= last["sim/device_busy_s"] - 1e-6  # one device: its jobs cannot overlap
    assert end >= last["sim/reward_slot_s"] / SPEC.concurrency - 1e-6  # at most `concurrency` calls at once
    assert max(r["reward/in_flight_peak"] for r in records) <= SPEC.concurrency


def test_modes_order_as_the_overlap_allows(runs):
    step = {name: steady(records, SPEC, "time/step") for name, records in runs.items()}
    assert step["sync"] > step["pipeline"] > step["both"]
    assert step["sync"] > step["off-policy"] >= step["both"] >= step["streaming"]
    staleness = {name: max(r["batch/staleness/max"] for r in records) for name, records in runs.items()}
    assert staleness == {"sync": 0, "pipeline": 0, "off-policy": 1, "both": 1, "streaming": 1}


def test_stragglers_are_cut_by_the_deadline_and_masked():
    spec = SimSpec(prompts_per_step=8, concurrency=4, steps=3, generate_s=2.0, train_s=2.0, deadline_s=10.0,
                   latency=LatencyModel("uniform", low=1.0, high=2.0, straggler_frac=0.2, straggler_factor=20))
    records = simulate(spec, OVERLAP_MODES["streaming"])
    timeouts = sum(r[f"{DOMAIN}/reward/status/timeout"] for r in records)
    assert timeouts > 0
    assert sum(r["batch/masked_samples"] for r in records) == timeouts
    assert all(r[f"{DOMAIN}/reward/latency/max"] <= spec.deadline_s + 1e-6 for r in records)


def test_same_spec_same_run():
    spec = SimSpec(prompts_per_step=4, concurrency=2, latency=LatencyModel("uniform", low=0.5, high=3.0),
                   generate_s=1.0, train_s=1.0, steps=3)
    assert simulate(spec, OVERLAP_MODES["streaming"]) == simulate(spec, OVERLAP_MODES["streaming"])


def test_a_measured_trace_is_replayed_step_by_step():
    trace = ({"generate_s": 4.0, "train_s": 2.0}, {"generate_s": 10.0, "train_s": 6.0, "model_update_s": 1.5})
    spec = SimSpec(prompts_per_step=4, concurrency=2, latency=LatencyModel("uniform", low=0.5, high=1.0),
                   generate_s=1.0, train_s=1.0, steps=3, trace=trace)
    records = simulate(spec, OVERLAP_MODES["sync"])
    assert [r["time/generate"] for r in records] == pytest.approx([4.0, 10.0, 1.0], abs=0.01)  # +5 ms gathering
    assert [r["time/train"] for r in records] == pytest.approx([2.0, 6.0, 1.0])
    assert [r["time/model_update"] for r in records] == pytest.approx([0.0, 1.5, 0.0])
    # the scheduler's own measure of the generation (the driver's one is not there when pipelined)
    assert [r[f"{DOMAIN}/timing/generate_span"] for r in records] == pytest.approx([4.0, 10.0, 1.0], abs=0.01)


def test_measured_latencies_are_replayed_in_call_order():
    spec = SimSpec(prompts_per_step=2, concurrency=1, latency=LatencyModel("uniform", low=1.0, high=1.0),
                   generate_s=0.0, train_s=0.0, steps=1, replay_latencies=(3.0,) * 5 + (1.0,) * 5)
    records = simulate(spec, OVERLAP_MODES["sync"])
    # one slot: the ten calls run back to back, 5 x 3 s then 5 x 1 s
    assert records[0][f"{DOMAIN}/reward/latency/max"] == pytest.approx(3.0)
    assert records[0]["sim/reward_slot_s"] == pytest.approx(20.0)
    assert records[0]["time/reward_wait"] == pytest.approx(20.0, abs=0.01)


def test_steady_window_skips_the_warm_up_and_optionally_the_last_step():
    spec = SimSpec(prompts_per_step=1, concurrency=1, latency=LatencyModel("uniform", low=1, high=1),
                   generate_s=0.0, train_s=0.0, steps=5)
    records = [{"step": i, "x": float(i)} for i in range(5)]
    assert steady(records, spec, "x") == 3.0  # steps 2, 3, 4
    assert steady(records, spec, "x", drop_last=True) == 2.5  # steps 2, 3


def test_behaviour_logprobs_cost_generation_time_only_where_the_ratio_anchors_on_them():
    spec = SimSpec(prompts_per_step=4, concurrency=2, latency=LatencyModel("uniform", low=0.1, high=0.2),
                   generate_s=3.0, behaviour_logprobs_s=2.0, old_logprobs_s=1.0, train_s=1.0, steps=3)
    span = {name: [r[f"{DOMAIN}/timing/generate_span"] for r in simulate(spec, OVERLAP_MODES[name])]
            for name in ("sync", "pipeline")}
    assert span["sync"] == pytest.approx([3.0] * 3, abs=0.03)  # sync: the trainer's old-logprob pass instead
    assert span["pipeline"] == pytest.approx([5.0] * 3, abs=0.03)
    assert spec.compute(OVERLAP_MODES["sync"]) == pytest.approx(5.0)
    assert spec.compute(OVERLAP_MODES["pipeline"]) == pytest.approx(6.0)
