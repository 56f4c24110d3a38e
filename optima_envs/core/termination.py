"""Named stop conditions. Each returns the name recorded as `end_reason`, or None."""

from __future__ import annotations

from typing import Sequence

from optima_envs.core.types import Message
from optima_envs.scoring.normalize import normalize_answer


def _same_answer(a: str, b: str) -> bool:
    return normalize_answer(a) == normalize_answer(b)


def answer_repeats_previous_turn(history: Sequence[Message], message: Message) -> str | None:
    """Information-asymmetric QA: the dialogue ends when a message's answer equals the answer
    in the message right before it (the other agent confirms it). This is the reference rule."""
    if message.answer is None or not history:
        return None
    previous = history[-1].answer
    if previous is not None and _same_answer(previous, message.answer):
        return "agreed"
    return None


def answer_repeats_last_answer(history: Sequence[Message], message: Message) -> str | None:
    """Debate: only the solver answers, so the dialogue ends when the solver gives the same
    answer again after hearing the critic (the critic found nothing that changed it)."""
    if message.answer is None:
        return None
    for earlier in reversed(history):
        if earlier.answer is not None:
            return "agreed" if _same_answer(earlier.answer, message.answer) else None
    return None
