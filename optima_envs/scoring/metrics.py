"""Metrics: compare one extracted answer with the gold answer and return a score in [0, 1].

Every metric is a pure function. A wrong or badly formatted prediction scores 0.0; an answer
that cannot be scored at all (an empty or number-less gold, a gold outside the options, LaTeX
math-verify cannot read) raises `ScoringError`, so the failure is recorded, never scored 0.
Where a metric deliberately departs from the official script it follows, its docstring says so.
"""

from __future__ import annotations

import ast
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from optima_envs.errors import ConfigError, ScoringError
from optima_envs.scoring import _math_client
from optima_envs.scoring.normalize import Number, normalize_answer, normalize_triviaqa, read_number

__all__ = [
    "choice_match",
    "exact_match",
    "math_equivalent",
    "max_over_aliases",
    "numeric_match",
    "token_f1",
    "triviaqa_f1",
    "word_match",
]

REL_TOL = 1e-6
"""How far apart two numbers may be, relatively, when either is not an integer, so a rounded
decimal matches ("0.3333333" is 1/3). Two integers get no tolerance: 1450001 is not 1450000."""
_YES_NO = frozenset({"yes", "no", "noanswer"})


def _require_gold(gold: str, metric: str) -> None:
    if not gold.strip():
        raise ScoringError(f"{metric}: the gold answer is empty ({gold!r}); fix the dataset row.")


def _same_number(a: Number, b: Number) -> bool:
    """Equal exactly, or (unless both are integers, "1450000.0" included) within `REL_TOL`."""
    if a.exact is not None and b.exact is not None:
        if a.exact == b.exact:
            return True
        if a.exact.denominator == 1 and b.exact.denominator == 1:
            return False
    elif a.value.is_integer() and b.value.is_integer():
        return a.value == b.value
    return math.isclose(a.value, b.value, rel_tol=REL_TOL)


def _f1(pred_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 of the normalised answers, as HotpotQA's official evaluation computes it.

    If either normalised answer is "yes", "no" or "noanswer" and they differ, the score is 0
    (a partial overlap with a yes/no answer is no credit). If either side normalises to no
    tokens (e.g. "The"), the score is 1.0 when both do, else 0.0 (SQuAD v2's rule).

    Raises:
        ScoringError: If `gold` is empty or whitespace.
    """
    _require_gold(gold, "token_f1")
    pred_norm, gold_norm = normalize_answer(prediction), normalize_answer(gold)
    if pred_norm != gold_norm and (pred_norm in _YES_NO or gold_norm in _YES_NO):
        return 0.0
    pred_tokens, gold_tokens = pred_norm.split(), gold_norm.split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    return _f1(pred_tokens, gold_tokens)


def triviaqa_f1(prediction: str, gold: str) -> float:
    """Token F1 as TriviaQA's official evaluation (triviaqa_evaluation.py) computes it.

    The tokens are those of `normalize_triviaqa` (so "David_Seville" matches "David Seville"),
    there is no yes/no rule, and no shared token means 0.0, even when both sides normalise to
    nothing. Take the best alias with `max_over_aliases`, as the official script does.

    Raises:
        ScoringError: If `gold` is empty or whitespace.
    """
    _require_gold(gold, "triviaqa_f1")
    return _f1(normalize_triviaqa(prediction).split(), normalize_triviaqa(gold).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 if both answers are plain numbers with equal values, or else their normalised texts
    are equal (SQuAD's exact match).

    Unlike SQuAD, two plain numbers compare by value: "$29.00" matches "29", "1,000" matches
    "1000" and "\\frac{1}{2}" matches "0.5", while "3.6" does not match "36" (SQuAD's
    normaliser drops the dot). Integers must be equal exactly; a non-integer may differ by
    1e-6 relative ("0.3333333" matches "1/3"). A number with words around it ("22 December",
    "3.5 billion", "Route 66") is not a plain number and compares as text.

    Raises:
        ScoringError: If `gold` is empty or whitespace.
    """
    _require_gold(gold, "exact_match")
    pred_number, gold_number = read_number(prediction, bare=True), read_number(gold, bare=True)
    if pred_number is not None and gold_number is not None:
        return float(_same_number(pred_number, gold_number))
    return float(normalize_answer(prediction) == normalize_answer(gold))


def max_over_aliases(metric: Callable[[str, str], float], prediction: str,
                     golds: Sequence[str]) -> float:
    """The best score of `prediction` against any accepted gold alias (TriviaQA-style).

    Raises:
        TypeError: If `golds` is a single string (it would be scored character by character).
        ScoringError: If `golds` is empty, or `metric` raises it for any alias.
    """
    if isinstance(golds, str):
        raise TypeError(f"max_over_aliases: `golds` must be a sequence of aliases, got the string "
                        f"{golds!r}; pass [{golds!r}].")
    if not golds:
        raise ScoringError("max_over_aliases: the list of gold aliases is empty.")
    return max(metric(prediction, gold) for gold in golds)


_NUM = r"\d+(?:,\d{3})*(?:\.\d+)?"
_OPERAND = rf"\(*\s*[-+]?\s*{_NUM}\s*\)*"
_EXPRESSION = re.compile(rf"\s*{_OPERAND}(?:\s*[-+*/]\s*{_OPERAND})+")
_OPERATORS = {"\\times": "*", "\\cdot": "*", "\\div": "/", "×": "*", "÷": "/", "−": "-"}
_MAX_EXPRESSION_CHARS = 200


def _arithmetic_value(text: str) -> Number | None:
    """The value of the arithmetic expression `text` starts with ("2 * 17 + 32 apples" is 66),
    or None when it starts with a single number or with no well-formed expression.

    Only numbers, + - * / and parentheses are evaluated (through `ast`, never `eval`), exactly
    in fractions; a division by zero is None."""
    for sign, op in _OPERATORS.items():
        text = text.replace(sign, op)
    match = _EXPRESSION.match(text)
    if match is None or len(match.group()) > _MAX_EXPRESSION_CHARS:
        return None
    try:
        exact = _evaluate(ast.parse(match.group().strip().replace(",", ""), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None
    try:
        value = float(exact)
    except OverflowError:
        value = math.copysign(math.inf, exact)
    return Number(value, exact)


_BINARY: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
}


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(repr(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"not plain arithmetic: {ast.dump(node)[:80]}")


def _final_number(answer: str) -> Number | None:
    """The result of the answer's final equation: its right side's arithmetic, evaluated, or
    else the right side's first number."""
    right = answer.rpartition("=")[2]
    return _arithmetic_value(right) or read_number(right)


def numeric_match(prediction: str, gold: str) -> float:
    """1.0 if the answers' final numbers are equal (GSM8K-style numeric exact match).

    The final number is the first number after the last "=", so an equation is read by its
    result ("5 + 3 = 18" is 18), as math-verify and the reference Optima parser read it; an
    unevaluated expression there is read by its value, as math-verify reads it ("2 * 17 + 32"
    is 66, not 2; "10 - 12 minutes", a range, reads as -2). Unlike
    GSM8K's string check, numbers compare by value ("$18.00" matches "18"): integers exactly,
    non-integers within 1e-6 relative. A prediction without a number is a wrong answer (0.0).
    See `parse_number` for the formats.

    Raises:
        ScoringError: If `gold` has no number.
    """
    gold_number = _final_number(gold)
    if gold_number is None:
        raise ScoringError(f"numeric_match: the gold answer {gold[:80]!r} has no number.")
    pred_number = _final_number(prediction)
    return 0.0 if pred_number is None else float(_same_number(pred_number, gold_number))


# Characters that name a value with no digit, letter or LaTeX command: the empty set ("∅", "{}").
_VALUE_SYMBOLS = frozenset("∅{")
# Dropped before judging whether a prediction could be math: controls, format characters,
# lone surrogates, private-use and unassigned code points.
_NOT_TEXT = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def _could_be_math(prediction: str) -> bool:
    """False when `prediction` cannot be a number or an expression: once whitespace and
    non-text characters are dropped, nothing of it is a digit, a letter (a variable, "π"),
    a LaTeX command or a symbol that names a value. Such an answer needs no math-verify."""
    kept = (c for c in prediction if not c.isspace() and unicodedata.category(c) not in _NOT_TEXT)
    return any(c.isalnum() or c == "\\" or c in _VALUE_SYMBOLS for c in kept)


def math_equivalent(prediction: str, gold: str, timeout_s: float = 5.0) -> float:
    """1.0 if math-verify finds the answers mathematically equivalent, else 0.0.

    Both sides are bare answers (e.g. extracted from `\\boxed{}`); each is parsed as LaTeX, so
    "\\frac{1}{2}" equals "0.5", "\\dfrac12" equals "1/2", "x=3" equals "3" and
    "\\text{(A)}" equals "A". A prediction that cannot be math (nothing but spaces, punctuation
    or characters that are not text, e.g. a lone surrogate) is wrong, 0.0, without asking
    math-verify. The comparison runs in a worker process that is killed once it has used
    `timeout_s` seconds of CPU time (or, hung without using any, after a wall-clock backstop of
    at least a minute; see `_math_client`), so the limit holds in any thread and a busy machine
    does not turn answers into failures (math-verify's own signal-based timeouts are disabled).
    Errors inside math-verify's comparison count as "not equal" (its documented behaviour); an
    answer it cannot parse at all raises.

    Raises:
        ScoringError: If either answer cannot be parsed as math, or the worker fails.
        TimeoutError: If the comparison takes more than `timeout_s` of the worker's CPU time.
        ConfigError: If `timeout_s` is not a positive number.
        ModuleNotFoundError: If math-verify is not installed (the message gives the pip line).
    """
    if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < math.inf):
        raise ConfigError(f"math_equivalent: `timeout_s` must be a positive number of seconds, "
                          f"got {timeout_s!r}.")
    _require_gold(gold, "math_equivalent")
    if not _could_be_math(prediction):
        return 0.0
    return float(_math_client.equivalent(prediction, gold, float(timeout_s)))


# Choice labels: an optional lead-in ("Option", "The answer is"), then "B", "(B)", "B)", "B.",
# "B,", "[B]" or "B" followed by a space and more text. No two adjacent quantifiers overlap.
_CHOICE_LEAD = re.compile(
    r"(?:the\s+)?(?:correct\s+)?(?:answer|option|choice)\b(?:\s+is\b)?[\s:\uff1a]*", re.IGNORECASE
)
_CHOICE_LABEL = re.compile(r"[(\[]?([A-Za-z]|\d+)(?:[)\]]|[.:,]|(?=\s)|\Z)")
# A further option named in the text after the label: "(C)", "[C]", "option C", or a capital
# letter or a number standing alone ("B or C", "B. Actually C.", "2 or 3").
_LABEL_MENTION = re.compile(
    r"[(\[](\w{1,3})[)\]]"
    r"|(?i:\b(?:option|choice)\s+)([A-Za-z]|\d+)\b"
    r"|(?<![\w'.-])([A-Z]|\d+)(?![\w'-])"
)
# A standalone label names an option only after a break or a word that links alternatives,
# so "because of vitamin C" names nothing but "B or C" names C.
_LINK_WORDS = frozenset({"or", "and", "then", "but", "actually", "maybe", "perhaps", "possibly",
                         "probably", "also", "either", "vs", "versus", "instead", "rather"})
_WORD_AFTER = re.compile(r"\s+[a-z]")


def _loose(text: str) -> str:
    return " ".join(text.casefold().split())


# From strict to lenient: the first comparison under which some option matches decides.
_TEXT_KEYS: tuple[Callable[[str], str], ...] = (str.strip, _loose, normalize_answer)


def _options_with_text(text: str, options: Mapping[str, str]) -> set[str]:
    """The options whose text `text` is, by the strictest comparison that finds any: exact,
    then ignoring case and spacing, then SQuAD-normalised (which makes "3.6" and "36" alike;
    several options found there is an ambiguity, and the caller scores it wrong)."""
    for key in _TEXT_KEYS:
        wanted = key(text)
        found = {label for label, option in options.items() if wanted and key(option) == wanted}
        if found:
            return found
    return set()


def _starts_alternative(before: str) -> bool:
    words = before.split()
    return not words or words[-1][-1] in ".,;:/!?" or words[-1].casefold() in _LINK_WORDS


def _labels_named(text: str, by_key: Mapping[str, str]) -> set[str]:
    """Option labels that `text` names ("or C", "(C)", "option C"). "A" and "I" followed by a
    lowercase word are read as words ("A dog", "I think")."""
    named = set()
    for mention in _LABEL_MENTION.finditer(text):
        bracketed, after_word, alone = mention.groups()
        if alone is not None and (
                not _starts_alternative(text[max(0, mention.start() - 40):mention.start()])
                or alone in ("A", "I") and _WORD_AFTER.match(text, mention.end())):
            continue
        key = by_key.get((bracketed or after_word or alone).casefold())
        if key is not None:
            named.add(key)
    return named


def _designated(prediction: str, options: Mapping[str, str]) -> set[str]:
    """The option labels a prediction points to: a bare label first ("C" is label C even when
    an option's text is "c"), else its whole text, else its label plus any option that the
    text after the label names (by its text, or by another label)."""
    text = prediction.strip().strip("*").strip()
    lead = _CHOICE_LEAD.match(text)
    if lead is not None:
        text = text[lead.end():]
    label = _CHOICE_LABEL.match(text)
    by_key = {key.strip().casefold(): key for key in options}
    label_key = by_key.get(label.group(1).casefold()) if label is not None else None
    rest = text[label.end():].strip() if label is not None else text
    if label_key is not None and not rest:
        return {label_key}
    whole = _options_with_text(prediction, options) or _options_with_text(text, options)
    if whole:
        return whole
    if label_key is None:
        return set()
    return {label_key} | (_options_with_text(rest, options) or _labels_named(rest, by_key))


def choice_match(prediction: str, gold_label: str, options: Mapping[str, str]) -> float:
    """1.0 if the prediction designates exactly the gold option, by label or by option text.

    Accepted: a bare label (checked first, so "C" means label C even if some option's text is
    "c"); the option text alone, compared exactly first, then ignoring case and spacing, then
    normalised, so "3.6" and "36" stay distinct options; or the label in any case with common
    wrappers ("B", "b", "(B)", "B)", "B.", "Option B", "The answer is (B)"), possibly followed
    by text ("(B) Paris", "B because ..."). This is more lenient than an exact letter match, on
    purpose. A prediction that designates no option, or more than one ("B or C", "B. Actually
    C.", a label followed by another option's text, a text that two options normalise to), is
    wrong: 0.0.

    Raises:
        ScoringError: If `options` is empty or `gold_label` is not one of its labels.
    """
    if not options:
        raise ScoringError("choice_match: the options mapping is empty; the task must list them.")
    if gold_label not in options:
        raise ScoringError(f"choice_match: the gold label {gold_label!r} is not an option "
                           f"label ({sorted(options)}).")
    return float(_designated(prediction, options) == {gold_label})


def word_match(prediction: str, gold: str, candidates: Sequence[str]) -> float:
    """Children's Book Test: 1.0 if the prediction chooses the gold candidate word.

    The chosen word is the prediction itself when it normalises to a candidate; otherwise,
    if exactly one candidate occurs in the prediction as a whole word (or word sequence), that
    candidate ("I think it is the king" chooses "king"). Zero or several candidates: 0.0.

    Raises:
        ScoringError: If `candidates` is empty or `gold` is not among them.
    """
    if not candidates:
        raise ScoringError("word_match: the candidate list is empty.")
    gold_norm = normalize_answer(gold)
    cand_norms = {normalize_answer(c) for c in candidates} - {""}
    if gold_norm not in cand_norms:
        raise ScoringError(f"word_match: the gold word {gold!r} is not among the candidates "
                           f"{list(candidates)[:20]}.")
    pred_norm = normalize_answer(prediction)
    if pred_norm in cand_norms:
        return float(pred_norm == gold_norm)
    padded = f" {pred_norm} "
    found = [c for c in cand_norms if f" {c} " in padded]
    return float(found == [gold_norm])
