"""Answer normalisation: the official text normalisers (SQuAD/HotpotQA, TriviaQA) and a
forgiving number parser.

All are pure functions of one string, so every metric that compares answers agrees on what
"the same answer" means. The regexes have no nested or overlapping quantifiers, so a 1 MB model
output is parsed in linear time.
"""

from __future__ import annotations

import re
import string
from fractions import Fraction
from typing import NamedTuple

__all__ = ["Number", "normalize_answer", "normalize_triviaqa", "parse_bare_number", "parse_number",
           "read_number"]

_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
# triviaqa_evaluation.py's `handle_punc`: ASCII punctuation and four quote marks become spaces.
_PUNCTUATION_TO_SPACE = str.maketrans(dict.fromkeys(string.punctuation + "\u2018\u2019\u00b4`", " "))
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


def normalize_triviaqa(s: str) -> str:
    """Normalise an answer the way the official TriviaQA evaluation script does.

    Unlike `normalize_answer`, punctuation becomes a space instead of vanishing, and so do
    underscores (Wikipedia titles) and the quote marks ‘ ’ ´ `: "David_Seville" is
    "david seville", and "U.S.A." is "u s" (the last "a" is then an article).

    Args:
        s: Any text.

    Returns:
        The normalised text; `""` when nothing is left.
    """
    text = _ARTICLES.sub(" ", s.replace("_", " ").lower().translate(_PUNCTUATION_TO_SPACE))
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


class Number(NamedTuple):
    """A number read from an answer.

    Attributes:
        value: The value as a float (`inf` when it overflows).
        exact: The exact value as written ("0.1" is 1/10, "2/3" is 2/3), or `None` for a number
            too long to be an answer (over 1000 digits, or an exponent over 1000).
    """

    value: float
    exact: Fraction | None


_MAX_EXACT_DIGITS = 1000  # keeps int parsing and 10**exponent cheap on adversarial input


def _exact(num: str, exp: str, den: str | None) -> Fraction | None:
    if len(num) + len(den or "") > _MAX_EXACT_DIGITS or len(exp) > 6:
        return None
    if exp and abs(int(exp[1:])) > _MAX_EXACT_DIGITS:
        return None
    value = Fraction(num + exp)
    return value / Fraction(den) if den is not None else value


def _first_number(text: str) -> tuple[Number, re.Match[str]] | None:
    match = _NUMBER.search(text)
    if match is None:
        return None
    num, exp = match.group("num").replace(",", ""), match.group("exp") or ""
    den = None if match.group("den") is None else match.group("den").replace(",", "")
    value = float(num + exp)
    if den is not None:
        if float(den) == 0:
            return None
        value /= float(den)
    exact = _exact(num, exp, den)
    if match.group("sign") == "-":
        value = -value
        exact = None if exact is None else -exact
    return Number(value, exact), match


def read_number(s: str, *, bare: bool = False) -> Number | None:
    """Read the first number in an answer like `parse_number`, keeping its exact value.

    Args:
        s: An answer string.
        bare: Read `s` only if it is nothing but a decorated number (see `parse_bare_number`).

    Returns:
        The `Number`, or `None` when there is none (or it divides by zero).
    """
    text = _latex_to_plain(s)
    found = _first_number(text)
    if found is None:
        return None
    number, match = found
    if bare and any(ch.isalnum() for ch in text[:match.start()] + text[match.end():]):
        return None
    return number


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
    number = read_number(s)
    return None if number is None else number.value


def parse_bare_number(s: str) -> float | None:
    """Read `s` as a number only if it is nothing but a decorated number.

    Like `parse_number`, but only symbols may surround the number (currency signs, "%"; no
    words, no other digits): "$29.00", "50%" and "\\frac{1}{2}" are bare numbers; "Route 66",
    "x = 3", "3 or 4", "22 December", "3.5 billion" and "29 dollars" are not, because the
    words change what the number means. Exact-match metrics use this, so that numbers compare
    by value while answers that merely contain a number still compare as text.

    Returns:
        The value, or `None` when `s` is not a bare number.
    """
    number = read_number(s, bare=True)
    return None if number is None else number.value
