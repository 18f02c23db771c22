"""Per-request seeds and the Gumbel-max sampler that gives HF generate per-row seeded sampling."""

import math

import torch

from rlvr.backends.seeded_sampling import GumbelNoise, request_seed, seeded_sampling_processors


def test_request_seed_depends_only_on_engine_seed_and_id():
    # blake2b-64 of "42:s0:1:train:7", little-endian, mod 2**31 - 2**16: the same in every process and run
    assert request_seed(42, "s0:1:train:7") == request_seed(42, "s0:1:train:7") == 519149058
    assert request_seed(42, "s0:2:train:7") != request_seed(42, "s0:1:train:7")
    assert request_seed(43, "s0:1:train:7") != request_seed(42, "s0:1:train:7")
    assert 0 <= request_seed(0, "x") < 2**31 - 2**16


def test_a_row_samples_the_same_whatever_the_rows_beside_it():
    scores = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    alone = GumbelNoise([11])(None, scores).argmax(-1)
    crowd = GumbelNoise([5, 11, 99])(None, scores.repeat(3, 1)).argmax(-1)
    assert crowd[1] == alone[0]


def test_gumbel_max_samples_the_softmax():
    # p = softmax(log [0.7, 0.2, 0.1]); 20,000 rows with their own seeds: frequencies within 4 standard errors
    probs = torch.tensor([0.7, 0.2, 0.1])
    n = 20_000
    picks = GumbelNoise(list(range(n)))(None, probs.log().repeat(n, 1)).argmax(-1)
    freq = torch.bincount(picks, minlength=3).float() / n
    assert torch.all((freq - probs).abs() < 4 * torch.sqrt(probs * (1 - probs) / n)), freq


def test_temperature_and_top_k_apply_before_the_noise():
    # top_k=1 leaves one finite score: every seed picks it; T only scales, the order stays
    scores = torch.tensor([[0.1, 3.0, 2.9, -1.0]])
    processors = seeded_sampling_processors(0.5, 1, 1.0, seeds=[1])
    out = scores
    for p in processors:
        out = p(torch.zeros((1, 1), dtype=torch.long), out)
    assert out.argmax(-1).item() == 1 and math.isinf(out[0, 0].item())
