"""Plain data records shared by tasks, envs and buffers.

They are frozen so an env state (and so a snapshot) can share them without copying.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

Family = Literal["ia", "debate", "game"]


@dataclass(frozen=True)
class Evidence:
    """One piece of private context (a paragraph, a fact, a sentence)."""

    text: str
    title: str | None = None
    supporting: bool = False

    def render(self) -> str:
        return f"{self.title}: {self.text}" if self.title else self.text


@dataclass(frozen=True)
class TaskInstance:
    """One question of a task, before the evidence is dealt to agents.

    `gold` is what the task's metric compares against: a string, a tuple of aliases,
    a number or a choice label, depending on the task.
    """

    instance_id: str
    question: str
    gold: Any
    evidence: tuple[Evidence, ...] = ()
    choices: tuple[tuple[str, str], ...] = ()  # (label, text) pairs for multiple choice
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def gold_text(self) -> str:
        """The gold answer as one display string (the first alias for alias lists)."""
        if isinstance(self.gold, (tuple, list)):
            return str(self.gold[0]) if self.gold else ""
        return str(self.gold)


@dataclass(frozen=True)
class Message:
    """One utterance of the dialogue, as the env recorded it (`truncated`: cut at the env's length
    limit; `repaired`: text UTF-8 cannot encode was replaced, see `optima_envs.core.text`)."""

    turn: int
    speaker: str
    text: str
    token_ids: tuple[int, ...] | None
    num_tokens: int
    answer: str | None
    truncated: bool = False
    repaired: bool = False

    def as_observation(self) -> dict[str, Any]:
        return {"speaker": self.speaker, "text": self.text}
