"""`arc-debate`: ARC-Challenge science questions (4-5 options), solved in a solver + critic
debate.

## Description
The first agent solves; the others critique without giving the answer (`DebatePrompts`,
`no_evidence`). The options are listed in every prompt as `(A) text` (`TaskInstance.choices`;
digit labels of the original data are mapped to letters).

## Protocol and episode end
The solver answers `<A>letter</A>`; only its answers are parsed. The dialogue ends when the
solver repeats its last answer after the critique (`answer_repeats_last_answer`) or at
`max_turns`.

## Metric
Exact match on the option (`choice_match`: the letter in common wrappers such as "B", "(B)",
"Option B", or the option's text).

## Arguments
data_dir, data_files, split ("test" (default), "validation" (alias "dev") or "train"), limit,
seed, on_error, hub_id (default `allenai/ai2_arc`, config `ARC-Challenge`). Data:
`optima_envs.data.arc`.

## Version History
- v1: first release.
- v2: scoring agrees with the official scripts, and a dialogue ends when an answer repeats
  the last non-empty answer (the reference rule); see `optima_envs.envs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from optima_envs.core.task import Task
from optima_envs.core.termination import answer_repeats_last_answer
from optima_envs.core.types import TaskInstance
from optima_envs.data.arc import ARCSource
from optima_envs.data.common import DataConfig, OnError
from optima_envs.prompts.templates import DebatePrompts
from optima_envs.scoring import choice_match, extract_tag
from optima_envs.splits import no_evidence

CHOICE_PROMPTS = DebatePrompts(
    answer_instruction="Give the final answer as the letter of the correct option, e.g. <A>B</A>.")


@dataclass(frozen=True)
class ARCConfig(DataConfig):
    split: str = "test"

    DATASET: ClassVar[str] = "arc-debate"


def score_choice(answer: str, instance: TaskInstance) -> float:
    return choice_match(answer, instance.gold, dict(instance.choices))


def make_task(*, data_dir: str | None = None, data_files: str | list[str] | None = None, split: str = "test",
              limit: int | None = None, seed: int = 0, on_error: OnError = "raise", hub_id: str | None = None) -> Task:
    """Build the `arc-debate` task; the keyword arguments are the `ARCConfig` fields."""
    config = ARCConfig(data_dir=data_dir, data_files=data_files, split=split, limit=limit, seed=seed,
                       on_error=on_error, hub_id=hub_id)
    return Task(
        name="arc-debate",
        family="debate",
        source=ARCSource(config),
        split_evidence=no_evidence,
        prompts=CHOICE_PROMPTS,
        extract=extract_tag,
        metric=score_choice,
        termination=answer_repeats_last_answer,
        answer_format="<A>letter</A>",
    )
