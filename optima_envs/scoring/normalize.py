"""Answer normalisation: the SQuAD/HotpotQA text normaliser and a forgiving number parser.

Both are pure functions of one string, so every metric that compares answers agrees on what
"the same answer" means. The regexes have no nested or overlapping quantifiers, so a 1 MB model
output is parsed in linear time.
"""

from __future__ import annotations

import re
import string

__all__ = ["normalize_answer", "parse_bare_number", "parse_number"]

_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(s: str) -> str:
    """Normalise an answer the way the official SQuAD and HotpotQA evaluation scripts do.

    Lowercase, drop ASCII punctuation (`string.punctuation`, as the official scripts do, so
    our scores stay comparable with published ones), drop the articles a/an/the, and collapse
    runs of whitespace to one space.

    Args:
        s: Any text.

    Returns:
        The normalised text; `""` when nothing is left.
    """
    text = _ARTICLES.sub(" ", s.lower().translate(_DROP_PUNCTUATION))
    return " ".join(text.split())


# LaTeX spellings of numbers, rewritten to plain text before the number regex runs.
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*(?:\{([^{}]*)\}|(\d))\s*(?:\{([^{}]*)\}|(\d))")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_LATEX_REPLACEMENTS = (
    ("{,}", ","),  # 1{,}000
    ("\\,", ""),  # thin spaces used as thousands separators: 1\,000
    ("\\!", ""),
    ("\\;", ""),
    ("\\$", "$"),
    ("\\%", "%"),
    ("\u2212", "-"),  # Unicode minus sign
)

# A number: optional sign (not glued to a word, so "COVID-19" is 19), an integer with optional
# comma thousands separators or a bare decimal, an optional exponent, an optional "/denominator".
# `(?!,?\d)` after the separated form stops "1,0000" from reading as 1000 (it is 1). Whitespace
# is only skipped after a sign, so a long run of spaces cannot make the search quadratic.
_INTEGER = r"(?:\d{1,3}(?:,\d{3})+(?!,?\d)|\d+)"
_NUMBER = re.compile(
    rf"(?:(?P<sign>(?<!\w)[-+])\s*)?"
    rf"(?P<num>{_INTEGER}(?:\.\d+)?|\.\d+)"
    rf"(?P<exp>[eE][-+]?\d+)?"
    rf"(?:\s*/\s*(?P<den>{_INTEGER}(?:\.\d+)?))?"
)


def _latex_to_plain(s: str) -> str:
    for old, new in _LATEX_REPLACEMENTS:
        s = s.replace(old, new)

    def frac(m: re.Match[str]) -> str:
        num = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
        den = (m.group(3) if m.group(3) is not None else m.group(4)).strip()
        if _PLAIN_NUMBER.fullmatch(num) and _PLAIN_NUMBER.fullmatch(den):
            return f"{num}/{den}"
        return m.group(0)

    return _LATEX_FRAC.sub(frac, s)


def _first_number(text: str) -> tuple[float, re.Match[str]] | None:
    match = _NUMBER.search(text)
    if match is None:
        return None
    value = float(match.group("num").replace(",", "") + (match.group("exp") or ""))
    if match.group("den") is not None:
        den = float(match.group("den").replace(",", ""))
        if den == 0:
            return None
        value /= den
    if match.group("sign") == "-":
        value = -value
    return value, match


def parse_number(s: str) -> float | None:
    """Read the first number in an answer string, ignoring the decorations models add.

    Understands currency signs and LaTeX escapes ("$29.00", "\\$29"), comma thousands
    separators ("1,000", "1{,}000"), signs ("-3.5", Unicode minus), exponents ("1e3"),
    fractions ("1/2", "\\frac{1}{2}", "\\dfrac12") and trailing units or words ("29 dollars").
    A percentage is read as its number, not divided by 100 ("50%" is 50.0), because GSM8K-style
    gold answers write percentages as bare numbers. With several numbers, the first one wins
    ("5 - 2 = 3" is 5.0): pass an extracted answer, not a whole response.

    Args:
        s: An answer string.

    Returns:
        The value as a float, or `None` when `s` holds no number (or divides by zero).
    """
    found = _first_number(_latex_to_plain(s))
    return None if found is None else found[0]


def parse_bare_number(s: str) -> float | None:
    """Read `s` as a number only if it is nothing but a decorated number.

    Like `parse_number`, but only symbols may precede the number (currency signs, not words)
    and no other digit may follow it: "$29.00", "29 dollars" and "50%" are bare numbers,
    "Route 66", "x = 3" and "3 or 4" are not. Exact-match metrics use this, so that numbers
    compare by value while answers that merely contain a number still compare as text.

    Returns:
        The value, or `None` when `s` is not a bare number.
    """
    text = _latex_to_plain(s)
    found = _first_number(text)
    if found is None:
        return None
    value, match = found
    prefix, suffix = text[:match.start()], text[match.end():]
    if any(ch.isalnum() for ch in prefix) or any(ch.isdigit() for ch in suffix):
        return None
    return value
