"""Regular expressions of readable turns, for constrained sampling on information-asymmetric tasks.

A small model that never states its facts or a tagged answer gives iSFT nothing to select where
the answer needs both agents' facts. Sampled under such a pattern, each turn is some of the
speaker's own facts, copied verbatim, then optionally one answer from a closed set of names: the
model still chooses which facts to share and which answer to give, but every turn is one the
task can read. The patterns use only literals, alternation, groups and `?`, the subset every
structured-output backend reads.
"""

from __future__ import annotations

import re
from typing import Sequence

__all__ = ["escape", "facts_then_answer", "capitalised_names"]

_SPECIAL = re.compile(r"([\\.^$*+?()\[\]{}|])")
_NAME = re.compile(r"\b[A-Z][a-z]+\b")


def escape(text: str) -> str:
    """`text` as a regex literal: metacharacters escaped, spaces left as they are."""
    return _SPECIAL.sub(r"\\\1", text)


def facts_then_answer(evidence: Sequence[str], answers: Sequence[str]) -> str:
    """One turn: 1 to len(evidence) of the speaker's facts, each copied verbatim and separated by a
    space (a fact may repeat, which the pattern does not forbid), optionally followed by
    `<A>answer</A>` with an answer from `answers`; or that answer alone.

    Raises:
        ValueError: neither facts nor answers (no turn could match).
    """
    facts = [escape(f) for f in dict.fromkeys(e.strip() for e in evidence) if f]
    names = [escape(a) for a in dict.fromkeys(a.strip() for a in answers) if a]
    if not facts and not names:
        raise ValueError("a turn pattern needs at least one fact or one answer")
    answer = f"<A>({'|'.join(names)})</A>" if names else None
    if not facts:
        return answer  # type: ignore[return-value]
    fact = f"({'|'.join(facts)})"
    shared = fact
    for _ in range(len(facts) - 1):
        shared = f"{fact}( {shared})?"
    if answer is None:
        return shared
    return f"({shared}( {answer})?|{answer})"


def capitalised_names(texts: Sequence[str]) -> tuple[str, ...]:
    """Every capitalised word in `texts`, in first-seen order: the entity names of a task whose
    names are single capitalised words (the invented world of `synth-hop-ia`)."""
    return tuple(dict.fromkeys(m.group(0) for text in texts for m in _NAME.finditer(text)))
