"""Hand-computed checks of the per-token KL estimators."""

import pytest
import torch

from rlvr.algorithms.kl import KL_KINDS, kl_penalty

# logp - ref = [0.5, -1.0, 0.0]; ref - logp = [-0.5, 1.0, 0.0]
LOGP = torch.tensor([[-1.0, -2.0, -0.3]])
REF = torch.tensor([[-1.5, -1.0, -0.3]])


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def test_k1():
    close(kl_penalty(LOGP, REF, "k1"), [[0.5, -1.0, 0.0]])


def test_k2():
    # 0.5 * [0.25, 1, 0]
    close(kl_penalty(LOGP, REF, "k2"), [[0.125, 0.5, 0.0]])


def test_k3():
    # exp(-0.5) + 0.5 - 1 = 0.606531 - 0.5 = 0.106531 ; exp(1) - 1 - 1 = 0.718282 ; exp(0) - 0 - 1 = 0
    close(kl_penalty(LOGP, REF, "k3"), [[0.106531, 0.718282, 0.0]])


def test_abs():
    close(kl_penalty(LOGP, REF, "abs"), [[0.5, 1.0, 0.0]])


def test_low_var_kl_equals_k3_in_range_and_clamps_outside():
    close(kl_penalty(LOGP, REF, "low_var_kl"), [[0.106531, 0.718282, 0.0]])
    # ref - logp = 3: k3 = e^3 - 3 - 1 = 20.085537 - 4 = 16.085537 -> low_var_kl clamps to 10
    logp = torch.tensor([0.0, 0.0])
    ref = torch.tensor([3.0, 100.0])
    close(kl_penalty(logp, ref, "k3")[:1], [16.085537], atol=1e-4)
    # ref - logp = 100 would overflow exp in k3's unclamped form; low_var_kl stays finite at 10
    close(kl_penalty(logp, ref, "low_var_kl"), [10.0, 10.0])


def test_k3_gradient():
    # d/dlogp [exp(ref-logp) - (ref-logp) - 1] = 1 - exp(ref-logp)
    # ref-logp = -0.5 -> 1 - 0.606531 = 0.393469 ; ref-logp = 1 -> 1 - 2.718282 = -1.718282 ; 0 -> 0
    logp = LOGP.clone().requires_grad_(True)
    kl_penalty(logp, REF, "k3").sum().backward()
    close(logp.grad, [[0.393469, -1.718282, 0.0]])


def test_non_negative_estimators():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(4, 7, generator=g)
    ref = torch.randn(4, 7, generator=g)
    for kind in ("k2", "k3", "low_var_kl", "abs"):
        assert (kl_penalty(logp, ref, kind) >= 0).all(), kind


def test_unknown_kind_lists_valid_kinds():
    with pytest.raises(ValueError) as exc:
        kl_penalty(LOGP, REF, "k4")
    for kind in KL_KINDS:
        assert kind in str(exc.value)
    assert set(KL_KINDS) == {"k1", "k2", "k3", "low_var_kl", "abs"}


def test_shape_mismatch():
    with pytest.raises(ValueError):
        kl_penalty(torch.zeros(2, 3), torch.zeros(2, 4), "k1")
