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

yes_no_logprobs
    The verdict is read from token probabilities, not from text: `parse_logprob_verdict(content)` takes the
    reply's `choices[0].logprobs.content` (OpenAI format; asked for with `logprobs: true, top_logprobs: k`)
    and compares the probability mass of YES-like first tokens ("Yes", " yes", "YES", "yes.") with that of
    NO-like ones among the top k (plus the chosen token). Leading filler tokens (whitespace, `**`, quotes) are
    skipped when a later token was returned. reward 1/0 for YES/NO; p_yes = P(yes) / (P(yes) + P(no)) is
    reported beside it. None only when neither appears among the top k. Given text (a server that ignored
    `logprobs`), parse_verdict reads it as yes_no.

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

ParseMode = Literal["yes_no", "yes_no_logprobs", "score", "json"]
PARSE_MODES: tuple[str, ...] = ("yes_no", "yes_no_logprobs", "score", "json")
Verdict = tuple[float | None, bool | None, str]
# (reward, correct, why, p_yes): p_yes = P(yes) / (P(yes) + P(no)) over the top-k tokens, None without a verdict.
LogprobVerdict = tuple[float | None, bool | None, str, float | None]

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
    if mode in ("yes_no", "yes_no_logprobs"):  # the latter: a reply that came without logprobs
        return _parse_yes_no(body)
    if mode == "score":
        return _parse_score(body, max_score)
    return _parse_json(body, max_score)


# One token that is a whole YES / NO word, with the whitespace, quotes, markdown and punctuation tokenizers glue
# to it: " Yes", "YES", "no.", "**No". Prefixes of other words ("Not", "Nope", "Yesterday") do not match.
_VERDICT_TOKEN = re.compile(r"[\s\"'`*_(\[]*(yes|no)[\s.,!:;\"'`*_)\]]*", re.IGNORECASE)
# A token that holds no word at all (whitespace, markdown, quotes, punctuation): a verdict may follow it.
_FILLER_TOKEN = re.compile(r"[\W_]*")


def parse_logprob_verdict(content: Any, threshold: float = 0.5) -> LogprobVerdict:
    """The yes_no_logprobs verdict from an OpenAI `logprobs.content` list (dicts, or the openai client's objects:
    each with `token`, `logprob` and `top_logprobs`). Never raises on any input.

    The deciding position is the first generated token that is not filler, or the last one returned. There,
    P(yes) and P(no) are the summed probabilities of the YES-like and NO-like tokens among its top_logprobs
    and the chosen token itself; the verdict is YES when p_yes = P(yes) / (P(yes) + P(no)) >= threshold.
    """
    if not isinstance(content, (list, tuple)) or not content:
        return None, None, "no logprobs in the judge reply", None
    for position, entry in enumerate(content):
        chosen = _field(entry, "token")
        if not isinstance(chosen, str):
            return None, None, f"logprobs entry {position} has no token", None
        if _FILLER_TOKEN.fullmatch(chosen) and position + 1 < len(content):
            continue  # "**", " ", '"': the verdict comes after it
        yes, no, seen = 0.0, 0.0, set()
        top = _field(entry, "top_logprobs")
        candidates = [entry, *(top if isinstance(top, (list, tuple)) else [])]
        for candidate in candidates:
            token, logprob = _field(candidate, "token"), _field(candidate, "logprob")
            if not isinstance(token, str) or isinstance(logprob, bool) or not isinstance(logprob, (int, float)):
                continue
            if (token, float(logprob)) in seen:  # the chosen token is usually among the top k too
                continue
            seen.add((token, float(logprob)))
            match = _VERDICT_TOKEN.fullmatch(token)
            if match and math.isfinite(logprob):
                p = math.exp(min(float(logprob), 0.0))
                if match.group(1).lower() == "yes":
                    yes += p
                else:
                    no += p
        where = f"token {position + 1}, {len(seen)} candidates, chosen {chosen!r}"
        if yes <= 0 and no <= 0:
            return None, None, f"neither YES nor NO among the top logprobs ({where})", None
        p_yes = yes / (yes + no)
        is_yes = p_yes >= threshold
        why = f"logprob verdict {'YES' if is_yes else 'NO'}: P(yes)={yes:.3g} P(no)={no:.3g} p_yes={p_yes:.3f} ({where})"
        return (1.0 if is_yes else 0.0), is_yes, why, p_yes
    return None, None, "only filler tokens in the logprobs", None  # not reached: the last entry decides


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


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
