from rlvr.schedulers.quotas import allocate_quotas


def run(probs, total, steps):
    credit, out = None, []
    for _ in range(steps):
        quotas, credit = allocate_quotas(probs, total, credit)
        out.append(quotas)
    return out


def test_exact_split():
    assert run({"a": 0.5, "b": 0.5}, 8, 2) == [{"a": 4, "b": 4}] * 2


def test_remainders_rotate_so_long_run_is_exact():
    # 8 prompts over three equal domains: 8/3 each is owed; the odd unit moves from domain to domain.
    assert run({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, 8, 3) == [
        {"a": 3, "b": 3, "c": 2}, {"a": 3, "b": 2, "c": 3}, {"a": 2, "b": 3, "c": 3}]


def test_each_step_sums_to_total_and_small_domain_is_served():
    steps = run({"big": 0.9, "small": 0.1}, 4, 10)
    assert all(sum(q.values()) == 4 for q in steps)
    assert sum(q["small"] for q in steps) == 4  # 0.1 x 4 x 10
    assert sum(q["big"] for q in steps) == 36


def test_zero_probability_never_served():
    steps = run({"a": 0.5, "b": 0.5, "z": 0.0}, 3, 5)
    assert all(q["z"] == 0 for q in steps)
    assert [q["a"] for q in steps] == [2, 1, 2, 1, 2]
