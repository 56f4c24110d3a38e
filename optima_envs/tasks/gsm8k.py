"""`gsm8k-debate`: GSM8K grade-school math word problems, solved in a solver + critic debate.

## Description
The first agent (Alice) solves; the others critique without giving the answer
(`DebatePrompts`; N agents allowed: one solver, N-1 critics). Nobody holds private evidence
(`no_evidence`).

## Protocol and episode end
The solver gives its final answer as `\\boxed{number}`; only its answers are parsed. The
dialogue ends when the solver repeats its last answer after the critique
(`answer_repeats_last_answer`, "agreed") or at `max_turns`.

## Metric
Numeric exact match of the boxed answer against the number after `####` (`numeric_match`: an
equation is read by its result, "5 + 3 = 18" is 18; numbers compare by value, "$1,000.00"
matches "1000", integers exactly).

## Arguments
data_dir, data_files, split ("test" (default) or "train"), limit, seed, on_error, hub_id
(default `openai/gsm8k`, config `main`). Data: `optima_envs.data.gsm8k`.

## Version History
- v1: first release.
- v2: scoring agrees with the official scripts, and a dialogue ends when an answer repeats
  the last non-empty answer (the reference rule); see `optima_envs.envs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from optima_envs.core.task import Task
from optima_envs.core.termination import answer_repeats_last_answer
from optima_envs.core.types import TaskInstance
from optima_envs.data.common import DataConfig, OnError
from optima_envs.data.gsm8k import GSM8KSource
from optima_envs.prompts.templates import DebatePrompts
from optima_envs.scoring import extract_boxed, numeric_match
from optima_envs.splits import no_evidence


@dataclass(frozen=True)
class GSM8KConfig(DataConfig):
    split: str = "test"

    DATASET: ClassVar[str] = "gsm8k-debate"
    SPLITS: ClassVar[tuple[str, ...]] = ("train", "test")
    SPLIT_ALIASES: ClassVar[Mapping[str, str]] = {}


def score_numeric(answer: str, instance: TaskInstance) -> float:
    return numeric_match(answer, instance.gold)


def make_task(*, data_dir: str | None = None, data_files: str | list[str] | None = None, split: str = "test",
              limit: int | None = None, seed: int = 0, on_error: OnError = "raise", hub_id: str | None = None) -> Task:
    """Build the `gsm8k-debate` task; the keyword arguments are the `GSM8KConfig` fields."""
    config = GSM8KConfig(data_dir=data_dir, data_files=data_files, split=split, limit=limit, seed=seed,
                         on_error=on_error, hub_id=hub_id)
    return Task(
        name="gsm8k-debate",
        family="debate",
        source=GSM8KSource(config),
        split_evidence=no_evidence,
        prompts=DebatePrompts(answer_instruction="Give the final answer as \\boxed{number}."),
        extract=extract_boxed,
        metric=score_numeric,
        termination=answer_repeats_last_answer,
        answer_format="\\boxed{number}",
    )
