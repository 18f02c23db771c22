"""A seeded grid puzzle in the style of FrozenLake: walk the player P to the goal G without stepping into a hole H.

Levels come from their seed (`task["level"]`): an n x n grid, the goal `min_distance`..`max_distance` moves from
the start (Manhattan), `holes` holes placed so that a safe path always exists (checked by breadth-first search).
Moves are deterministic; the episode's `seed` is not used (same task: same game).

    action   the first of the words up / down / left / right in the reply (case-insensitive); none: an invalid
             action (counted, `invalid_penalty`, the player stays, the observation says how to answer)
    reward   1.0 on reaching G (done, success); 0.0 on falling into H (done); `invalid_penalty` for an invalid
             action; 0.0 otherwise (bumping into the edge included: a legal move that goes nowhere)
    state    the board (the grid lines of the observation), so that feedback text ("You moved right.") does not
             split GiGPO's anchor groups

The defaults (3 x 3, goal one or two moves away, one hole) are easy enough that the 135M default model solves
some levels by chance and format (see bench/gigpo.py for the measured rate).
"""

from __future__ import annotations

import random
import re
from collections import deque
from typing import Any

from rlvr.envs.base import Env

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_MOVE_WORD = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)
_GRID_LINE = re.compile(r"^[PGH.](?: [PGH.])*$")

INSTRUCTIONS = ("You are the player P on a grid. Reach the goal G. Do not step on a hole H. "
                "Row 1 is the top row.")
ASK = "Which way do you move? Answer with one word: up, down, left or right."


class GridPuzzleEnv(Env):
    system_prompt = "You are playing a grid game. Answer each turn with one move."

    def __init__(self, size: int = 3, holes: int = 1, min_distance: int = 1, max_distance: int = 2,
                 invalid_penalty: float = -0.1):
        if size < 2:
            raise ValueError(f"size must be >= 2, got {size}")
        if not 1 <= min_distance <= max_distance <= 2 * (size - 1):
            raise ValueError(f"need 1 <= min_distance <= max_distance <= {2 * (size - 1)} for size {size}, "
                             f"got {min_distance}..{max_distance}")
        if not 0 <= holes <= size * size - 2:
            raise ValueError(f"holes must be in 0..{size * size - 2}, got {holes}")
        self.size, self.n_holes = size, holes
        self.min_distance, self.max_distance = min_distance, max_distance
        self.invalid_penalty = float(invalid_penalty)
        self.player: tuple[int, int] = (0, 0)
        self.goal: tuple[int, int] = (0, 0)
        self.holes: frozenset[tuple[int, int]] = frozenset()

    # ------------------------------------------------------------------ contract
    def reset(self, task: dict[str, Any], seed: int) -> str:
        if "level" not in task:
            raise KeyError(f"grid puzzle task needs a 'level' seed, got keys {sorted(task)}")
        self.player, self.goal, self.holes = generate_level(int(task["level"]), self.size, self.n_holes,
                                                           self.min_distance, self.max_distance)
        return f"{INSTRUCTIONS}\n\n{self.render()}\n\n{ASK}"

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        move = parse_move(action_text)
        if move is None:
            return (f"That is not a move.\n\n{self.render()}\n\n{ASK}", self.invalid_penalty, False,
                    {"invalid_action": True})
        dr, dc = MOVES[move]
        row, col = self.player[0] + dr, self.player[1] + dc
        if not (0 <= row < self.size and 0 <= col < self.size):
            return f"You bumped into the edge.\n\n{self.render()}\n\n{ASK}", 0.0, False, {}
        self.player = (row, col)
        if self.player == self.goal:
            return f"You moved {move} and reached the goal!", 1.0, True, {"success": True}
        if self.player in self.holes:
            return f"You moved {move} and fell into a hole.", 0.0, True, {"success": False}
        return f"You moved {move}.\n\n{self.render()}\n\n{ASK}", 0.0, False, {}

    def state_key(self, observation: str) -> str:
        board = [line for line in observation.splitlines() if _GRID_LINE.match(line.strip())]
        return "\n".join(board) if board else super().state_key(observation)

    # ------------------------------------------------------------------ helpers
    def render(self) -> str:
        rows = []
        for r in range(self.size):
            cells = []
            for c in range(self.size):
                cells.append("P" if (r, c) == self.player else "G" if (r, c) == self.goal
                             else "H" if (r, c) in self.holes else ".")
            rows.append(" ".join(cells))
        return "\n".join(rows)


def parse_move(text: str) -> str | None:
    match = _MOVE_WORD.search(text)
    return match.group(1).lower() if match else None


def generate_level(level: int, size: int, holes: int, min_distance: int,
                   max_distance: int) -> tuple[tuple[int, int], tuple[int, int], frozenset[tuple[int, int]]]:
    """(start, goal, holes) of a solvable level, a pure function of its arguments."""
    rng = random.Random(f"grid:{level}:{size}:{holes}:{min_distance}:{max_distance}")
    cells = [(r, c) for r in range(size) for c in range(size)]
    def goals(start: tuple[int, int]) -> list[tuple[int, int]]:
        return [g for g in cells if min_distance <= abs(g[0] - start[0]) + abs(g[1] - start[1]) <= max_distance]

    starts = [c for c in cells if goals(c)]  # far goals exist only from some starts (corners)
    for _ in range(1000):
        start = rng.choice(starts)
        goal = rng.choice(goals(start))
        free = [c for c in cells if c not in (start, goal)]
        chosen = frozenset(rng.sample(free, holes))
        if shortest_path(start, goal, chosen, size) is not None:
            return start, goal, chosen
    raise RuntimeError(f"no solvable level for seed {level} with size {size} and {holes} holes")


def shortest_path(start: tuple[int, int], goal: tuple[int, int], holes: frozenset, size: int) -> int | None:
    """Moves on the shortest safe path (None when there is none): the optimum a solved episode can reach."""
    dist, todo = {start: 0}, deque([start])
    while todo:
        cell = todo.popleft()
        if cell == goal:
            return dist[cell]
        for dr, dc in MOVES.values():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in holes and nxt not in dist:
                dist[nxt] = dist[cell] + 1
                todo.append(nxt)
    return None
