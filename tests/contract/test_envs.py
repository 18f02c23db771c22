"""The shipped environments against the Env contract: determinism per seed, state keys, invalid actions, limits.
The code-repair env runs every attempt in the real bubblewrap sandbox."""

from __future__ import annotations

import asyncio
import re

import pytest

from rlvr.envs.base import Env, checked_step
from rlvr.envs.code_repair import TEMPLATES, CodeRepairEnv
from rlvr.envs.grid_puzzle import GridPuzzleEnv, generate_level, parse_move, shortest_path


# ---------------------------------------------------------------------------------------------- grid puzzle
def play_grid(env: GridPuzzleEnv, task: dict, seed: int, actions: list[str]) -> list:
    out = [env.reset(task, seed)]
    for a in actions:
        out.append(checked_step(env.step(a)))
        if out[-1][2]:
            break
    return out


def test_grid_is_deterministic_per_task_and_seed():
    tasks = GridPuzzleEnv.make_tasks("train", 20, seed=3)
    assert tasks == GridPuzzleEnv.make_tasks("train", 20, seed=3)
    assert tasks != GridPuzzleEnv.make_tasks("train", 20, seed=4)
    actions = ["left", "up", "down", "right", "up"]
    for task in tasks[:5]:
        assert play_grid(GridPuzzleEnv(), task, 0, actions) == play_grid(GridPuzzleEnv(), task, 0, actions)
    boards = {GridPuzzleEnv().reset(t, 0) for t in tasks}
    assert len(boards) > 5  # the levels differ


def test_grid_levels_are_solvable_and_within_the_distance_band():
    for level in range(300):
        start, goal, holes = generate_level(level, 4, 3, 2, 3)
        assert 2 <= abs(start[0] - goal[0]) + abs(start[1] - goal[1]) <= 3 and len(holes) == 3
        assert start not in holes and goal not in holes and shortest_path(start, goal, holes, 4) is not None


def test_grid_state_keys_name_the_board_not_the_feedback():
    env = GridPuzzleEnv(size=3, holes=0, min_distance=2, max_distance=2)
    first = env.reset({"level": 5}, 0)
    start = env.state_key(first)
    invalid, _, _, info = env.step("hmm")
    assert info["invalid_action"] and env.state_key(invalid) == start  # same board, other text: same anchor
    for move in ("up", "down", "left", "right"):
        other = GridPuzzleEnv(size=3, holes=0, min_distance=2, max_distance=2)
        other.reset({"level": 5}, 0)
        obs, _, done, _ = other.step(move)
        if not done and other.player != env.player:
            assert other.state_key(obs) != start
            back = {"up": "down", "down": "up", "left": "right", "right": "left"}[move]
            obs_back, _, _, _ = other.step(back)
            assert other.state_key(obs_back) == start  # the same board reached again: the same anchor
            break
    else:
        pytest.fail("no move changed the board")
    # the base class's default (Env is abstract: called on a concrete env): whitespace-normalised text
    assert Env.state_key(env, "a  b\n") == Env.state_key(env, "a b")


def test_grid_invalid_actions_are_counted_penalised_and_the_player_stays():
    env = GridPuzzleEnv(invalid_penalty=-0.25)
    env.reset({"level": 1}, 0)
    before = env.player
    obs, reward, done, info = env.step("I would rather not say")
    assert info == {"invalid_action": True} and reward == -0.25 and not done and env.player == before
    assert "not a move" in obs
    assert parse_move("Let me go LEFT, then up") == "left" and parse_move("upward") is None


def test_grid_edges_goal_and_holes():
    env = GridPuzzleEnv(size=2, holes=1, min_distance=1, max_distance=1)
    env.reset({"level": 0}, 0)
    env.player, env.goal, env.holes = (0, 0), (0, 1), frozenset({(1, 0)})
    assert env.step("up")[1:3] == (0.0, False) and env.player == (0, 0)  # the edge: a legal move, no effect
    obs, reward, done, info = env.step("down")
    assert (reward, done, info["success"]) == (0.0, True, False) and "hole" in obs
    env.player = (0, 0)
    obs, reward, done, info = env.step("right")
    assert (reward, done, info["success"]) == (1.0, True, True)


def test_grid_rejects_bad_arguments():
    for args in ({"size": 1}, {"min_distance": 0}, {"min_distance": 3, "max_distance": 2}, {"holes": 8}):
        with pytest.raises(ValueError):
            GridPuzzleEnv(**args)
    with pytest.raises(KeyError, match="level"):
        GridPuzzleEnv().reset({}, 0)


# ---------------------------------------------------------------------------------------------- code repair
def fix(task: dict) -> str:
    """The reference fix of a generated task, by template (what a perfect policy would answer)."""
    fixes = {"add_k": "x + {k}", "times_k": "x * {k}", "is_multiple": "n % {k} == 0", "largest": "max(xs)",
             "last_item": "xs[-1]", "sum_to": "sum(range(n + 1))", "reverse_text": "s[::-1]",
             "clamp_k": "max(0, min(x, {k}))"}
    if task["fn"] == "factorial":
        return task["code"].replace("range(1, n)", "range(1, n + 1)")
    numbers = re.findall(r"\d+", task["code"].split("return")[-1])
    k = numbers[0] if task["fn"] == "is_multiple" else numbers[-1] if numbers else "0"
    head = task["code"].split("\n")[0]
    return f"{head}\n    return {fixes[task['fn']].format(k=k)}\n"


def test_code_repair_tasks_are_deterministic_and_cover_the_templates():
    tasks = CodeRepairEnv.make_tasks("train", len(TEMPLATES), seed=1)
    assert tasks == CodeRepairEnv.make_tasks("train", len(TEMPLATES), seed=1)
    assert {t["fn"] for t in tasks} == {t[0] for t in TEMPLATES}
    assert CodeRepairEnv.make_tasks("val", 4, seed=1) != tasks[:4]


def test_code_repair_episode_in_the_sandbox():
    task = next(t for t in CodeRepairEnv.make_tasks("train", len(TEMPLATES), seed=2) if t["fn"] == "add_k")

    async def episode():
        env = CodeRepairEnv()
        first = await env.reset(task, 0)
        again = await CodeRepairEnv().reset(task, 0)
        assert first == again and "Failing tests" in first and task["code"].strip() in first
        no_code = await env.step("I will fix it soon.")
        wrong = await env.step("```python\ndef add_k(x):\n    return 0\n```")
        wrong_again = await env.step("Here:\n```python\ndef add_k(x):\n    return 0\n```")
        loop = await env.step("```python\ndef add_k(x):\n    while True:\n        pass\n```")
        right = await env.step(f"```python\n{fix(task)}```")
        return env, no_code, wrong, wrong_again, loop, right

    env, no_code, wrong, wrong_again, loop, right = asyncio.run(episode())
    assert no_code[1:] == (0.0, False, {"invalid_action": True}) and "No ```python code block" in no_code[0]
    obs, reward, done, info = checked_step(wrong)
    assert (reward, done, info["pass_frac"]) == (0.0, False, 0.0)
    assert all(t in obs for t in task["tests"])  # the failing tests are the next observation
    assert env.state_key(wrong[0]) == env.state_key(wrong_again[0])  # the same failures: the same state
    assert loop[1:3] == (0.0, False) and "Failing tests" in loop[0]  # an endless loop fails under the limits
    assert right[1:3] == (1.0, True) and right[3]["success"]


def test_every_template_has_a_failing_bug_and_a_fix():
    tasks = CodeRepairEnv.make_tasks("train", len(TEMPLATES), seed=5)

    async def check():
        out = []
        for task in tasks:
            env = CodeRepairEnv(max_parallel=2)
            first = await env.reset(task, 0)
            out.append((task["fn"], first, await env.step(f"```python\n{fix(task)}```")))
        return out

    for fn, first, (obs, reward, done, _) in asyncio.run(check()):
        assert "Failing tests (0 of" not in first, fn  # the planted bug fails at least one test
        assert reward == 1.0 and done, (fn, obs)


def test_code_repair_rejects_bad_arguments():
    with pytest.raises(ValueError, match="sandbox"):
        CodeRepairEnv(sandbox="docker")
    with pytest.raises(ValueError, match="url"):
        CodeRepairEnv(sandbox="http")
    with pytest.raises(KeyError):
        asyncio.run(CodeRepairEnv().reset({"fn": "f"}, 0))


def test_code_repair_runs_on_uvloop_as_inside_a_ray_actor():
    """Ray's async actors (the schedulers that host envs) run uvloop, whose subprocess_exec refuses the per-run
    uid the sandbox uses as root: the run must still happen."""
    uvloop = pytest.importorskip("uvloop")
    task = CodeRepairEnv.make_tasks("val", 1, seed=0)[0]
    policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # as in a Ray async actor: new loops are uvloop's too
    loop = uvloop.new_event_loop()
    try:
        first = loop.run_until_complete(CodeRepairEnv().reset(task, 0))
        again = loop.run_until_complete(CodeRepairEnv().reset(task, 0))  # and again: nothing used up
    finally:
        loop.close()
        asyncio.set_event_loop_policy(policy)
    assert "Failing tests" in first and again == first
