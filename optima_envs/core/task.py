"""A task is composed from parts, not subclassed: data source, evidence split, prompts,
answer extractor, metric and termination rule. The env runs any such composition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Protocol, Sequence

import numpy as np

from optima_envs.core.types import Evidence, Family, Message, TaskInstance
from optima_envs.scoring.extract import Extraction


class InstanceSource(Protocol):
    """Indexed access to task instances (a dataset split, or a seeded generator)."""

    def __len__(self) -> int: ...

    def get(self, index: int) -> TaskInstance: ...


EvidenceSplit = Callable[[TaskInstance, int, np.random.Generator], tuple[tuple[Evidence, ...], ...]]
"""Deals an instance's evidence to `num_agents` agents using only the given RNG.

Returns one tuple of evidence per agent, in agent order (already shuffled as the task wants).
"""

AnswerExtractor = Callable[[str], Extraction]
"""Pulls the final answer out of one message; `Extraction.answer` is None when there is none."""

Metric = Callable[[str, TaskInstance], float]
"""Scores an extracted answer against the instance in [0, 1]; raises ScoringError if it cannot."""

AnswerPattern = Callable[[TaskInstance], str]
"""A regular expression that a reply which is nothing but one readable answer move matches, for
this instance (e.g. `<A>[A-D]</A>` in a game with four labels). Policies that support
constrained decoding can sample answer moves from it, so exploration starts from moves the task
can read."""

TurnPattern = Callable[[TaskInstance, Sequence[str], Sequence[str]], str]
"""(instance, the speaker's rendered evidence, the partners' messages it has read) -> a regular
expression of one readable turn, e.g. some of its own facts copied verbatim, then optionally an
answer it has seen named. Where a task has one, constrained sampling uses it instead of
`AnswerPattern`: on a task whose answer needs a partner's facts, a turn that may only be an
answer cannot carry them."""

AnswerOptions = Callable[[TaskInstance], tuple[str, ...]]

AnswerPlace = Callable[[TaskInstance, Sequence[Sequence[Evidence]], int], str]
"""Where an instance's answer lies ("alone", "partner" or "named", `optima_envs.core.places`),
given every seat's evidence and the first seat that gives answers."""

SoloMetric = Callable[[str, TaskInstance, int], float]
"""Scores an answer that the agent in seat `seat` gave alone, from its own view (for a game whose
`metric` reads an answer as the first seat's)."""

InformativeCheck = Callable[[TaskInstance, Sequence[Sequence[Evidence]], Sequence[str]], bool]
"""(instance, evidence, the partners' messages) -> whether those messages carry the answer."""

SwapGroup = Callable[[TaskInstance], Hashable]
"""Which instances' messages can stand in for each other's in the swap ablation: those with the
same value (e.g. a game's item names, which its moves must spell out)."""

TerminationRule = Callable[[Sequence[Message], Message], "str | None"]
"""Given the earlier messages and the new one, returns the name of the rule that ends the
dialogue (recorded in infos as `end_reason`), or None to continue."""


@dataclass(frozen=True)
class DialogueOutcome:
    """A whole dialogue's result, for tasks whose score is not the last answer's alone (a game
    whose outcome depends on who proposed what, and who accepted).

    `answer` is what the dialogue settled on as text (None: nothing); `details` are extra
    task-specific infos (e.g. each agent's utility), added to the final infos beside `score`.
    """

    score: float
    answer: str | None
    details: Mapping[str, Any] = field(default_factory=dict)


DialogueScorer = Callable[[TaskInstance, Sequence[str], Sequence[Message]], DialogueOutcome]
"""Scores an ended dialogue from the instance, the agent names in seat order and every message
(with the answers the task's extractor read); raises ScoringError if it cannot."""


@dataclass(frozen=True)
class Role:
    """What an agent is asked to do. Only roles with `gives_answer` have their answers parsed."""

    name: str
    description: str
    gives_answer: bool = True


class PromptBuilder(Protocol):
    """Writes the roles and each agent's system prompt for a task."""

    def roles(self, num_agents: int) -> tuple[Role, ...]: ...

    def system_prompt(
        self,
        *,
        agent: str,
        agents: Sequence[str],
        role: Role,
        instance: TaskInstance,
        evidence: Sequence[Evidence],
        format_instruction: str | None,
    ) -> str: ...


@dataclass(frozen=True)
class Task:
    """Everything that makes one registered env id what it is."""

    name: str
    family: Family
    source: InstanceSource
    split_evidence: EvidenceSplit
    prompts: PromptBuilder
    extract: AnswerExtractor
    metric: Metric
    termination: TerminationRule
    answer_format: str
    max_turns: int = 10
    score_dialogue: DialogueScorer | None = None
    """None: the last answer given is scored with `metric`; set: the whole dialogue is scored
    with it (`metric` then scores one answer alone, e.g. for single-agent baselines)."""
    num_agents: int | None = None
    """A fixed number of agents (a game with one seat per role), or None for any number >= 2."""
    answer_pattern: AnswerPattern | None = None
    """The regex of a reply that is exactly one readable answer move (None: the task has none)."""
    turn_pattern: TurnPattern | None = None
    """The regex of one readable turn given the speaker's evidence and what it has read; constrained
    sampling prefers it to `answer_pattern` (None: constrained turns are answer moves)."""
    answer_options: AnswerOptions | None = None
    """Every readable answer move, as replies, where the set is closed and small (a game's picks);
    None: the answers are open. A search may expand an answering turn into all of them."""
    answer_place: AnswerPlace | None = None
    """Where an instance's answer lies (`optima_envs.core.places`); None: read off the gold text
    on information-asymmetric tasks, no split on the others."""
    solo_metric: SoloMetric | None = None
    """Scores one seat's answer given alone (the no-talk baseline); None: `metric`, whatever the seat."""
    informative: InformativeCheck | None = None
    """Whether the partners' messages carry what the answering seat lacks
    (`optima_envs.core.places.partners_informed`); None: the gold text written by a partner, on
    information-asymmetric tasks; no check on the others."""
    swap_group: SwapGroup | None = None
    """The swap ablation's donor for an instance is another instance of the same group, so a
    swapped message changes what it says, not whether the listener can read it (a move naming
    items this game does not have is unreadable, whatever it says); None: any other instance."""


def instance_gold_for_info(instance: TaskInstance) -> Any:
    """The gold answer as plain Python data (lists become tuples so infos compare exactly)."""
    gold = instance.gold
    if isinstance(gold, list):
        return tuple(gold)
    return gold
