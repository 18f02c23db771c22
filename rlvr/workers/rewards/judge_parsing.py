"""Reading an LLM judge's reply: pure string functions, no I/O (used by llm_judge.LLMJudgeRewardWorker).

`parse_verdict(text, mode, max_score)` returns `(reward, correct, why)`: reward in [0, 1] or None when the reply
holds no usable verdict (the worker then reports status "invalid", never a silent 0), correct as a bool when
the reply says so (yes_no, or a json verdict) and None when only a score was given (the worker applies its
threshold), and `why`, a short note on what was found or why nothing was.

Reasoning inside `<think>` blocks is dropped first, as for math answers: a judge that thinks aloud about "yes"
and "no" must not have its scratch work read as the verdict.

Modes:

yes_no
    YES / NO as whole words, case-insensitive: "eyes", "nobody", "yesterday", "know" hold no verdict. A
    parroted instruction ("YES or NO", "yes/no") is not a verdict. Then, in order:

    1. marked verdicts, `Verdict: YES`, `Answer: no`, `**Final answer:** Yes`, `Correct: NO`: the last one wins
       (a judge that corrects itself, "Verdict: NO ... Verdict: YES", means YES);
    2. otherwise bare verdict words: if they all agree, that verdict ("Yes. Yes, it is correct." is YES);
       if they disagree, the last one wins only when it ends the reply ("No wait, YES."), since a concluding
       word is the judge's final say; any other mix of YES and NO ("No, it is not 5; yes it is 6 though
       sometimes") is ambiguous: None;
    3. no verdict word at all: None.

score
    `Score: 7/10`, `score = 7`, `Rating: 8 out of 10`, `Grade: 7.5` (labelled: score / rating / grade / mark /
    points, `:` or `=`), then unlabelled `7/10` or `8 out of 10`, then a reply that is just a number. Within a
    kind the last occurrence wins (a judge states its score at the end). A stated scale must be max_score's
    ("4/5" with max_score 10 is skipped), and a value outside [0, max_score] is None, never clipped.
    reward = value / max_score.

json
    The first JSON object in the text (bare, or inside a ```json fence) that has a key `score`, `verdict` or
    `correct` (keys case-insensitive). `score`: a number (or numeric string) in [0, max_score] -> reward
    value / max_score. `verdict` / `correct`: true/false, "yes"/"no", "correct"/"incorrect", "pass"/"fail",
    1/0 -> correct, and reward 1.0 / 0.0 when there is no score. Anything else: None.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from rlvr.workers.rewards.math_answer import strip_thinking

ParseMode = Literal["yes_no", "score", "json"]
PARSE_MODES: tuple[str, ...] = ("yes_no", "score", "json")
Verdict = tuple[float | None, bool | None, str]

# A verdict word on its own: not part of a longer word (`\b` treats "eyes", "nobody", "yes_no" as one word).
_WORD_START = r"(?<!\w)(?<!\w-)"  # not glued to a word before it: "eyes", "know", "well-no"
_WORD_END = r"(?!\w)(?!-\w)"  # nor after it: "nobody", "yesterday", "no-one"
_YES_NO = re.compile(rf"{_WORD_START}(yes|no){_WORD_END}", re.IGNORECASE)
# "YES or NO", "yes/no", "Yes | No": the instruction repeated back, not a verdict.
_ALTERNATIVES = re.compile(
    rf"{_WORD_START}(?:yes|no)[\s\"'`*]*(?:/|\||\bor\b|,\s*or\b)[\s\"'`*]*(?:yes|no){_WORD_END}", re.IGNORECASE
)
# `Verdict: YES`, `**Final answer:** no`, `Correct = Yes`, `Judgement - NO`. The label must be followed by a
# colon, `=` or a dash, so that "the answer is no good" is not read as a marked verdict.
_MARKED = re.compile(
    r"(?:verdict|answer|judge?ment|decision|conclusion|correct(?:ness)?|result|grade|evaluation|assessment)"
    rf"[\s*_]*(?::|=|-|–|—)[\s*_\"'`(\[]*(yes|no){_WORD_END}",
    re.IGNORECASE,
)
# What may follow the concluding verdict word: punctuation, markdown, closing brackets, quotes.
_TRAILER = re.compile(r"(?:[\s.!?,;:*_\"'`)\]}]|</?\w+>|<\|\w+\|>)*")

_NUM = r"[-+]?\d+(?:\.\d+)?"
_LABELLED_SCORE = re.compile(
    rf"(?:score|rating|grade|mark|points)[\s*_\"']*(?::|=|\bis\b)[\s*_\"']*(?P<value>{_NUM})"
    rf"(?:\s*(?:/|\bout\s+of\b)\s*(?P<scale>{_NUM}))?",
    re.IGNORECASE,
)
_FRACTION_SCORE = re.compile(
    rf"(?<![\w./])(?P<value>{_NUM})\s*(?:/|\bout\s+of\b)\s*(?P<scale>{_NUM})(?![\w/])", re.IGNORECASE
)
_BARE_NUMBER = re.compile(rf"[\s*_\"'`]*(?P<value>{_NUM})[\s.*_\"'`]*")

_TRUE_WORDS = {"yes", "true", "correct", "pass", "passed", "right", "1"}
_FALSE_WORDS = {"no", "false", "incorrect", "fail", "failed", "wrong", "0"}


def parse_verdict(text: str, mode: ParseMode = "yes_no", max_score: float = 10) -> Verdict:
    """(reward in [0, 1] | None, correct | None, why). Never raises on any text; raises ValueError for a bad
    mode or max_score (a configuration error, not a judge error)."""
    if mode not in PARSE_MODES:
        raise ValueError(f"parse mode must be one of {PARSE_MODES}, got {mode!r}")
    if not (isinstance(max_score, (int, float)) and math.isfinite(max_score) and max_score > 0):
        raise ValueError(f"max_score must be a positive number, got {max_score!r}")
    if not isinstance(text, str):
        return None, None, f"reply is {type(text).__name__}, not text"
    body = strip_thinking(text).strip()
    if not body:
        return None, None, "empty reply" if not text.strip() else "nothing after the <think> block"
    if mode == "yes_no":
        return _parse_yes_no(body)
    if mode == "score":
        return _parse_score(body, max_score)
    return _parse_json(body, max_score)


def _verdict(word: str, why: str) -> Verdict:
    yes = word.lower() == "yes"
    return (1.0 if yes else 0.0), yes, why


def _parse_yes_no(body: str) -> Verdict:
    body = _ALTERNATIVES.sub(" ", body)
    marked = list(_MARKED.finditer(body))
    if marked:
        return _verdict(marked[-1].group(1), f"marked verdict {marked[-1].group(0).strip()!r}")
    words = list(_YES_NO.finditer(body))
    if not words:
        return None, None, "no YES/NO verdict word"
    kinds = {w.group(1).lower() for w in words}
    last = words[-1]
    if len(kinds) == 1:
        return _verdict(last.group(1), f"verdict {last.group(1)!r}")
    if _TRAILER.fullmatch(body, last.end()):
        return _verdict(last.group(1), f"concluding verdict {last.group(1)!r} (after both YES and NO)")
    return None, None, "ambiguous: both YES and NO, and neither concludes the reply"


def _parse_score(body: str, max_score: float) -> Verdict:
    skipped: list[str] = []
    for kind, pattern in (("labelled", _LABELLED_SCORE), ("fraction", _FRACTION_SCORE)):
        matches = list(pattern.finditer(body))
        for match in reversed(matches):
            scale = match.group("scale")
            if scale is not None and float(scale) != float(max_score):
                skipped.append(match.group(0).strip())
                continue
            return _scored(float(match.group("value")), max_score, f"{kind} score {match.group(0).strip()!r}")
    bare = _BARE_NUMBER.fullmatch(body)
    if bare:
        return _scored(float(bare.group("value")), max_score, f"bare score {bare.group('value')!r}")
    if skipped:
        return None, None, f"score on another scale than {max_score:g}: {skipped[-1]!r}"
    return None, None, "no score found"


def _scored(value: float, max_score: float, why: str) -> Verdict:
    if not (math.isfinite(value) and 0 <= value <= max_score):
        return None, None, f"{why} is outside [0, {max_score:g}]"
    return value / max_score, None, why


def _parse_json(body: str, max_score: float) -> Verdict:
    obj = _first_json_object(body)
    if obj is None:
        return None, None, "no JSON object with a score, verdict or correct key"
    keys = {str(k).lower(): v for k, v in obj.items()}
    correct: bool | None = None
    for key in ("verdict", "correct"):
        if key in keys:
            correct = _as_bool(keys[key])
            if correct is None:
                return None, None, f"JSON {key} {keys[key]!r} is not a yes/no value"
            break
    if "score" in keys:
        value = _as_number(keys["score"], max_score)
        if value is None:
            return None, None, f"JSON score {keys['score']!r} is not a number on the scale 0..{max_score:g}"
        reward, _, why = _scored(value, max_score, f"JSON score {value:g}")
        return reward, (correct if reward is not None else None), why
    return (1.0 if correct else 0.0), correct, f"JSON verdict {correct}"


def _first_json_object(body: str) -> dict[str, Any] | None:
    """The first `{...}` that decodes to a dict with one of the keys; a fence is just text around it."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", body):
        try:
            obj, _ = decoder.raw_decode(body, match.start())
        except ValueError:  # JSONDecodeError, and RecursionError-free ValueErrors of odd input
            continue
        if isinstance(obj, dict) and {str(k).lower() for k in obj} & {"score", "verdict", "correct"}:
            return obj
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().strip(".!").lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def _as_number(value: Any, max_score: float) -> float | None:
    """A JSON score: a number, or a numeric string ("7", "7/10" when 10 is max_score)."""
    if isinstance(value, bool):  # True is an int in Python, not a score
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = re.fullmatch(rf"\s*(?P<value>{_NUM})\s*(?:(?:/|\bout\s+of\b)\s*(?P<scale>{_NUM}))?\s*", value)
        if match and (match.group("scale") is None or float(match.group("scale")) == float(max_score)):
            return float(match.group("value"))
    return None
