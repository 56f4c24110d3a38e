"""`math-debate`: MATH competition problems (Hendrycks et al.), solved in a solver + critic
debate.

## Description
The first agent solves; the others critique without giving the answer (`DebatePrompts`,
`no_evidence`). `subset="math500"` uses the MATH-500 problems.

## Protocol and episode end
The solver gives its final answer in `\\boxed{...}` (`extract_boxed`: the last balanced box);
only its answers are parsed. The dialogue ends when the solver repeats its last answer after
the critique (`answer_repeats_last_answer`) or at `max_turns`.

## Metric
Symbolic equivalence with the gold answer (`math_equivalent`, math-verify in a worker process
with a hard timeout; an answer it cannot parse is recorded as a scoring failure, not a 0).

## Arguments
data_dir, data_files, split ("test" (default) or "train"; math500 is test only), limit, seed,
on_error, hub_id (default `EleutherAI/hendrycks_math`, or `HuggingFaceH4/MATH-500`), subset
("full" or "math500"). Data: `optima_envs.data.hendrycks_math`.

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
from optima_envs.data.hendrycks_math import MATHSource, Subset
from optima_envs.errors import ConfigError
from optima_envs.prompts.templates import DebatePrompts
from optima_envs.scoring import extract_boxed, math_equivalent
from optima_envs.splits import no_evidence


@dataclass(frozen=True)
class MATHConfig(DataConfig):
    """`DataConfig` plus subset ("full" or "math500")."""

    split: str = "test"
    subset: Subset = "full"

    DATASET: ClassVar[str] = "math-debate"
    SPLITS: ClassVar[tuple[str, ...]] = ("train", "test")
    SPLIT_ALIASES: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.subset not in ("full", "math500"):
            raise ConfigError(f"{self.DATASET}: subset must be 'full' or 'math500', got {self.subset!r}")
        if self.subset == "math500" and self.split != "test":
            raise ConfigError(f"{self.DATASET}: MATH-500 has only a test split, got split={self.split!r}")


def score_math(answer: str, instance: TaskInstance) -> float:
    return math_equivalent(answer, instance.gold)


def make_task(*, data_dir: str | None = None, data_files: str | list[str] | None = None, split: str = "test",
              limit: int | None = None, seed: int = 0, on_error: OnError = "raise", hub_id: str | None = None,
              subset: Subset = "full") -> Task:
    """Build the `math-debate` task; the keyword arguments are the `MATHConfig` fields."""
    config = MATHConfig(data_dir=data_dir, data_files=data_files, split=split, limit=limit, seed=seed,
                        on_error=on_error, hub_id=hub_id, subset=subset)
    return Task(
        name="math-debate",
        family="debate",
        source=MATHSource(config, subset=config.subset),
        split_evidence=no_evidence,
        prompts=DebatePrompts(answer_instruction="Give the final answer in \\boxed{...}, fully simplified."),
        extract=extract_boxed,
        metric=score_math,
        termination=answer_repeats_last_answer,
        answer_format="\\boxed{answer}",
    )
