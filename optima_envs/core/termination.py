"""Named stop conditions. Each returns the name recorded as `end_reason`, or None.

A message's answer is `None` when it gave none; an empty `<A></A>` or `\\boxed{}` is no answer
(extraction returns `None`), so it never ends a dialogue and never resets one.
"""

from __future__ import annotations

from typing import Sequence

from optima_envs.core.types import Message
from optima_envs.scoring.normalize import normalize_answer


def _same_answer(a: str, b: str) -> bool:
    return normalize_answer(a) == normalize_answer(b)


def answer_repeats_last_answer(history: Sequence[Message], message: Message) -> str | None:
    """The reference Optima rule, used by every task: the dialogue ends when a message's answer
    equals the last answer given before it, skipping messages without one.

    So A: "<A>x</A>", B: "no answer here", A: "<A>x</A>" ends, and so does a debate whose
    solver repeats its answer after the critique (critics' answers are not parsed, so they
    are skipped too). Unlike the reference, which compares the raw strings, answers compare
    normalised ("Paris" repeats "paris.").
    """
    if message.answer is None:
        return None
    for earlier in reversed(history):
        if earlier.answer is not None:
            return "agreed" if _same_answer(earlier.answer, message.answer) else None
    return None


def answer_repeats_previous_turn(history: Sequence[Message], message: Message) -> str | None:
    """A stricter option for custom tasks: the dialogue ends only when a message's answer
    equals the answer in the message right before it (the next speaker confirms it at once);
    a message without an answer in between breaks the agreement."""
    if message.answer is None or not history:
        return None
    previous = history[-1].answer
    if previous is not None and _same_answer(previous, message.answer):
        return "agreed"
    return None
