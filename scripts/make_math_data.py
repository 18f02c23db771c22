"""Generate the shipped math dataset: data/math/train.jsonl and data/math/val.jsonl.

Two domains, sized for the default model (SmolLM2-135M), which gets single-digit sums right a fair part of the
time but two-digit sums only rarely, so most items are easy:

- `arithmetic`: ~60% single-digit addition, ~20% single-digit subtraction (non-negative result), ~10%
  single-digit multiplication, ~10% two-digit addition; each in one of many phrasings.
- `word_problems`: short one-step stories with small numbers, mostly addition (sums <= 18), some subtraction.

Val never shares a question with train, in the strict sense: each tag's underlying problems (the operands, with
a + b and b + a counted as one problem) are split into disjoint train and val pools before any text is written,
so val holds no rewording of a train problem either. No question text repeats within a split.

Deterministic: the same --seed writes byte-identical files. Run from the repository root:

    python scripts/make_math_data.py [--out-dir data/math] [--seed 1234]
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

INSTRUCTION = " Give the final answer as a number in \\boxed{}."

# ---------------------------------------------------------------------------------------------- arithmetic

ADD_TEMPLATES = [
    "What is {a} + {b}?",
    "What is {a}+{b}?",
    "Compute {a} + {b}.",
    "Calculate {a} + {b}.",
    "{a} + {b} = ?",
    "What is {a} plus {b}?",
    "Find the sum of {a} and {b}.",
    "Add {a} and {b}.",
    "What do you get when you add {a} and {b}?",
    "What is the sum of {a} and {b}?",
    "Evaluate {a} + {b}.",
    "Work out {a} + {b}.",
    "Solve: {a} + {b}",
    "How much is {a} plus {b}?",
    "Add {b} to {a}.",
    "If you add {a} and {b}, what do you get?",
    "Compute the value of {a} + {b}.",
    "Calculate the sum: {a} + {b}",
    "What number is {a} plus {b}?",
    "Find {a} + {b}.",
]

SUB_TEMPLATES = [
    "What is {a} - {b}?",
    "What is {a}-{b}?",
    "Compute {a} - {b}.",
    "Calculate {a} - {b}.",
    "{a} - {b} = ?",
    "What is {a} minus {b}?",
    "Subtract {b} from {a}.",
    "Take {b} away from {a}. What is left?",
    "Evaluate {a} - {b}.",
    "Work out {a} - {b}.",
    "Solve: {a} - {b}",
    "How much is {a} minus {b}?",
    "If you subtract {b} from {a}, what do you get?",
    "Compute the value of {a} - {b}.",
    "Calculate the difference: {a} - {b}",
    "Find {a} - {b}.",
]

MUL_TEMPLATES = [
    "What is {a} * {b}?",
    "What is {a}*{b}?",
    "Compute {a} * {b}.",
    "Calculate {a} * {b}.",
    "{a} * {b} = ?",
    "What is {a} times {b}?",
    "Multiply {a} by {b}.",
    "Find the product of {a} and {b}.",
    "What is the product of {a} and {b}?",
    "Evaluate {a} * {b}.",
    "Work out {a} x {b}.",
    "How much is {a} times {b}?",
    "Solve: {a} * {b}",
    "Find {a} * {b}.",
]

# ------------------------------------------------------------------------------------------- word problems

# (name, subject pronoun, object pronoun)
PEOPLE = [
    ("Tom", "he", "him"), ("Anna", "she", "her"), ("Ben", "he", "him"), ("Lily", "she", "her"),
    ("Sam", "he", "him"), ("Mia", "she", "her"), ("Leo", "he", "him"), ("Emma", "she", "her"),
    ("Max", "he", "him"), ("Sara", "she", "her"), ("Jack", "he", "him"), ("Zoe", "she", "her"),
    ("Omar", "he", "him"), ("Nina", "she", "her"), ("Ravi", "he", "him"), ("Lucy", "she", "her"),
]

# (singular, plural): countable things a child can have, buy, find and give away
OBJECTS = [
    ("apple", "apples"), ("ball", "balls"), ("marble", "marbles"), ("pencil", "pencils"),
    ("sticker", "stickers"), ("book", "books"), ("cookie", "cookies"), ("toy car", "toy cars"),
    ("card", "cards"), ("flower", "flowers"), ("orange", "oranges"), ("shell", "shells"),
    ("balloon", "balloons"), ("candy", "candies"), ("crayon", "crayons"), ("egg", "eggs"),
]

PLACES = ["box", "basket", "bag", "jar"]


def _count(n: int, obj: tuple[str, str]) -> str:
    return f"{n} {obj[0] if n == 1 else obj[1]}"


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


# Each template takes (a, b, p1, p2, obj, place) and returns the question; p = (name, he/she, him/her).
WordTemplate = Callable[[int, int, tuple, tuple, tuple, str], str]

WORD_ADD_TEMPLATES: list[WordTemplate] = [
    lambda a, b, p, q, o, pl: (
        f"{p[0]} has {_count(a, o)} and buys {b} more. How many {o[1]} does {p[1]} have now?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} had {_count(a, o)}. {_cap(p[1])} found {b} more. How many {o[1]} does {p[1]} have now?"),
    lambda a, b, p, q, o, pl: (
        f"There {'is' if a == 1 else 'are'} {_count(a, o)} in a {pl}. {p[0]} puts {b} more in the {pl}. "
        f"How many {o[1]} are in the {pl} now?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} has {_count(a, o)}. {q[0]} gives {p[2]} {b} more. How many {o[1]} does {p[0]} have now?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} has {_count(a, o)} and {q[0]} has {_count(b, o)}. How many {o[1]} do they have together?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} got {_count(a, o)} on Monday and {_count(b, o)} on Tuesday. "
        f"How many {o[1]} did {p[1]} get in all?"),
    lambda a, b, p, q, o, pl: (
        f"A {pl} has {_count(a, o)}. {p[0]} adds {_count(b, o)}. How many {o[1]} are in the {pl} now?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} had {_count(a, o)}. {q[0]} gave {p[2]} {b} more. How many {o[1]} does {p[0]} have now?"),
]

WORD_SUB_TEMPLATES: list[WordTemplate] = [
    lambda a, b, p, q, o, pl: (
        f"{p[0]} has {_count(a, o)} and gives {b} to {q[0]}. How many {o[1]} does {p[0]} have left?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} had {_count(a, o)}. {_cap(p[1])} lost {b} of them. How many {o[1]} does {p[1]} have left?"),
    lambda a, b, p, q, o, pl: (
        f"There are {_count(a, o)} in a {pl}. {p[0]} takes {b} out. How many {o[1]} are in the {pl} now?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} had {_count(a, o)} and used {b} of them. How many {o[1]} does {p[1]} have left?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} has {_count(a, o)}. {q[0]} has {b} fewer {o[1]} than {p[0]}. How many {o[1]} does {q[0]} have?"),
    lambda a, b, p, q, o, pl: (
        f"{p[0]} bought {_count(a, o)} and gave {b} away. How many {o[1]} does {p[1]} have now?"),
]


# ------------------------------------------------------------------------------------------------ the tags


@dataclass(frozen=True)
class TagSpec:
    tag: str
    domain: str
    keys: list[tuple[int, int]]  # the underlying problems; val and train get disjoint subsets of these
    commutative: bool  # whether (a, b) and (b, a) are one problem (key stored as (min, max))
    answer: Callable[[int, int], int]
    render: Callable[[random.Random, int, int], str]  # a random phrasing of the problem a ? b
    difficulty: Callable[[int, int], str]
    n_train: int
    n_val: int
    val_key_fraction: float


def _arith_render(templates: list[str]) -> Callable[[random.Random, int, int], str]:
    return lambda rng, a, b: rng.choice(templates).format(a=a, b=b)


def _word_render(templates: list[WordTemplate]) -> Callable[[random.Random, int, int], str]:
    def render(rng: random.Random, a: int, b: int) -> str:
        p, q = rng.sample(PEOPLE, 2)
        return rng.choice(templates)(a, b, p, q, rng.choice(OBJECTS), rng.choice(PLACES))

    return render


def _pairs(lo: int, hi: int, commutative: bool) -> list[tuple[int, int]]:
    return [(a, b) for a in range(lo, hi + 1) for b in range(lo, hi + 1) if not commutative or a <= b]


def tag_specs() -> list[TagSpec]:
    easy = lambda a, b: "easy"  # noqa: E731
    medium = lambda a, b: "medium"  # noqa: E731
    return [
        TagSpec("add_1digit", "arithmetic", _pairs(0, 9, True), True, lambda a, b: a + b,
                _arith_render(ADD_TEMPLATES), easy, 1200, 38, 0.15),
        TagSpec("sub_1digit", "arithmetic", [(a, b) for a in range(10) for b in range(a + 1)], False,
                lambda a, b: a - b, _arith_render(SUB_TEMPLATES), easy, 400, 13, 0.15),
        TagSpec("mul_1digit", "arithmetic", _pairs(0, 9, True), True, lambda a, b: a * b,
                _arith_render(MUL_TEMPLATES), medium, 200, 6, 0.15),
        TagSpec("add_2digit", "arithmetic", _pairs(10, 99, True), True, lambda a, b: a + b,
                _arith_render(ADD_TEMPLATES), medium, 200, 7, 0.1),
        TagSpec("word_add", "word_problems", _pairs(1, 9, True), True, lambda a, b: a + b,
                _word_render(WORD_ADD_TEMPLATES), lambda a, b: "easy" if a + b <= 10 else "medium",
                700, 45, 0.15),
        TagSpec("word_sub", "word_problems", [(a, b) for a in range(2, 13) for b in range(1, a)], False,
                lambda a, b: a - b, _word_render(WORD_SUB_TEMPLATES),
                lambda a, b: "easy" if a <= 10 else "medium", 300, 19, 0.15),
    ]


# ---------------------------------------------------------------------------------------------- generation


def _sample_rows(spec: TagSpec, keys: list[tuple[int, int]], n: int, rng: random.Random) -> list[dict]:
    """n rows of `spec` whose problems come from `keys`, no question text twice."""
    rows: list[dict] = []
    seen: set[str] = set()
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > 200 * n + 10_000:
            raise RuntimeError(f"{spec.tag}: could not find {n} distinct questions in {len(keys)} problems")
        a, b = rng.choice(keys)
        if spec.commutative and rng.random() < 0.5:
            a, b = b, a
        question = spec.render(rng, a, b)
        if question in seen:
            continue
        seen.add(question)
        rows.append({
            "domain": spec.domain,
            "tag": spec.tag,
            "messages": [{"role": "user", "content": question + INSTRUCTION}],
            "ground_truth": str(spec.answer(a, b)),
            "difficulty": spec.difficulty(a, b),
        })
    return rows


def generate(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    splits: dict[str, list[dict]] = {"train": [], "val": []}
    for spec in tag_specs():
        # Hold out problems for val, spread evenly over the answer's size so val covers train's range:
        # shuffle, order by answer (stable), take every step-th from a random start.
        keys = list(spec.keys)
        rng.shuffle(keys)
        keys.sort(key=lambda k: spec.answer(*k))
        n_val_keys = max(1, round(len(keys) * spec.val_key_fraction))
        step = len(keys) / n_val_keys
        start = rng.random() * step
        val_idx = {int(start + j * step) for j in range(n_val_keys)}
        val_keys = sorted(k for i, k in enumerate(keys) if i in val_idx)
        train_keys = sorted(k for i, k in enumerate(keys) if i not in val_idx)
        splits["train"] += _sample_rows(spec, train_keys, spec.n_train, rng)
        splits["val"] += _sample_rows(spec, val_keys, spec.n_val, rng)
    for split, rows in splits.items():
        rng.shuffle(rows)  # mix the tags and domains; ids follow the final order
        counters: Counter[str] = Counter()
        with_ids = []
        for row in rows:
            prefix = "arith" if row["domain"] == "arithmetic" else "word"
            with_ids.append({"id": f"{prefix}-{split}-{counters[prefix]:05d}", **row})
            counters[prefix] += 1
        splits[split] = with_ids
    _check(splits)
    return splits


def _check(splits: dict[str, list[dict]]) -> None:
    questions = {s: [r["messages"][0]["content"] for r in rows] for s, rows in splits.items()}
    for s, qs in questions.items():
        assert len(qs) == len(set(qs)), f"duplicate question in {s}"
    assert not set(questions["train"]) & set(questions["val"]), "val shares a question with train"
    for rows in splits.values():
        for r in rows:
            assert r["messages"][0]["content"].endswith(INSTRUCTION)
            int(r["ground_truth"])


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default="data/math", help="where train.jsonl and val.jsonl go")
    parser.add_argument("--seed", type=int, default=1234, help="random seed (same seed, same bytes)")
    args = parser.parse_args(argv)

    splits = generate(args.seed)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        write_jsonl(out / f"{split}.jsonl", rows)
        by_tag = Counter((r["domain"], r["tag"]) for r in rows)
        print(f"{out / f'{split}.jsonl'}: {len(rows)} rows")
        for (domain, tag), n in sorted(by_tag.items()):
            print(f"  {domain:14s} {tag:11s} {n}")


if __name__ == "__main__":
    main()
