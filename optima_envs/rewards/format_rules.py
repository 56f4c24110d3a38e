"""Format-violation rules: pure functions over a dialogue, each an explicit, documented rule.

A dialogue is a sequence of `Utterance`s (speaker, text). Each rule marks utterances that
violate it; the penalty the reward applies is the share of utterances with at least one
violation (`FormatReport.rate`), so the term is in [0, 1] whatever the dialogue's length.

Rules (names are what `Violation.rule` and the reward components record):

- ``speaks_for_other``: the utterance contains a line that starts with another agent's name
  followed by a colon ("Bob: ...", "**Bob:** ...", "- bob: ..."), i.e. the speaker writes the
  other agent's turn itself. Its own name as a label ("Alice: ...") is not a violation: it costs
  tokens, which the token term already charges, but does not put words in a partner's mouth.
- ``empty``: the utterance is empty or whitespace only. A dialogue with no utterances at all
  counts as one violation (rate 1.0).
- ``repeat``: the utterance repeats an earlier utterance of the dialogue (by anyone): equal after
  normalisation, or a near-duplicate with `rapidfuzz.fuzz.ratio >= repeat_ratio` (default 90).
  Normalisation lower-cases, turns punctuation and whitespace into single spaces, removes answer markup (`<A>...</A>`,
  `\\boxed{...}`), and utterances whose normalised text is shorter than `repeat_min_chars`
  (default 12) are exempt, so agreeing on an answer ("<A>Paris</A>" after "<A>Paris</A>", which is
  how a dialogue is meant to end) is never a repeat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol, Sequence

from rapidfuzz import fuzz

__all__ = [
    "FORMAT_RULES",
    "FormatReport",
    "FormatRule",
    "Utterance",
    "Violation",
    "check_format",
    "empty_violations",
    "normalize_for_repeat",
    "repeat_violations",
    "speaks_for_other_violations",
]

FormatRule = Literal["speaks_for_other", "empty", "repeat"]
FORMAT_RULES: tuple[FormatRule, ...] = ("speaks_for_other", "empty", "repeat")


class Utterance(Protocol):
    """What the rules read from one turn (the env's `Message` and plain dicts adapted to it)."""

    speaker: str
    text: str


@dataclass(frozen=True)
class Violation:
    """One broken rule: which turn (0-based index in the dialogue), which rule, and why."""

    turn: int
    rule: FormatRule
    detail: str


@dataclass(frozen=True)
class FormatReport:
    """All violations of a dialogue.

    `rate` is the share of utterances with at least one violation (1.0 for an empty
    dialogue); `counts` is the number of violations per rule.
    """

    violations: tuple[Violation, ...]
    num_utterances: int

    @property
    def violating_turns(self) -> frozenset[int]:
        return frozenset(v.turn for v in self.violations if v.turn >= 0)

    @property
    def rate(self) -> float:
        if self.num_utterances == 0:
            return 1.0
        return len(self.violating_turns) / self.num_utterances

    @property
    def counts(self) -> dict[str, int]:
        counts = {rule: 0 for rule in FORMAT_RULES}
        for v in self.violations:
            counts[v.rule] += 1
        return counts


@lru_cache(maxsize=256)
def _name_prefix_regex(name: str) -> re.Pattern[str]:
    # Start of a line, optional list/quote/heading markup, optional bold/italic, the name, a colon.
    return re.compile(
        rf"^[ \t>#*_\-]*(?:\*\*|__|\*|_)?{re.escape(name)}(?:\*\*|__|\*|_)?[ \t]*(?:\*\*|__)?:",
        re.IGNORECASE | re.MULTILINE,
    )


def speaks_for_other_violations(utterances: Sequence[Utterance], agents: Sequence[str]) -> list[Violation]:
    """Turns that contain a line starting with another agent's name and a colon."""
    out = []
    for turn, u in enumerate(utterances):
        for other in agents:
            if other.lower() == u.speaker.lower():
                continue
            match = _name_prefix_regex(other).search(u.text)
            if match:
                out.append(Violation(turn, "speaks_for_other", f"writes a line as {other!r}: {match.group(0).strip()!r}"))
                break
    return out


def empty_violations(utterances: Sequence[Utterance]) -> list[Violation]:
    """Turns whose text is empty or whitespace only; an empty dialogue is one violation (turn -1)."""
    if not utterances:
        return [Violation(-1, "empty", "the dialogue has no utterances")]
    return [Violation(turn, "empty", "empty utterance") for turn, u in enumerate(utterances) if not u.text.strip()]


_ANSWER_MARKUP = re.compile(r"<a>.*?</a>|\\boxed\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", re.IGNORECASE | re.DOTALL)
_PUNCT_OR_SPACE = re.compile(r"[^\w]+")


def normalize_for_repeat(text: str) -> str:
    """Lower-case, drop answer markup, turn punctuation and whitespace runs into one space."""
    return _PUNCT_OR_SPACE.sub(" ", _ANSWER_MARKUP.sub(" ", text.lower())).strip()


def repeat_violations(utterances: Sequence[Utterance], *, ratio: float = 90.0, min_chars: int = 12) -> list[Violation]:
    """Turns that repeat an earlier turn exactly or nearly (see the module docstring)."""
    out = []
    seen: list[tuple[int, str]] = []
    for turn, u in enumerate(utterances):
        norm = normalize_for_repeat(u.text)
        if len(norm) >= min_chars:
            for earlier, prev in seen:
                if norm == prev:
                    out.append(Violation(turn, "repeat", f"repeats turn {earlier} exactly"))
                    break
                similarity = fuzz.ratio(norm, prev)
                if similarity >= ratio:
                    out.append(Violation(turn, "repeat", f"near-duplicate of turn {earlier} (ratio {similarity:.0f})"))
                    break
            seen.append((turn, norm))
    return out


def check_format(utterances: Sequence[Utterance], agents: Sequence[str], *, repeat_ratio: float = 90.0,
                 repeat_min_chars: int = 12) -> FormatReport:
    """Run every rule on a dialogue.

    Args:
        utterances: the dialogue's turns in order (objects with `speaker` and `text`).
        agents: the names of all agents in the dialogue (any case).
        repeat_ratio: rapidfuzz ratio (0-100) at or above which two turns are near-duplicates.
        repeat_min_chars: normalised turns shorter than this are exempt from the repeat rule.

    Returns:
        A `FormatReport` with the violations sorted by turn, then rule order.
    """
    violations = (
        speaks_for_other_violations(utterances, agents)
        + empty_violations(utterances)
        + repeat_violations(utterances, ratio=repeat_ratio, min_chars=repeat_min_chars)
    )
    violations.sort(key=lambda v: (v.turn, FORMAT_RULES.index(v.rule)))
    return FormatReport(tuple(violations), len(utterances))
