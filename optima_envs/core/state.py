"""The env's whole state as one immutable value, so a snapshot is a reference, not a copy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from optima_envs.core.ablation import Ablation
from optima_envs.core.task import Role
from optima_envs.core.types import Evidence, Message, TaskInstance


@dataclass(frozen=True)
class DialogueState:
    instance: TaskInstance
    roles: tuple[Role, ...]
    evidence: tuple[tuple[Evidence, ...], ...]
    system_prompts: tuple[str, ...]
    format_instruction: str | None
    messages: tuple[Message, ...] = ()
    agent_tokens: tuple[int, ...] = ()
    end_reason: str | None = None
    outcome: Mapping[str, Any] = field(default_factory=dict)
    ablation: Ablation | None = None
    """How the agents' views of each other's messages are altered (None: they are not)."""
    plain_system_prompts: tuple[str, ...] | None = None
    """Each agent's system prompt as written without the format instruction, kept when one was
    added (None: none was, so `system_prompts` are already plain). Training on a dialogue sampled
    with a format instruction uses these, so the model learns the format without being told."""

    @property
    def turn(self) -> int:
        return len(self.messages)

    @property
    def ended(self) -> bool:
        return self.end_reason is not None

    @property
    def total_tokens(self) -> int:
        return sum(self.agent_tokens)


@dataclass(frozen=True)
class EnvSnapshot:
    """What `DialogueEnv.snapshot()` returns; pass it to `restore()` of an env of the same task."""

    task_name: str
    agents: tuple[str, ...]
    max_turns: int
    state: DialogueState | None
    rng_state: Mapping[str, Any]
