"""`hotpotqa-ia`: HotpotQA (distractor setting) as an information-asymmetric dialogue.

## Description
Two (or more) agents must answer a multi-hop question whose supporting paragraphs are split
between them, so neither can answer alone.

## Evidence split
Every context paragraph (title + sentences; `first_sentence_only=True` keeps only its first
sentence) is one piece of evidence; paragraphs named by the supporting facts are supporting.
`deal_supporting_alternately`: the supporting paragraphs go round-robin from a random first
agent (with two agents and two supporting paragraphs each holds one, none holds both), each
distractor goes to a random agent, and every agent's paragraphs are shuffled, so position
says nothing about relevance. All of it from the env's seeded RNG.

## Protocol and episode end
Every agent is a partner and may answer with `<A>answer</A>`. The dialogue ends when an answer
repeats the last answer given, messages without one skipped (`answer_repeats_last_answer`,
"agreed"; the reference Optima rule), or at `max_turns` (10 by default).

## Metric
Token F1 of the final answer against the gold answer (HotpotQA's official normalisation).

## Arguments
data_dir, data_files, split ("validation" (alias "dev") or "train"; default "validation"),
limit, seed, on_error, hub_id (see `optima_envs.data.common.DataConfig`), first_sentence_only.
Data: `optima_envs.data.hotpotqa` (original release JSON or hub rows; hub default
`hotpotqa/hotpot_qa`, config `distractor`).

## Version History
- v1: first release.
- v2: scoring agrees with the official scripts, and a dialogue ends when an answer repeats
  the last non-empty answer (the reference rule); see `optima_envs.envs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from optima_envs.core.task import Task
from optima_envs.core.termination import answer_repeats_last_answer
from optima_envs.core.types import TaskInstance
from optima_envs.data.common import DataConfig, OnError
from optima_envs.data.hotpotqa import HotpotQASource
from optima_envs.errors import ConfigError
from optima_envs.prompts.templates import InfoAsymmetricPrompts
from optima_envs.scoring import extract_tag, token_f1
from optima_envs.splits import deal_supporting_alternately


@dataclass(frozen=True)
class HotpotQAConfig(DataConfig):
    """`DataConfig` plus first_sentence_only (bool, defaults to False): keep only each
    paragraph's first sentence (shorter prompts; a supporting fact may be lost)."""

    split: str = "validation"
    first_sentence_only: bool = False

    DATASET: ClassVar[str] = "hotpotqa-ia"
    SPLITS: ClassVar[tuple[str, ...]] = ("train", "validation")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.first_sentence_only, bool):
            raise ConfigError(f"{self.DATASET}: first_sentence_only must be a bool, got {self.first_sentence_only!r}")


def score_f1(answer: str, instance: TaskInstance) -> float:
    return token_f1(answer, instance.gold)


def make_task(*, data_dir: str | None = None, data_files: str | list[str] | None = None, split: str = "validation",
              limit: int | None = None, seed: int = 0, on_error: OnError = "raise", hub_id: str | None = None,
              first_sentence_only: bool = False) -> Task:
    """Build the `hotpotqa-ia` task; the keyword arguments are the `HotpotQAConfig` fields."""
    config = HotpotQAConfig(data_dir=data_dir, data_files=data_files, split=split, limit=limit, seed=seed,
                            on_error=on_error, hub_id=hub_id, first_sentence_only=first_sentence_only)
    return multihop_paragraph_task("hotpotqa-ia", HotpotQASource(config, first_sentence_only=first_sentence_only))


def multihop_paragraph_task(name: str, source: Any) -> Task:
    """The multi-hop paragraph QA protocol shared by `hotpotqa-ia` and `2wikimqa-ia`: supporting
    paragraphs dealt alternately, partners, `<A>answer</A>`, token F1, ends on a repeated answer."""
    return Task(
        name=name,
        family="ia",
        source=source,
        split_evidence=deal_supporting_alternately,
        prompts=InfoAsymmetricPrompts(),
        extract=extract_tag,
        metric=score_f1,
        termination=answer_repeats_last_answer,
        answer_format="<A>answer</A>",
    )
