"""Rewriting one extracted answer into the LaTeX that math-verify reads as the value the writer meant: pure string
functions, no math-verify.

What goes: math delimiters, currency signs and words, thousands separators (`1,234`, `1,\\!234`, `1{,}234`,
`1\\,234`), units after a number (`\\text{ cm}`, `^\\circ`, `miles`), markdown bold. What is rewritten: unicode math
symbols, `4.5e33` (which LaTeX would read as 4.5*e + 33), mixed numbers `1\\frac{1}{4}` (which LaTeX would read as
1*1/4), `percent` / `%`, and `and` / `or` between the items of a list.
"""

from __future__ import annotations

import re

# Unicode a model (or a dataset) writes for LaTeX commands. Superscript digits become powers.
_UNICODE = {
    "\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ", "\u22c5": "\\cdot ",
    "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u2264": "\\le ", "\u2265": "\\ge ", "\u2260": "\\ne ", "\u00b1": "\\pm ",
    "\u221a": "\\sqrt", "\u00b0": "^\\circ", "\u2208": "\\in ", "\u222a": "\\cup ",
}
_SUPERSCRIPTS = {"\u00b2": "2", "\u00b3": "3", "\u00b9": "1", "\u2070": "0", "\u2074": "4", "\u2075": "5"}
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_CURRENCY = re.compile(r"\\\$|\$|[\u20ac\u00a3\u00a5\u20b9]|\b(?:USD|EUR|Rs\.?)(?=\s|\d|$)")
# Digit groups joined by a LaTeX separator: 1,\!234  1{,}234  1\,234  1\ 234  1~234.
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:,\\!\s*|\{,\}\s*|\\,|\\ |~)(?=\d{3}(?!\d))")
_PLAIN_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?")
_E_NOTATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([-+]?\d+)(?![\w.])")
# An integer right before a proper fraction of integers is a mixed number: 12\frac{3}{5} = 12 + 3/5.
_MIXED = re.compile(r"(?<![\w.}^_{])(\d+)\s*\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_PERCENT_WORD = re.compile(r"\s*(?:\\?%|\\text\{\s*%\s*\}|\s*(?:percentage|percent|pct)\b\.?)")
_LIST_WORD = re.compile(r"\s*(?:\\text\{\s*(?:,?\s*and|or)\s*\}|\\q?quad\b|(?<=[\s\d)}])(?:,?\s*and|or)(?=\s))\s*")
# A unit after a number: \text-like groups, ^\circ, primes, and plain words of two letters or more; kept apart
# from the number by a space (or a command), so that "4t", "7x" and "5 x" stay products. A one-digit power belongs
# to the unit before it (`\text{cm}^2`, `m^3`), never to the number: `10^6` is a million, not 10 with a unit.
_UNIT_GROUP = r"\\(?:text|textnormal|textrm|mbox|mathrm|rm|textbf|operatorname)\s*\{[^{}]*\}(?:\s*\^\s*\{?\d\}?)?"
_UNIT_TAIL = re.compile(
    rf"(?:\s*(?:{_UNIT_GROUP}|\^\s*\{{?\s*\\circ\s*\}}?|\^\s*\{{?\s*\\prime(?:\\prime)?\s*\}}?"
    rf"|[/~]|\\[,;: !]|\s[A-Za-z][A-Za-z.]*[A-Za-z.](?:\^\{{?\d\}}?)?))+\s*$"
)
_NUMBER_HEAD = re.compile(
    r"^[-+]?(?:\d[\d.,]*|\.\d+)(?:\s*\\times\s*10\s*\^\s*\{?[-+]?\d+\}?)?(?::\d{2})?$"
    r"|^[-+]?\\[dt]?frac\s*\{[^{}]+\}\s*\{[^{}]+\}$"
    r"|^[-+]?\(?\d+\s*\+\s*\\frac\{\d+\}\{\d+\}\)?$"
)


def strip_delimiters(text: str) -> str:
    """`$x$`, `$$x$$`, `\\(x\\)`, `\\[x\\]` -> `x`, repeatedly; a trailing period or comma goes too."""
    text = text.strip()
    changed = True
    while changed:
        changed = False
        text = text.rstrip(".,;:").strip()
        for left, right in _DELIMITERS:
            if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
                inner = text[len(left) : -len(right)]
                if left == "$" and "$" in inner:  # "$a$ and $b$" is two spans, not one
                    continue
                text, changed = inner.strip(), True
                break
    return text


def unicode_to_latex(text: str) -> str:
    """Unicode minus, times, pi, <=, sqrt, degree ... -> their LaTeX commands; x² -> x^{2}."""
    for char, latex in _UNICODE.items():
        text = text.replace(char, latex)
    for char, digit in _SUPERSCRIPTS.items():
        text = text.replace(char, f"^{{{digit}}}")
    return text


def drop_thousands_separators(text: str) -> str:
    """`1,\\!234`, `1{,}234`, `1\\,234` anywhere, and `1,234,567` / `1 234` when they are the whole answer (a bare
    `1,234` inside a longer answer may be a list)."""
    text = _LATEX_THOUSANDS.sub("", text)
    if _PLAIN_THOUSANDS.fullmatch(text.strip()):
        text = text.replace(",", "").replace(" ", "")
    return text


def drop_currency(text: str) -> str:
    """`\\$`, `$`, euro, pound, yen, rupee signs and `USD`, `dollars`, `cents` next to a number."""
    text = _CURRENCY.sub("", text)
    return re.sub(r"(?<=\d)\s*(?:\\text\{\s*)?(?:dollars?|cents?)\}?\.?$", "", text.strip()).strip()


def drop_units(text: str) -> str:
    """`12 \\text{ cm}^2`, `90^\\circ`, `1.6 \\mathrm{~cm}`, `125 miles`, `4:30 p.m.` -> the number. Only when what is
    left is a plain number (or fraction / scientific / time), so `2 \\sin b` and `4t` stay whole."""
    match = _UNIT_TAIL.search(text)
    if match and match.start() > 0:
        head = text[: match.start()].strip()
        if _NUMBER_HEAD.match(head):
            return head
    return text


def expand_e_notation(text: str) -> str:
    """`4.5e33` -> `4.5\\times10^{33}`: in LaTeX `e` is Euler's number, so 4.5e33 would read as 4.5e + 33."""
    return _E_NOTATION.sub(r"\1\\times10^{\2}", text)


def expand_mixed_numbers(text: str) -> str:
    """`12\\frac{3}{5}` -> `(12+\\frac{3}{5})` when the fraction is proper; LaTeX alone reads it as 12*3/5."""

    def mixed(match: re.Match[str]) -> str:
        whole, num, den = match.groups()
        if int(num) >= int(den) or int(den) == 0:
            return match.group()
        return f"({whole}+\\frac{{{num}}}{{{den}}})"

    return _MIXED.sub(mixed, text)


def normalize_percent(text: str) -> str:
    """`28 percent`, `28 pct`, `28%`, `28 \\%` -> `28\\%` (math-verify's percent form)."""
    return _PERCENT_WORD.sub(r"\\%", text)


def normalize_answer(answer: str) -> str:
    """The LaTeX math-verify should read for one extracted answer (without `$...$`); "" when nothing is left."""
    text = strip_delimiters(answer.replace("**", ""))
    text = unicode_to_latex(text)
    text = re.sub(r"\\math(?:rm|it)\s*\{\s*e\s*\}", "e", text)  # \mathrm{e}: Euler's number, which LaTeX parsers miss
    text = re.sub(r"\\sqrt\s*\(([^()]*)\)", r"\\sqrt{\1}", text)  # \sqrt(2): a root, not \sqrt times (2)
    text = drop_thousands_separators(text)
    text = drop_currency(text)
    text = strip_delimiters(text)
    text = normalize_percent(text)
    percent = text.endswith("\\%")
    if percent:
        text = text[:-2].rstrip()
    text = expand_mixed_numbers(expand_e_notation(text))
    text = drop_units(text)
    text = drop_thousands_separators(text)  # "1,000.99 cm^2": the separators are visible only once the unit is gone
    text = _LIST_WORD.sub(", ", text)
    text = re.sub(r",\s*(?:,\s*)+", ", ", text).strip(" ,")
    text = re.sub(r"\\!", "", text)
    return (text + "\\%" if percent and text else text).strip()
