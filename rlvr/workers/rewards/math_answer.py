"""Pulling the final answer out of a model response: pure string functions, no math-verify.

Order of trust (extract_answer): the last `\\boxed{}`, then an "answer is ..." phrase, then (optionally) the last
number. Reasoning inside `<think>` blocks is dropped first, so scratch work never counts as the answer.
"""

from __future__ import annotations

import re
from typing import Literal

Fallback = Literal["last_number", "none"]
How = Literal["boxed", "phrase", "last_number", "none"]

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# Chat-template markers a decoded response may still carry: <|im_end|>, <|eot_id|>, </s>.
_SPECIAL_TOKEN = re.compile(r"<\|[^|<>\s]*\|>|</s>")
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z]) *")
_BARE_BOX_TOKEN = re.compile(r"[^\s$\\{}]+")  # what `\boxed 5` holds: up to a space, `$` or a command
# A number: optional sign (not when it is a binary minus as in "x-5"), integer part with or without
# thousands separators, optional decimals, optional "/denominator".
_NUMBER = (
    r"(?:(?<![\w)\]}])-)?(?<![\w.])"
    r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
    r"(?:\.\d+)?"
    r"(?:/\d+(?!\d))?"
)
_NUMBER_RE = re.compile(_NUMBER)
# The lead-in of "The (final) answer is X", "Answer: X", "**Answer:** X"; X runs to the end of its sentence.
_PHRASE_RE = re.compile(r"answer[\s*]*(?:is\b|:|=)[\s*:]*", re.IGNORECASE)
# A phrase answer that is a number followed by plain words ("18 dollars") keeps only the number.
_NUMBER_THEN_WORDS = re.compile(rf"(?P<number>{_NUMBER})\s+[A-Za-z][A-Za-z ]*")
_SENTENCE_END = re.compile(r"\.(?:\s|$)")


def strip_thinking(text: str) -> str:
    """Drops everything up to and including the last `</think>` (the opening tag is often part of the prompt,
    so it need not be there). An opening `<think>` left unclosed after that means the response ran out inside
    its reasoning: that part holds no final answer and is dropped too."""
    close = text.rfind(_THINK_CLOSE)
    if close >= 0:
        text = text[close + len(_THINK_CLOSE) :]
    unclosed = text.find(_THINK_OPEN)
    return text[:unclosed] if unclosed >= 0 else text


def last_boxed(text: str) -> str | None:
    """Content of the last complete, non-empty `\\boxed{...}` / `\\fbox{...}` (nested braces allowed), or of the
    brace-less form `\\boxed 5`. A box left unclosed (a truncated response) is skipped."""
    matches = list(_BOX_COMMAND.finditer(text))
    closing = _matching_braces(text) if matches else {}
    for match in reversed(matches):
        content = _box_content(text, match, closing)
        if content:
            return content
    return None


def answer_phrase(text: str) -> str | None:
    """X from the last "The answer is X" / "Answer: X", trimmed to the answer itself: sentence end, markdown,
    `$...$` and a currency sign go; "18 dollars" becomes "18"."""
    matches = list(_PHRASE_RE.finditer(text))
    if not matches:
        return None
    line = text[matches[-1].end() :].split("\n", 1)[0]
    answer = _SENTENCE_END.split(line, maxsplit=1)[0]
    answer = answer.replace("**", "").strip().rstrip(".,;:!").strip()
    answer = _unwrap_math(answer)
    words = _NUMBER_THEN_WORDS.fullmatch(answer)
    if words:
        answer = words.group("number")
    return answer or None


def last_number(text: str) -> str | None:
    """The last number in the text: 12, -3, 2.5, 1,234 (returned without separators: "1234"), 3/4."""
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def extract_answer(text: str, fallback: Fallback = "last_number") -> tuple[str | None, How]:
    """(answer, how it was found): boxed first, then an answer phrase, then `fallback`."""
    if fallback not in ("last_number", "none"):
        raise ValueError(f"fallback must be 'last_number' or 'none', got {fallback!r}")
    text = _SPECIAL_TOKEN.sub("", strip_thinking(text))
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed, "boxed"
    phrase = answer_phrase(text)
    if phrase is not None:
        return phrase, "phrase"
    if fallback == "last_number":
        number = last_number(text)
        if number is not None:
            return number, "last_number"
    return None, "none"


def _box_content(text: str, match: re.Match[str], closing: dict[int, int]) -> str | None:
    """What one box command holds: its balanced `{...}`, or the token after `\\boxed `."""
    i = match.end()
    if i < len(text) and text[i] == "{":
        end = closing.get(i)
        return None if end is None else text[i + 1 : end].strip().rstrip(".").strip()
    if match.group().endswith(" "):
        token = _BARE_BOX_TOKEN.match(text, i)
        return token.group().rstrip(".,;") if token else None
    return None


def _matching_braces(text: str) -> dict[int, int]:
    """Position of each `{` -> position of its `}`, in one pass (a scan per box is quadratic on long, broken
    output). A `{` never closed, as in a truncated response, has no entry."""
    closing: dict[int, int] = {}
    still_open: list[int] = []
    for brace in re.finditer(r"[{}]", text):
        if brace.group() == "{":
            still_open.append(brace.start())
        elif still_open:
            closing[still_open.pop()] = brace.start()
    return closing


def _unwrap_math(answer: str) -> str:
    """`$x$` / `\\(x\\)` -> `x`; a lone `$` or `\\$` before a number is a currency sign, not math."""
    for left, right in (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(answer) > len(left) + len(right) and answer.startswith(left) and answer.endswith(right):
            return answer[len(left) : -len(right)].strip()
    if answer.count("$") == 1:
        answer = re.sub(r"^\\?\$\s*(?=[-\d])", "", answer)
    return answer
