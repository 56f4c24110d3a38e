"""Metrics: compare one extracted answer with the gold answer and return a score in [0, 1].

Every metric is a pure function. A wrong or badly formatted prediction scores 0.0; an answer
that cannot be scored at all (an empty or number-less gold, a gold outside the options, LaTeX
math-verify cannot read) raises `ScoringError`, so the failure is recorded, never scored 0.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from optima_envs.errors import ConfigError, ScoringError
from optima_envs.scoring import _math_client
from optima_envs.scoring.normalize import normalize_answer, parse_bare_number, parse_number

__all__ = [
    "choice_match",
    "exact_match",
    "math_equivalent",
    "max_over_aliases",
    "numeric_match",
    "token_f1",
    "word_match",
]

REL_TOL = 1e-6
_YES_NO = frozenset({"yes", "no", "noanswer"})


def _require_gold(gold: str, metric: str) -> None:
    if not gold.strip():
        raise ScoringError(f"{metric}: the gold answer is empty ({gold!r}); fix the dataset row.")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL)


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
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str) -> float:
    """1.0 if the normalised answers are equal, or both are plain numbers with equal values.

    Numbers compare by value within a relative tolerance of 1e-6, so "$29.00" matches "29",
    "1,000" matches "1000" and "\\frac{1}{2}" matches "0.5"; a number inside a sentence
    ("Route 66") is not a plain number and compares as text.

    Raises:
        ScoringError: If `gold` is empty or whitespace.
    """
    _require_gold(gold, "exact_match")
    if normalize_answer(prediction) == normalize_answer(gold):
        return 1.0
    pred_value, gold_value = parse_bare_number(prediction), parse_bare_number(gold)
    if pred_value is None or gold_value is None:
        return 0.0
    return float(_close(pred_value, gold_value))


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


def numeric_match(prediction: str, gold: str) -> float:
    """1.0 if the first numbers of both answers are equal within a relative tolerance of 1e-6.

    A prediction without a number is a wrong answer (0.0). See `parse_number` for the formats.

    Raises:
        ScoringError: If `gold` has no number.
    """
    gold_value = parse_number(gold)
    if gold_value is None:
        raise ScoringError(f"numeric_match: the gold answer {gold[:80]!r} has no number.")
    pred_value = parse_number(prediction)
    return 0.0 if pred_value is None else float(_close(pred_value, gold_value))


def math_equivalent(prediction: str, gold: str, timeout_s: float = 5.0) -> float:
    """1.0 if math-verify finds the answers mathematically equivalent, else 0.0.

    Both sides are bare answers (e.g. extracted from `\\boxed{}`); each is parsed as LaTeX, so
    "\\frac{1}{2}" equals "0.5", "\\dfrac12" equals "1/2", "x=3" equals "3" and
    "\\text{(A)}" equals "A". The comparison runs in a worker process that is killed after
    `timeout_s` seconds, so the limit holds in any thread (math-verify's own signal-based
    timeouts are disabled). Errors inside math-verify's comparison count as "not equal"
    (its documented behaviour); an answer it cannot parse at all raises.

    Raises:
        ScoringError: If either answer cannot be parsed as math, or the worker fails.
        TimeoutError: If the comparison takes longer than `timeout_s`.
        ConfigError: If `timeout_s` is not a positive number.
        ModuleNotFoundError: If math-verify is not installed (the message gives the pip line).
    """
    if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < math.inf):
        raise ConfigError(f"math_equivalent: `timeout_s` must be a positive number of seconds, "
                          f"got {timeout_s!r}.")
    _require_gold(gold, "math_equivalent")
    if not prediction.strip():
        return 0.0
    return float(_math_client.equivalent(prediction, gold, float(timeout_s)))


# Choice labels: an optional lead-in ("Option", "The answer is"), then "B", "(B)", "B)", "B.",
# "[B]" or "B" followed by a space and more text. No two adjacent quantifiers overlap.
_CHOICE_LEAD = re.compile(
    r"(?:the\s+)?(?:correct\s+)?(?:answer|option|choice)\b(?:\s+is\b)?[\s:\uff1a]*", re.IGNORECASE
)
_CHOICE_LABEL = re.compile(r"[(\[]?([A-Za-z]|\d+)(?:[)\]]|[.:]|(?=\s)|\Z)")


def _designated(prediction: str, options: Mapping[str, str]) -> set[str]:
    """The option labels a prediction points to: a bare label first ("C" is label C even when
    an option's text is "c"), else its whole text, else its label plus any option whose text
    follows the label."""
    by_text: dict[str, set[str]] = {}
    for key, text in options.items():
        by_text.setdefault(normalize_answer(text), set()).add(key)
    by_text.pop("", None)
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
    whole = normalize_answer(prediction)
    if whole in by_text:
        return by_text[whole]
    if label_key is None:
        return set()
    return {label_key} | by_text.get(normalize_answer(rest), set())


def choice_match(prediction: str, gold_label: str, options: Mapping[str, str]) -> float:
    """1.0 if the prediction designates exactly the gold option, by label or by option text.

    Accepted: a bare label (checked first, so "C" means label C even if some option's text is
    "c"), the option text alone (normalised match), or the label in any case with common wrappers ("B", "b", "(B)", "B)", "B.", "Option B", "The answer is (B)"),
    possibly followed by text ("(B) Paris"). A prediction that designates no option, or more
    than one (a label followed by another option's text), is wrong: 0.0.

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
