"""Finding the final answer in a model response: pure string functions, no math-verify.

clean_response keeps what the model said as its answer turn: the first chat turn only (a model that keeps going
writes fake user turns and answers them), without special tokens, with reasoning (`<think>...</think>`) dropped,
fullwidth characters (`＼boxed｛1｝`) made ASCII and unicode box frames made `\\boxed{}`.

extract_candidates then finds the answer in order of trust:
1. strong anchors, the last one wins: a box (`\\boxed{}`, `\\fbox{}`, `boxed{}` without its backslash; boxes side by
   side, joined by "and" or commas, are one answer: a list) or a "final answer is ..." phrase;
2. weak anchors if there is no strong one, the last wins: "the answer is ...", "Answer: ...", "#### ...";
3. with `fallback="last_number"`, the text itself (math-verify then takes the last LaTeX span or number in it), and
   last of all the last number.
Each is a Candidate: ("math", an answer string to normalize) or ("text", prose for math-verify to search). The
checker uses the first candidate that parses.
"""

from __future__ import annotations

import re
from typing import Literal

Fallback = Literal["last_number", "none"]
How = Literal["boxed", "phrase", "last_number", "none"]
Kind = Literal["math", "text"]
Candidate = tuple[Kind, str]

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_SPECIAL_TOKEN = re.compile(r"<\|[^|<>\n]{0,40}\|>|</?s>|<(?:bos|eos|end_of_turn|start_of_turn)>")
# Markers after which the text is no longer this answer: the turn ended, or a new turn began.
_END_OF_TURN = re.compile(
    r"<\|(?:im_end|eot_id|eom_id|endoftext|end_of_text|end|end\u2581of\u2581sentence|im_start|start_header_id"
    r"|User|user)\|>|</s>|<eos>|<end_of_turn>|<start_of_turn>"
)
_LEADING_TOKENS = re.compile(r"^(?:\s|<\|[^|<>\n]{0,40}\|>|<s>|<bos>|<start_of_turn>|(?<=>)(?:assistant|model)\b)*")
_BOX_FRAME = re.compile(
    r"[\u250c\u250f\u2554\u256d][\u2500\u2501\u2550]+[\u2510\u2513\u2557\u256e][ \t]*\n[ \t]*"
    r"[\u2502\u2503\u2551](?P<content>[^\n]*?)[\u2502\u2503\u2551][ \t]*\n[ \t]*"
    r"[\u2514\u2517\u255a\u2570][\u2500\u2501\u2550]+[\u2518\u251b\u255d\u256f]"
)
# \boxed, \fbox, \framebox, and "boxed" that lost its backslash (then it needs a brace, so prose "boxed" is no box).
# Square glyphs written in place of \boxed: white/black squares (U+25A0-25A3, 25FB-25FE), ballot box (U+2610),
# large squares (U+2B1A-2B1C), rectangles (U+25AD, 25AF); only right before an opening brace.
_GLYPH_BOX = re.compile("[\u25a0-\u25a3\u25ad\u25af\u25fb-\u25fe\u2610\u2b1a-\u2b1c][ \t]*(?=\\{)")
_BARE_SET = re.compile(r"\\?\{[^{}]*,[^{}]*\\?\}")  # a whole response that is one set literal: {5, 2}
_BOX = re.compile(r"\\(?:boxed|fbox|framebox)(?![A-Za-z]) *|(?<![A-Za-z\\])boxed *(?=\{)")
_BARE_BOX_TOKEN = re.compile(r"[^\s$\\{}]+")  # what `\boxed 5` holds: up to a space, `$` or a command
# What may stand between two boxes of one answer: spaces, commas, "and"/"or", \quad, math delimiters, a \text{...}
# with "and"/"or" in it ("\text{ for part (a) and }"), the name of the next part ("y_2 =").
_BOX_JOINER = re.compile(
    r"(?:\s|[,;&.]|\$|\\[()\[\]]|\\\\|\\q?quad\b|\\[,;:! ]|\band\b|\bor\b"
    r"|\\text\s*\{[^{}]*\b(?:and|or)\b[^{}]*\}|\\text\s*\{\s*,?\s*\}|[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=)*"
)
_FINAL_ANSWER = re.compile(r"final\s+answer[\s*]*(?:is\b|:|=)?[\s*:]*", re.IGNORECASE)
_ANSWER = re.compile(
    r"(?:\banswer[\s*]*(?:is\b|:|=)|\banswer(?=[\s*]*(?:\$|\\\(|\\\[))|####"
    r"|\u7b54\u6848\u662f|\u7b54\u6848[:\uff1a])[\s*:]*",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\s+I hope\b")
_PROSE_WORD = re.compile(r"[A-Za-z]{3,}")
_LIST_WORDS = {"and", "or"}
# A number: optional sign (not when it is a binary minus as in "x-5"), integer part with or without thousands
# separators, optional decimals, optional "/denominator".
_NUMBER_RE = re.compile(
    r"(?:(?<![\w)\]}])-)?(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:/\d+(?!\d))?"
)


def sanitize(text: object) -> str:
    """A str whatever comes in: bytes are decoded (invalid UTF-8 becomes U+FFFD), lone surrogates (from a decoder's
    surrogateescape) become "?", so that regexes, sympy and pickling never trip on them."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = str(text)
    return text.encode("utf-8", errors="replace").decode("utf-8") if _has_surrogates(text) else text


def first_turn(text: str) -> str:
    """The assistant turn only: leading special tokens (and a role name after them) go, everything from the first
    end-of-turn or new-turn marker on goes, other special tokens are removed."""
    text = _LEADING_TOKENS.sub("", text, count=1)
    end = _END_OF_TURN.search(text)
    if end:
        text = text[: end.start()]
    return _SPECIAL_TOKEN.sub("", text)


def strip_thinking(text: str) -> str:
    """Drops everything up to and including the last `</think>` (the opening tag is often part of the prompt,
    so it need not be there). An opening `<think>` left unclosed after that means the response ran out inside
    its reasoning: that part holds no final answer and is dropped too."""
    close = text.rfind(_THINK_CLOSE)
    if close >= 0:
        text = text[close + len(_THINK_CLOSE) :]
    unclosed = text.find(_THINK_OPEN)
    return text[:unclosed] if unclosed >= 0 else text


def fullwidth_to_ascii(text: str) -> str:
    """＼boxed｛４２｝ -> \\boxed{42}: fullwidth forms (U+FF01..FF5E) and the ideographic space to ASCII."""
    if not any("\uff01" <= ch <= "\uff5e" or ch == "\u3000" for ch in text):
        return text
    return "".join(
        chr(ord(ch) - 0xFEE0) if "\uff01" <= ch <= "\uff5e" else (" " if ch == "\u3000" else ch) for ch in text
    )


def unicode_box_frames(text: str) -> str:
    """A line framed by box-drawing glyphs (┌──┐ / │ x │ / └──┘) is a box: `\\boxed{x}`."""
    return _BOX_FRAME.sub(lambda m: f"\\boxed{{{m.group('content').strip()}}}", text)


def glyph_boxes(text: str) -> str:
    """A box glyph right before braces (`□{42}`, `■{42}`, `☐{42}`) marks the final answer as `\\boxed{}` does."""
    return _GLYPH_BOX.sub(r"\\boxed", text)


def clean_response(text: object) -> str:
    """The part of a response that can hold its final answer (see the module docstring)."""
    text = glyph_boxes(unicode_box_frames(fullwidth_to_ascii(sanitize(text))))
    return strip_thinking(first_turn(text))


def last_boxed(text: str) -> str | None:
    """Content of the last complete, non-empty box (nested braces allowed); boxes right before it that belong to the
    same answer (only commas, "and", \\quad, delimiters between them) are joined to it with ", ". A box left
    unclosed (a truncated response) is skipped."""
    found = _boxes(text, _matching_braces(text))
    return found[-1][2] if found else None


def answer_phrase(text: str) -> str | None:
    """X from the last "The answer is X" / "Answer: X" / "#### X", trimmed to the answer: up to the end of its line
    or sentence (or "I hope it is correct"), markdown bold removed."""
    anchors = _phrases(text, _ANSWER)
    return anchors[-1][1] if anchors else None


def last_number(text: str) -> str | None:
    """The last number in the text: 12, -3, 2.5, 1,234 (returned without separators: "1234"), 3/4."""
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def looks_like_math(answer: str) -> bool:
    """False for prose ("Jane started growing it 3 hours ago"): a word of three or more letters outside LaTeX
    commands and \\text{}, other than "and" / "or"."""
    bare = re.sub(r"\\(?:text|textbf|mathrm|mbox|textnormal|operatorname)\s*\{[^{}]*\}|\\[A-Za-z]+", " ", answer)
    return all(word.lower() in _LIST_WORDS for word in _PROSE_WORD.findall(bare))


def extract_candidates(text: object, fallback: Fallback = "last_number") -> tuple[list[Candidate], How]:
    """The answer's candidates, most trusted first, and how the answer was found (see the module docstring).

    An anchored answer is final: if it does not parse, no other number in the text stands in for it (that is how a
    checker credits "1" in a garbled "1 + \\frac{1}{\\mathrm{e}}"); only a weak phrase followed by prose ("the
    answer is correct") lets the search of the text go on. A box left unclosed at the end means the response was
    cut off in its answer: no answer."""
    if fallback not in ("last_number", "none"):
        raise ValueError(f"fallback must be 'last_number' or 'none', got {fallback!r}")
    clean = clean_response(text)
    closing = _matching_braces(clean) if _BOX.search(clean) else {}
    if _ends_in_open_box(clean, closing):
        return [], "none"
    strong = [(start, content, "boxed") for start, _, content in _boxes(clean, closing)]
    strong += [(start, content, "phrase") for start, content in _phrases(clean, _FINAL_ANSWER)]
    anchors = strong or [(start, content, "phrase") for start, content in _phrases(clean, _ANSWER)]
    candidates: list[Candidate] = []
    if anchors:
        _, content, how = max(anchors, key=lambda anchor: anchor[0])
        if how == "boxed" or looks_like_math(content):
            candidates.append(("math", content))
        if how == "phrase":
            candidates.append(("text", content))
        # Only a weak phrase followed by prose ("the answer is correct") lets the text search go on after it.
        if strong or candidates[0][0] == "math":
            return candidates, how
    clean = clean.strip()
    if fallback == "none" or not clean:
        return candidates, "phrase" if candidates else "none"
    how = "phrase" if candidates else "last_number"
    if _single_math_span(clean) or _BARE_SET.fullmatch(clean):
        return candidates + [("math", clean)], how
    candidates.append(("text", clean))
    number = last_number(clean)
    if number is not None and "$" not in clean and "\\" not in clean:  # plain prose: its last number
        candidates.append(("math", number))
    return candidates, how


def extract_answer(text: object, fallback: Fallback = "last_number") -> tuple[str | None, How]:
    """(answer, how it was found) as a plain string, without math-verify (for logs and cheap string checks; the
    reward itself uses extract_candidates)."""
    candidates, how = extract_candidates(text, fallback)
    answer = answer_preview(candidates, how)
    return (answer, how) if answer is not None else (None, "none")


def answer_preview(candidates: list[Candidate], how: How) -> str | None:
    """The answer as a string: the anchored answer, else the whole text when it is one math span, else its last
    number."""
    if not candidates:
        return None
    kind, answer = candidates[0]
    if kind == "text" and how == "last_number":
        return last_number(answer)
    return answer


def gold_candidates(gold: object) -> list[Candidate]:
    """How to read a ground truth: a bare answer ("2\\sqrt{3}", "1331 and 1728") is math as a whole; one with math
    delimiters, a box or prose around it (a full reference solution) is searched like a response."""
    text = sanitize(gold).strip()
    if not text:
        return []
    delimited = any(mark in text for mark in ("$", "\\(", "\\[", "####"))
    boxed = bool(_BOX.search(text))
    if not delimited and not boxed and looks_like_math(text):
        return [("math", text), ("text", text)]
    if not boxed and _single_math_span(text):
        return [("math", text)]
    candidates, _ = extract_candidates(text, "last_number")
    return candidates


def _boxes(text: str, closing: dict[int, int]) -> list[tuple[int, int, str]]:
    """(start, end, content) of each answer box, boxes of one answer merged (content joined with ", ")."""
    matches = list(_BOX.finditer(text))
    merged: list[tuple[int, int, str]] = []
    for match in matches:
        found = _box_content(text, match, closing)
        if found is None:
            continue
        end, content = found
        if merged and _BOX_JOINER.fullmatch(text, merged[-1][1], match.start()):
            start, _, previous = merged.pop()
            content = f"{previous}, {content}"
        else:
            start = match.start()
        merged.append((start, end, content))
    return merged


def _box_content(text: str, match: re.Match[str], closing: dict[int, int]) -> tuple[int, str] | None:
    """(end, content) of one box: its balanced `{...}`, or the token after `\\boxed `; None if empty or unclosed."""
    i = match.end()
    if i < len(text) and text[i] == "{":
        end = closing.get(i)
        if end is None:
            return None
        content = text[i + 1 : end].strip().rstrip(".").strip()
        return (end + 1, content) if content else None
    if match.group().endswith(" "):
        token = _BARE_BOX_TOKEN.match(text, i)
        content = token.group().rstrip(".,;") if token else ""
        return (token.end(), content) if content else None
    return None


def _phrases(text: str, anchor: re.Pattern[str]) -> list[tuple[int, str]]:
    """(start, answer) for each non-empty phrase answer after `anchor`: a math span right after it (which may
    run over several lines), else the rest of its line up to the end of the sentence."""
    found = []
    for match in anchor.finditer(text):
        answer = _leading_math_span(text, match.end())
        if answer is None:
            line = text[match.end() :].split("\n", 1)[0]
            answer = _SENTENCE_END.split(line, maxsplit=1)[0]
        answer = answer.replace("**", "").strip().rstrip(".,;:!\u3002").strip()
        if answer:
            found.append((match.start(), answer))
    return found


def _leading_math_span(text: str, start: int) -> str | None:
    """The `$...$` / `$$...$$` / `\\(...\\)` / `\\[...\\]` span that opens at `start` (after spaces), if it closes."""
    i = len(text) - len(text[start:].lstrip(" \t"))
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if text.startswith(left, i):
            close = text.find(right, i + len(left))
            while right.startswith("$") and close > 0 and text[close - 1] == "\\":  # \$ is a dollar sign
                close = text.find(right, close + 1)
            return text[i : close + len(right)] if close > i else None
    return None


def _ends_in_open_box(text: str, closing: dict[int, int]) -> bool:
    """True when the last box command opens a brace that is never closed (a response cut off in its answer)."""
    matches = list(_BOX.finditer(text))
    return bool(matches) and text.startswith("{", matches[-1].end()) and matches[-1].end() not in closing


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


def _single_math_span(text: str) -> bool:
    """True for "$x$", "$$x$$", "\\(x\\)", "\\[x\\]" holding the whole text."""
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(left) and text.endswith(right) and len(text) > len(left) + len(right):
            inner = text[len(left) : -len(right)]
            return left not in inner and right not in inner
    return False


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
