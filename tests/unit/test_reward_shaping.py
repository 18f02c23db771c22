import pytest

from rlvr.algorithms.reward_shaping import overlong_penalty


# L_max = 20, L_cache = 4, factor 1: free up to 16 tokens, then -1/4 per token, -1 beyond 20
@pytest.mark.parametrize("length, expected", [(10, 0.0), (16, 0.0), (17, -0.25), (18, -0.5), (20, -1.0), (21, -1.0)])
def test_dapo_overlong_penalty(length, expected):
    assert overlong_penalty(length, 20, 4, 1.0) == pytest.approx(expected)


def test_factor_scales_and_bad_cache_rejected():
    assert overlong_penalty(18, 20, 4, 0.5) == pytest.approx(-0.25)
    with pytest.raises(ValueError):
        overlong_penalty(5, 20, 0)
    with pytest.raises(ValueError):
        overlong_penalty(5, 20, 21)
