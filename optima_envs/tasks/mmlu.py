"""`mmlu-debate`: MMLU (57 subjects, 4 options), solved in a solver + critic debate.

## Description
The first agent solves; the others critique without giving the answer (`DebatePrompts`,
`no_evidence`). The options A-D are listed in every prompt (`TaskInstance.choices`); the
subject is in `instance.meta["subject"]`.

## Protocol and episode end
The solver answers `<A>letter</A>`; only its answers are parsed. The dialogue ends when the
solver repeats its last answer after the critique (`answer_repeats_last_answer`) or at
`max_turns`.

## Metric
Exact match on the option (`choice_match`: the letter, or the option's text).

## Arguments
data_dir (the release's data/ folder with test/, val/, dev/), data_files (CSV files named
`<subject>_<split>.csv`, or hub rows), split ("test" (default), "validation" (alias "val") or
"dev" (the 5 few-shot examples per subject)), limit, seed, on_error, hub_id (default
`cais/mmlu`, config `all`), subjects (a subject or list of subjects; default all 57). Data:
`optima_envs.data.mmlu`.

## Version History
- v1: first release.
- v2: scoring agrees with the official scripts, and a dialogue ends when an answer repeats
  the last non-empty answer (the reference rule); see `optima_envs.envs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping, Sequence

from optima_envs.core.task import Task
from optima_envs.core.termination import answer_repeats_last_answer
from optima_envs.data.common import DataConfig, OnError
from optima_envs.data.mmlu import MMLUSource, check_subjects
from optima_envs.scoring import extract_tag
from optima_envs.splits import no_evidence
from optima_envs.tasks.arc import CHOICE_PROMPTS, score_choice


@dataclass(frozen=True)
class MMLUConfig(DataConfig):
    """`DataConfig` plus subjects (a subject name or a list of them; None for all 57)."""

    split: str = "test"
    subjects: tuple[str, ...] | None = None

    DATASET: ClassVar[str] = "mmlu-debate"
    SPLITS: ClassVar[tuple[str, ...]] = ("test", "validation", "dev")
    SPLIT_ALIASES: ClassVar[Mapping[str, str]] = {"val": "validation", "valid": "validation"}

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "subjects", check_subjects(self.subjects, self.DATASET))


def make_task(*, data_dir: str | None = None, data_files: str | list[str] | None = None, split: str = "test",
              limit: int | None = None, seed: int = 0, on_error: OnError = "raise", hub_id: str | None = None,
              subjects: str | Sequence[str] | None = None) -> Task:
    """Build the `mmlu-debate` task; the keyword arguments are the `MMLUConfig` fields."""
    config = MMLUConfig(data_dir=data_dir, data_files=data_files, split=split, limit=limit, seed=seed,
                        on_error=on_error, hub_id=hub_id, subjects=subjects)
    return Task(
        name="mmlu-debate",
        family="debate",
        source=MMLUSource(config, subjects=config.subjects),
        split_evidence=no_evidence,
        prompts=CHOICE_PROMPTS,
        extract=extract_tag,
        metric=score_choice,
        termination=answer_repeats_last_answer,
        answer_format="<A>letter</A>",
    )
