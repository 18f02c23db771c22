"""Dithered rounding of fp32 masters into bf16 (rlvr/backends/bf16_rounding.py): exact on the bf16 grid, the lower
or upper neighbour otherwise, and on average as far as the masters moved, where round-to-nearest does not move."""

from __future__ import annotations

import pytest
import torch

from rlvr.backends.bf16_rounding import dither_thresholds, dithered_bf16

pytestmark = pytest.mark.quick


def grid_weights(n: int, seed: int = 0) -> torch.Tensor:
    """Weights as a bf16 checkpoint holds them: exact bf16 values of both signs, magnitudes around 0.1; none a
    power of two (below one the bf16 step halves: a move toward zero of a fraction of the step above would be
    twice that fraction of the step below)."""
    g = torch.Generator().manual_seed(seed)
    w = (0.1 * torch.randn(n, generator=g)).to(torch.bfloat16).float()
    return torch.where(torch.frexp(w).mantissa.abs() == 0.5, w * 1.5, w)


def step_of(w: torch.Tensor) -> torch.Tensor:
    """The bf16 spacing above |w| (7 stored mantissa bits)."""
    return torch.ldexp(torch.ones_like(w), torch.frexp(w.abs()).exponent - 8)


def thresholds(n: int, seed: int = 1) -> torch.Tensor:
    return dither_thresholds(torch.Size([n]), torch.Generator().manual_seed(seed))


def test_a_master_on_the_grid_rounds_to_itself():
    w = grid_weights(10_000)
    assert torch.equal(dithered_bf16(w, thresholds(10_000)).float(), w)
    assert thresholds(10_000).dtype == torch.uint8


def test_the_copy_is_one_of_the_two_neighbours():
    w = grid_weights(10_000)
    moved = w + 0.3 * step_of(w) * torch.sign(w)  # outward, within one step
    out = dithered_bf16(moved, thresholds(10_000)).float()
    assert torch.all((out == w) | (out == w + step_of(w) * torch.sign(w)))


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.7])
@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_on_average_the_copy_moves_as_far_as_the_masters(fraction, direction):
    """Round-to-nearest leaves every weight where it was below half a step (the freeze the module exists to
    avoid); dithered rounding moves the mean as far as the masters moved, within the sampling error of n flips."""
    n = 200_000
    w = grid_weights(n)
    delta = direction * fraction * step_of(w) * 0.999  # stay inside the step (a step's end is the next grid point)
    masters = w + delta
    nearest = masters.to(torch.bfloat16).float() - w
    dithered = dithered_bf16(masters, thresholds(n)).float() - w
    if fraction < 0.5:
        assert torch.count_nonzero(nearest) == 0
    ratio = float((dithered / step_of(w)).mean() / (delta / step_of(w)).mean())
    assert ratio == pytest.approx(1.0, abs=0.02)  # n flips of probability p: relative s.e. < 0.01 here


def test_the_copy_is_a_function_of_the_master_and_its_thresholds():
    w = grid_weights(1_000) * 1.001
    t = thresholds(1_000)
    assert torch.equal(dithered_bf16(w, t), dithered_bf16(w.clone(), t.clone()))
    assert not torch.equal(dithered_bf16(w, t), dithered_bf16(w, thresholds(1_000, seed=2)))


def test_zero_and_a_carry_into_the_exponent():
    just_below_one = torch.tensor([1.0 - 2.0**-9, 0.0, -0.0])  # half a step below 1.0 (steps of 2^-8 below it)
    out = dithered_bf16(just_below_one, torch.tensor([255, 255, 0], dtype=torch.uint8)).float()
    assert out.tolist() == [1.0, 0.0, 0.0]
