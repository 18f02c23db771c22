"""Reward latency models of the simulator: E[min(latency, deadline)] by hand, and draws that match it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlvr.sim.latency import LatencyModel, lognormal_capped_mean, uniform_capped_mean


def test_uniform_capped_mean_by_hand():
    assert uniform_capped_mean(1, 40, math.inf) == 20.5
    # U(0, 10) cut at 5: half the mass averages 2.5, the other half counts 5 -> 3.75
    assert uniform_capped_mean(0, 10, 5) == pytest.approx(3.75)
    assert uniform_capped_mean(2, 4, 1) == 1


def test_lognormal_capped_mean_by_hand():
    # ln X ~ N(0, 1) cut at 1 = e^0: E[X; X < 1] = e^0.5 Phi(-1) = 1.648721 x 0.158655, plus 1 x P(X >= 1) = 0.5
    assert lognormal_capped_mean(0.0, 1.0, 1.0) == pytest.approx(1.648721 * 0.158655 + 0.5, rel=1e-5)
    assert lognormal_capped_mean(0.0, 1.0, 1e12) == pytest.approx(math.exp(0.5))


def test_stragglers_are_cut_by_the_deadline():
    m = LatencyModel("uniform", low=10, high=10, straggler_frac=0.1, straggler_factor=20)
    # 90% take 10 s, 10% would take 200 s but hold the slot only until the 60 s deadline
    assert m.expected(60) == pytest.approx(0.9 * 10 + 0.1 * 60)
    assert m.expected() == pytest.approx(0.9 * 10 + 0.1 * 200)
    assert LatencyModel("uniform", low=1, high=3, offset_s=0.5).expected() == pytest.approx(2.5)


@pytest.mark.parametrize("model", [
    LatencyModel("uniform", low=1, high=40),
    LatencyModel("lognormal", mean=20.5, sigma=1.0, straggler_frac=0.01, straggler_factor=20),
])
def test_draws_agree_with_the_expectation(model):
    rng = np.random.default_rng(0)
    draws = np.array([model.draw(rng) for _ in range(100_000)])
    assert np.minimum(draws, 120).mean() == pytest.approx(model.expected(120), rel=0.02)
