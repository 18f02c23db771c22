"""Generates the shipped data of the code and judge domains (data/mix/*.jsonl), deterministically.

    python scripts/make_mix_data.py [--out-dir data/mix] [--seed 7]

code: small function-writing tasks whose `ground_truth` is a JSON string of test cases in the formats the code
reward understands (assert, call, stdio); judge: short questions with reference answers, scored by an LLM judge.
The math domains use data/math (scripts/make_math_data.py).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SUFFIX = " Answer with the code in one ```python block."

# name, signature, description, reference implementation (used to compute expected outputs), input generator
FUNCTIONS = [
    ("add", "a, b", "returns the sum of a and b", lambda a, b: a + b, lambda r: [r.randint(-9, 20), r.randint(0, 20)]),
    ("subtract", "a, b", "returns a minus b", lambda a, b: a - b, lambda r: [r.randint(0, 20), r.randint(0, 20)]),
    ("multiply", "a, b", "returns the product of a and b", lambda a, b: a * b, lambda r: [r.randint(0, 9), r.randint(0, 9)]),
    ("maximum", "a, b", "returns the larger of a and b", max, lambda r: [r.randint(-9, 9), r.randint(-9, 9)]),
    ("minimum", "a, b", "returns the smaller of a and b", min, lambda r: [r.randint(-9, 9), r.randint(-9, 9)]),
    ("square", "x", "returns x squared", lambda x: x * x, lambda r: [r.randint(-9, 9)]),
    ("double", "x", "returns twice x", lambda x: 2 * x, lambda r: [r.randint(-20, 20)]),
    ("is_even", "n", "returns True if n is even and False otherwise", lambda n: n % 2 == 0, lambda r: [r.randint(0, 50)]),
    ("absolute", "x", "returns the absolute value of x", abs, lambda r: [r.randint(-20, 20)]),
    ("first", "items", "returns the first element of the list items", lambda xs: xs[0],
     lambda r: [[r.randint(0, 9) for _ in range(r.randint(1, 4))]]),
    ("last", "items", "returns the last element of the list items", lambda xs: xs[-1],
     lambda r: [[r.randint(0, 9) for _ in range(r.randint(1, 4))]]),
    ("total", "items", "returns the sum of the numbers in the list items", sum,
     lambda r: [[r.randint(0, 9) for _ in range(r.randint(0, 4))]]),
    ("count", "items", "returns how many elements the list items has", len,
     lambda r: [[r.randint(0, 9) for _ in range(r.randint(0, 5))]]),
    ("reverse", "s", "returns the string s reversed", lambda s: s[::-1],
     lambda r: ["".join(r.choice("abcdef") for _ in range(r.randint(1, 5)))]),
    ("shout", "s", "returns the string s in upper case", str.upper,
     lambda r: ["".join(r.choice("abcxyz") for _ in range(r.randint(1, 5)))]),
    ("increment", "x", "returns x plus one", lambda x: x + 1, lambda r: [r.randint(-9, 30)]),
]

STDIO_TASKS = [
    ("reads two integers on one line and prints their sum", lambda a, b: a + b),
    ("reads two integers on one line and prints their product", lambda a, b: a * b),
    ("reads two integers on one line and prints the larger one", max),
]

JUDGE_ITEMS = [
    ("What is the capital of France?", "Paris"), ("What is the capital of Italy?", "Rome"),
    ("What is the capital of Japan?", "Tokyo"), ("What is the capital of Spain?", "Madrid"),
    ("What is the capital of Germany?", "Berlin"), ("What is the capital of Egypt?", "Cairo"),
    ("What color is the sky on a clear day?", "Blue"), ("What color is grass?", "Green"),
    ("What color are ripe bananas?", "Yellow"), ("What color is snow?", "White"),
    ("How many legs does a spider have?", "Eight"), ("How many legs does a dog have?", "Four"),
    ("How many days are in a week?", "Seven"), ("How many months are in a year?", "Twelve"),
    ("What is the opposite of hot?", "Cold"), ("What is the opposite of up?", "Down"),
    ("What is the opposite of big?", "Small"), ("What is the opposite of day?", "Night"),
    ("Which animal says moo?", "A cow"), ("Which animal barks?", "A dog"),
    ("What do bees make?", "Honey"), ("What gas do people breathe in to live?", "Oxygen"),
    ("What is frozen water called?", "Ice"), ("Which planet do we live on?", "Earth"),
    ("What is the largest ocean on Earth?", "The Pacific Ocean"), ("What star is closest to Earth?", "The Sun"),
    ("How many hours are in a day?", "Twenty-four"), ("What do you call a baby cat?", "A kitten"),
    ("What do you call a baby dog?", "A puppy"), ("What fruit is dried to make raisins?", "Grapes"),
    ("Which season comes after winter?", "Spring"), ("Which season comes after summer?", "Autumn"),
    ("What is the first letter of the English alphabet?", "A"), ("What shape has three sides?", "A triangle"),
    ("What shape has four equal sides?", "A square"), ("What instrument has black and white keys?", "A piano"),
    ("What do cows drink?", "Water"), ("What is the boiling point of water in Celsius?", "100 degrees"),
    ("Which organ pumps blood through the body?", "The heart"), ("What do plants need from the sun?", "Light"),
]


def code_rows(rng: random.Random, split: str, n_cases: int = 4) -> list[dict]:
    rows = []
    for name, args, desc, ref, gen in FUNCTIONS:
        cases = [gen(rng) for _ in range(n_cases)]
        prompt = f"Write a Python function `{name}({args})` that {desc}.{SUFFIX}"
        if len(rows) % 2 == 0:
            truth = {"format": "call", "fn": name, "cases": [{"args": c, "output": ref(*c)} for c in cases]}
        else:
            truth = {"format": "assert", "tests": [f"assert {name}({', '.join(map(repr, c))}) == {ref(*c)!r}"
                                                   for c in cases]}
        rows.append({"id": f"code-{split}-{name}", "domain": "code", "tag": f"code_{truth['format']}",
                     "messages": [{"role": "user", "content": prompt}], "ground_truth": json.dumps(truth)})
    for i, (desc, ref) in enumerate(STDIO_TASKS):
        cases = [[rng.randint(0, 9), rng.randint(0, 9)] for _ in range(n_cases)]
        truth = {"format": "stdio", "cases": [{"stdin": f"{a} {b}\n", "stdout": f"{ref(a, b)}\n"} for a, b in cases]}
        rows.append({"id": f"code-{split}-stdio{i}", "domain": "code", "tag": "code_stdio",
                     "messages": [{"role": "user", "content": f"Write a Python program that {desc}.{SUFFIX}"}],
                     "ground_truth": json.dumps(truth)})
    return rows


def judge_rows(items: list[tuple[str, str]], split: str) -> list[dict]:
    return [{"id": f"judge-{split}-{i:03d}", "domain": "judge", "tag": "qa",
             "messages": [{"role": "user", "content": q + " Answer in one short sentence."}], "ground_truth": a}
            for i, (q, a) in enumerate(items)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", default="data/mix")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    judge = list(JUDGE_ITEMS)
    rng.shuffle(judge)
    splits = {
        "code_train.jsonl": code_rows(rng, "train"), "code_val.jsonl": code_rows(rng, "val"),
        "judge_train.jsonl": judge_rows(judge[:32], "train"), "judge_val.jsonl": judge_rows(judge[32:], "val"),
    }
    for name, rows in splits.items():
        with open(out / name, "w") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        print(f"{name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
