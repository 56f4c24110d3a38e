"""Our own short prompts for the two task families.

A prompt builder is data: role descriptions and a template per family. A task picks a builder
and, where it needs to, overrides the answer-format sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from optima_envs.core.task import Role
from optima_envs.core.types import Evidence, TaskInstance

IA_ROLE = Role("partner", "You and your partners each hold different facts; nobody can answer alone.")
SOLVER_ROLE = Role("solver", "You solve the problem step by step and give the final answer.")
CRITIC_ROLE = Role(
    "critic",
    "You check the solver's reasoning and point out any error. Do not give the final answer yourself.",
    gives_answer=False,
)


@dataclass(frozen=True)
class InfoAsymmetricPrompts:
    """Every agent is a partner with private evidence; any of them may answer."""

    answer_instruction: str = "When you and your partner agree, give the final answer as <A>answer</A>."
    evidence_label: str = "What you know"

    def roles(self, num_agents: int) -> tuple[Role, ...]:
        return (IA_ROLE,) * num_agents

    def system_prompt(self, *, agent: str, agents: Sequence[str], role: Role, instance: TaskInstance,
                      evidence: Sequence[Evidence], format_instruction: str | None) -> str:
        others = ", ".join(a.capitalize() for a in agents if a != agent)
        lines = [f"You are {agent.capitalize()}, talking with {others} to answer a question. {role.description}",
                 f"Question: {instance.question}"]
        if instance.choices:
            lines.append("Candidates: " + ", ".join(text for _, text in instance.choices))
        lines.append(f"{self.evidence_label}:")
        lines.extend(f"- {piece.render()}" for piece in evidence)
        if not evidence:
            lines.append("- (nothing)")
        lines.append(self.answer_instruction)
        if format_instruction:
            lines.append(format_instruction)
        return "\n".join(lines)


@dataclass(frozen=True)
class DebatePrompts:
    """The first agent solves; the others critique without answering."""

    answer_instruction: str = "Give the final answer as <A>answer</A>."

    def roles(self, num_agents: int) -> tuple[Role, ...]:
        return (SOLVER_ROLE,) + (CRITIC_ROLE,) * (num_agents - 1)

    def system_prompt(self, *, agent: str, agents: Sequence[str], role: Role, instance: TaskInstance,
                      evidence: Sequence[Evidence], format_instruction: str | None) -> str:
        others = ", ".join(a.capitalize() for a in agents if a != agent)
        lines = [f"You are {agent.capitalize()}, the {role.name}, working with {others}. {role.description}",
                 f"Problem: {instance.question}"]
        if instance.choices:
            lines.extend(f"({label}) {text}" for label, text in instance.choices)
        if evidence:
            lines.extend(f"- {piece.render()}" for piece in evidence)
        if role.gives_answer:
            lines.append(self.answer_instruction + " Repeat it unchanged if the critique finds no error.")
        else:
            lines.append("Say briefly whether the latest solution is right; if not, say where it goes wrong.")
        if format_instruction:
            lines.append(format_instruction)
        return "\n".join(lines)
