"""`2wikimqa-ia`: 2WikiMultiHopQA as an information-asymmetric dialogue.

## Description
As `hotpotqa-ia`, on 2WikiMultiHopQA's compositional, comparison, inference and bridge
questions over Wikipedia paragraphs and Wikidata evidence.

## Evidence split
Paragraphs named by the supporting facts are supporting; `deal_supporting_alternately` (each
agent at least one supporting paragraph when there are enough, none holds all; distractors to
random agents; every agent's pile shuffled). `first_sentence_only=True` keeps only each
paragraph's first sentence.

## Protocol and episode end
Partners; `<A>answer</A>`; ends when an answer repeats the last answer given
(`answer_repeats_last_answer`) or at `max_turns`.

## Metric
Token F1 against the gold answer.

## Arguments
data_dir, data_files, split ("validation" (alias "dev"), "train" or "test"; default
"validation"), limit, seed, on_error, hub_id, first_sentence_only. Data:
`optima_envs.data.twowikimqa` (original release JSON or hub rows; hub default
`ohjoonhee/2WikiMultihopQA`).

## Version History
- v1: first release.
- v2: scoring agrees with the official scripts, and a dialogue ends when an answer repeats
  the last non-empty answer (the reference rule); see `optima_envs.envs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from optima_envs.core.task import Task
from optima_envs.data.common import OnError
from optima_envs.data.twowikimqa import TwoWikiMQASource
from optima_envs.tasks.hotpotqa import HotpotQAConfig, multihop_paragraph_task


@dataclass(frozen=True)
class TwoWikiMQAConfig(HotpotQAConfig):
    DATASET: ClassVar[str] = "2wikimqa-ia"
    SPLITS: ClassVar[tuple[str, ...]] = ("train", "validation", "test")


def make_task(*, data_dir: str | None = None, data_files: str | list[str] | None = None, split: str = "validation",
              limit: int | None = None, seed: int = 0, on_error: OnError = "raise", hub_id: str | None = None,
              first_sentence_only: bool = False) -> Task:
    """Build the `2wikimqa-ia` task; the keyword arguments are the `TwoWikiMQAConfig` fields."""
    config = TwoWikiMQAConfig(data_dir=data_dir, data_files=data_files, split=split, limit=limit, seed=seed,
                              on_error=on_error, hub_id=hub_id, first_sentence_only=first_sentence_only)
    return multihop_paragraph_task("2wikimqa-ia", TwoWikiMQASource(config, first_sentence_only=first_sentence_only))
