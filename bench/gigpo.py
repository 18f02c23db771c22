"""GiGPO vs multi-step GRPO (its baseline: the episode advantage on every turn), two parts.

credit  On synthetic episodes of the grid puzzle played by a uniformly random policy, where the best moves of
        each state are known (those that shorten the safe path to the goal), how often each estimator's
        per-step advantage has the right sign: > 0 for a best move, < 0 for any other. Pure Python, seconds.
train   Training runs on the grid puzzle alone, on the default model, the two estimators with the same seeds,
        tasks and budget: the success rate per step (training episodes) and the validation success rate
        (greedy, held-out levels), side by side. Heavy: run it under the machine-wide lock.

    python bench/gigpo.py --part credit
    flock /tmp/rlvr-heavy.lock python bench/gigpo.py --part train --steps 8 --eval-every 4 --seeds 3 \
        --out bench/results/gigpo.jsonl          # repeat to go on: it runs only what --out lacks
    python bench/gigpo.py --load bench/results/gigpo.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlvr.algorithms.gigpo import (EpisodeTurns, anchor_groups, gigpo_turn_advantages, intern_state_keys,  # noqa: E402
                                   multi_step_grpo_turn_advantages)
from bench.learning import cpu_name, mean_pm_se, pooled_difference, read_rows  # noqa: E402
from rlvr.envs.grid_puzzle import MOVES, GridPuzzleEnv, shortest_path  # noqa: E402

ESTIMATORS = {
    "multi_step_grpo": lambda ep, gamma: multi_step_grpo_turn_advantages(ep),
    "gigpo mean_norm": lambda ep, gamma: gigpo_turn_advantages(ep, gamma, 1.0, "mean_norm")[0],
    "gigpo mean_std_norm": lambda ep, gamma: gigpo_turn_advantages(ep, gamma, 1.0, "mean_std_norm")[0],
    # the step-level term alone (A^S, what GiGPO adds): the combined advantage minus the episode level
    "gigpo A^S alone": lambda ep, gamma: (gigpo_turn_advantages(ep, gamma, 1.0, "mean_norm")[0]
                                          - multi_step_grpo_turn_advantages(ep)),
}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.3f} [{min(values):.3f}, {max(values):.3f}]"


# ---------------------------------------------------------------------------------------------- credit
def best_moves(env: GridPuzzleEnv) -> set[str]:
    """The moves that shorten the safe path to the goal by one: the known best actions of this state."""
    here = shortest_path(env.player, env.goal, env.holes, env.size)
    out = set()
    for move, (dr, dc) in MOVES.items():
        nxt = (env.player[0] + dr, env.player[1] + dc)
        if 0 <= nxt[0] < env.size and 0 <= nxt[1] < env.size and nxt not in env.holes:
            after = shortest_path(nxt, env.goal, env.holes, env.size)
            if here is not None and after == here - 1:
                out.add(move)
    return out


def random_episode(env: GridPuzzleEnv, level: int, turns: int, rng: random.Random, skill: float):
    """(state keys, rewards, best-move labels) of one episode of a mover that plays a best move with
    probability `skill` and a uniformly random move otherwise (a policy half-way through learning)."""
    obs = env.reset({"level": level}, 0)
    keys, rewards, best = [], [], []
    for _ in range(turns):
        good = best_moves(env)
        move = rng.choice(sorted(good)) if good and rng.random() < skill else rng.choice(list(MOVES))
        best.append(move in good)
        keys.append(env.state_key(obs))
        obs, reward, done, _ = env.step(move)
        rewards.append(reward)
        if done:
            break
    return keys, rewards, best


def pairwise_order(adv: torch.Tensor, best: torch.Tensor, anchors: torch.Tensor) -> float:
    """Over every (best move, other move) pair taken from the same anchor state: the share where the best
    move got the larger advantage (ties count half)."""
    wins = pairs = 0.0
    for a in torch.unique(anchors[anchors >= 0]):
        here = anchors == a
        good, bad = adv[here & best], adv[here & ~best]
        if len(good) and len(bad):
            diff = good[:, None] - bad[None, :]
            wins += float((diff > 0).sum()) + 0.5 * float((diff == 0).sum())
            pairs += diff.numel()
    return wins / pairs if pairs else float("nan")


def credit_check(reps: int, tasks: int, group: int, turns: int, gamma: float, seed: int, skill: float) -> None:
    rows: dict[str, dict[str, list[float]]] = {name: {"all": [], "best": [], "other": [], "pairs": []}
                                               for name in ESTIMATORS}
    success = []
    for rep in range(reps):
        rng = random.Random(f"{seed}:{rep}")
        env = GridPuzzleEnv(size=4, holes=2, min_distance=3, max_distance=4, invalid_penalty=0.0)
        episodes, levels = [], [rng.randrange(1 << 30) for _ in range(tasks)]  # a task group: one level
        for t, level in enumerate(levels):
            for _ in range(group):
                episodes.append((t, *random_episode(env, level, turns, rng, skill)))
        ids, valid = intern_state_keys([e[1] for e in episodes])
        rewards = torch.zeros(ids.shape)
        for b, e in enumerate(episodes):
            rewards[b, : len(e[2])] = torch.tensor(e[2])
        ep = EpisodeTurns(scores=rewards.sum(1), valid=torch.ones(len(episodes), dtype=torch.bool),
                          group_index=torch.tensor([e[0] for e in episodes]), turn_rewards=rewards,
                          state_ids=ids, turn_valid=valid)
        success.append(float((rewards.sum(1) > 0).float().mean()))
        best = torch.zeros(ids.shape, dtype=torch.bool)
        for b, e in enumerate(episodes):
            best[b, : len(e[3])] = torch.tensor(e[3])
        anchors = anchor_groups(ep.group_index, ep.state_ids, ep.steps)
        for name, fn in ESTIMATORS.items():
            full = fn(ep, gamma)
            adv, is_best = full[valid], best[valid]
            right = torch.where(is_best, adv > 0, adv < 0)
            rows[name]["all"].append(float(right.float().mean()))
            rows[name]["best"].append(float(right[is_best].float().mean()))
            rows[name]["other"].append(float(right[~is_best].float().mean()))
            rows[name]["pairs"].append(pairwise_order(full, best, anchors))
    print(f"\ncredit assignment: grid 4x4, 2 holes, goal 3-4 moves away; a mover that plays a best move with "
          f"probability {skill}, else a random one; {tasks} tasks x {group} episodes x <= {turns} turns, gamma "
          f"{gamma}, {reps} repetitions (median [min, max]); episode success {spread(success)}")
    print("right sign: advantage > 0 for a best move, < 0 for another (0 counts as wrong); same-state order: "
          "best move ranked above another move taken from the same anchor state")
    print(f"{'estimator':20} | {'right sign, all steps':24} | {'best moves':24} | {'other moves':24} | "
          f"{'same-state order':24}")
    print("-" * 128)
    for name, r in rows.items():
        print(f"{name:20} | {spread(r['all']):24} | {spread(r['best']):24} | {spread(r['other']):24} | "
              f"{spread(r['pairs']):24}")
    base = statistics.median(rows["multi_step_grpo"]["all"])
    pairs = statistics.median(rows["multi_step_grpo"]["pairs"])
    for name in list(ESTIMATORS)[1:]:
        print(f"ratio {name} / multi_step_grpo: right sign {statistics.median(rows[name]['all']) / base:.2f}, "
              f"same-state order {statistics.median(rows[name]['pairs']) / pairs:.2f}")


# ---------------------------------------------------------------------------------------------- train
def train_tree(preset: str, seed: int, steps: int, out: str, prompts: int, group: int, engine: str,
               eval_every: int) -> dict:
    import yaml

    tree = yaml.safe_load((REPO / "configs/agent.yaml").read_text())
    tree["domains"] = {"grid": tree["domains"]["grid"]}
    tree["domains"]["grid"]["env"]["val_tasks"] = 16
    tree["data"] = {"train_files": []}
    tree["rollout"] = {"prompts_per_step": prompts, "group_size": group, "domain_interleave_probs": {"grid": 1.0}}
    tree["run"] = {"max_steps": steps, "eval_every": eval_every, "save_every": 0, "seed": seed,
                   "output_dir": out, "name": f"{preset}-s{seed}", "progress_bar": False}
    tree["trackers"] = {"wandb": False, "tensorboard": False, "jsonl": True}
    tree["generation"]["engine"] = engine
    tree["actor_train"]["lr"] = 1e-5
    tree["algorithm"] = {"preset": preset}
    return tree


PRESETS = ("gigpo", "multi_step_grpo")  # same seeds, tasks and budget for both


def train_runs(args) -> list[dict]:
    """Run what --out lacks (each estimator at each seed; seeds the outer loop), appending each finished run to
    --out as it ends so that a long sweep spreads over sittings; returns this sitting's runs and --out's."""
    from rlvr.config.load import config_from_dict
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    rows = read_rows([args.out]) if args.out and Path(args.out).exists() else []
    done = {(r["preset"], r["seed"]) for r in rows if r["steps"] == args.steps}
    group = 4 if args.group == 8 else args.group
    with tempfile.TemporaryDirectory() as out:
        for seed in range(args.seeds):
            for preset in PRESETS:
                if (preset, seed) in done:
                    print(f"{preset} seed {seed}: already in {args.out}, skipped", flush=True)
                    continue
                start = time.perf_counter()
                tree = train_tree(preset, seed, args.steps, out, args.prompts, group, args.engine,
                                  args.eval_every or args.steps)
                pipeline = RLVRPipeline(config_from_dict(tree))
                try:
                    run_dir = pipeline.run()
                    stats = pipeline.clusters.actor_infer.first("stats")
                finally:
                    pipeline.close()
                row = {"preset": preset, "seed": seed, "steps": args.steps, "elapsed_s": time.perf_counter() - start,
                       "cpu": cpu_name(), "prompts": args.prompts, "group": group, "engine": args.engine,
                       "cached": (stats.get("cached_prompt_tokens", 0) / stats["prompt_tokens"]
                                  if stats.get("prompt_tokens") else None),
                       "records": [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]}
                rows.append(row)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(row) + "\n")
                print(f"{preset} seed {seed}: {row['elapsed_s']:.0f} s", flush=True)
    return [r for r in rows if r["steps"] == args.steps]


def per_step(rows: list[dict], preset: str, key: str, step: int) -> list[float]:
    """`key` at `step`, one value per run of `preset` that logged it."""
    return [r[key] for row in rows if row["preset"] == preset for r in row["records"]
            if r["step"] == step and key in r]


def train_table(rows: list[dict]) -> None:
    """Per step, the training and validation success of both estimators (mean +- SE over seeds); the final
    validation difference in pooled standard errors; run time, invalid actions, anchor groups."""
    if not rows:
        print("no training runs")
        return
    steps = max(r["steps"] for r in rows)
    seeds = {p: sorted(r["seed"] for r in rows if r["preset"] == p) for p in PRESETS}
    first = rows[0]
    print(f"\nGiGPO vs multi_step_grpo on the grid puzzle (configs/agent.yaml's grid domain), SmolLM2-135M-Instruct, "
          f"{first['prompts']} tasks x {first['group']} episodes per step, lr 1e-5, engine {first['engine']}; "
          f"seeds {seeds}; mean +- SE over seeds; CPUs: {', '.join(sorted({r['cpu'] for r in rows}))}")
    keys = {"train": "grid/episode/success/mean", "val": "val_correct/grid/mean"}
    print(f"| step | {' | '.join(f'{p} {k}' for k in keys for p in PRESETS)} |")
    print("|---:|" + "---|" * (2 * len(PRESETS)))
    for step in range(steps + 1):
        cells = [per_step(rows, p, key, step) for key in keys.values() for p in PRESETS]
        if any(cells):
            print(f"| {step} | {' | '.join(mean_pm_se(c) if c else '-' for c in cells)} |")
    final = [per_step(rows, p, keys["val"], steps) for p in PRESETS]
    if all(len(v) > 1 for v in final):
        diff, z = pooled_difference(*final)
        print(f"final validation, gigpo - multi_step_grpo: {diff:+.3f} ({z} pooled SE)")
    for preset in PRESETS:
        mine = [r for r in rows if r["preset"] == preset]
        if not mine:
            continue
        recs = [rec for r in mine for rec in r["records"]]
        invalid = [r["grid/episode/invalid_action_rate"] for r in recs if "grid/episode/invalid_action_rate" in r]
        grouped = [r["grid/gigpo/anchor_steps_grouped_frac"] for r in recs
                   if "grid/gigpo/anchor_steps_grouped_frac" in r]
        cached = [r["cached"] for r in mine if r.get("cached") is not None]
        print(f"{preset}: run time {spread([r['elapsed_s'] for r in mine])} s; invalid action rate "
              f"{spread(invalid) if invalid else '-'}; steps in anchor groups >= 2 {spread(grouped) if grouped else '-'}"
              + (f"; prompt tokens from the prefix cache {spread(cached)}" if cached else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["credit", "train", "all"], default="credit")
    parser.add_argument("--reps", type=int, default=5, help="credit: repetitions")
    parser.add_argument("--tasks", type=int, default=64, help="credit: tasks per repetition")
    parser.add_argument("--group", type=int, default=8, help="episodes per task")
    parser.add_argument("--turns", type=int, default=8, help="credit: turns per episode")
    parser.add_argument("--gamma", type=float, default=0.95)
    parser.add_argument("--skill", type=float, default=0.5, help="credit: probability of a best move")
    parser.add_argument("--steps", type=int, default=8, help="train: steps per run")
    parser.add_argument("--seeds", type=int, default=2, help="train: seeds per estimator (0 .. N-1)")
    parser.add_argument("--eval-every", type=int, default=None, help="train: validation interval (default: --steps)")
    parser.add_argument("--out", default=None, help="train: append each finished run here (JSON lines) and skip "
                        "the runs it already holds (same estimator, seed and --steps)")
    parser.add_argument("--load", default=None, metavar="JSONL", help="train: print the table of an --out file")
    parser.add_argument("--prompts", type=int, default=8, help="train: tasks per step")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    args = parser.parse_args()
    if args.load:
        return train_table(read_rows([args.load]))
    if args.part in ("credit", "all"):
        credit_check(args.reps, args.tasks, args.group, args.turns, args.gamma, seed=0, skill=args.skill)
    if args.part in ("train", "all"):
        train_table(train_runs(args))


if __name__ == "__main__":
    main()
