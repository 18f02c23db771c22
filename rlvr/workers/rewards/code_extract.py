"""Finds the program in a model's response: the last fenced code block in the requested language.

Reasoning is dropped first (everything up to the last `</think>`, as for math answers), so code drafted while
thinking never runs. Then, in order: the last block whose info string names the language (```python / ```py,
```cpp / ```c++, ...), else the last block with no info string, else None. A block still open at the end of the
response (cut off by the length limit) is not code that can be trusted to be complete, and is ignored.
"""

from __future__ import annotations

import re

from rlvr.workers.rewards.math_answer import strip_thinking

LANGUAGE_TAGS: dict[str, frozenset[str]] = {
    "python": frozenset({"python", "py", "python3", "py3"}),
    "cpp": frozenset({"cpp", "c++", "cxx", "cc", "hpp"}),
    "c": frozenset({"c", "h"}),
}

# An opening fence (``` or ~~~, 3 or more), its info string, the body, and a closing fence of the same run of
# characters, each fence on a line of its own (indented by up to 3 spaces, as CommonMark allows).
_FENCE = re.compile(
    r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)^ {0,3}(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_SPECIAL_TOKEN = re.compile(r"<\|[^|<>\s]*\|>|</s>")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """All complete fenced blocks after the reasoning, as (lowercased first word of the info string, body)."""
    text = _SPECIAL_TOKEN.sub("", strip_thinking(text))
    blocks = []
    for match in _FENCE.finditer(text):
        words = match.group("info").strip().split()
        tag = words[0].lower().strip("{}.") if words else ""
        blocks.append((tag, match.group("body")))
    return blocks


def extract_code(text: str, language: str = "python") -> str | None:
    """The program to run, or None when the response has no usable code block."""
    if language not in LANGUAGE_TAGS:
        raise ValueError(f"language must be one of {sorted(LANGUAGE_TAGS)}, got {language!r}")
    blocks = code_blocks(text)
    tags = LANGUAGE_TAGS[language]
    for wanted in (lambda tag: tag in tags, lambda tag: tag == ""):
        for tag, body in reversed(blocks):
            if wanted(tag) and body.strip():
                return body
    return None
