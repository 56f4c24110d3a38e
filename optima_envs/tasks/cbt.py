"""`cbt-ia`: the Children's Book Test (named entities or common nouns) as an
information-asymmetric dialogue.

## Description
A story of 20 sentences is split between the agents; they must pick which of 10 candidate
words fills the blank `XXXXX` in the 21st sentence. The candidates are listed in every
agent's prompt (`TaskInstance.choices`).

## Evidence split
The 20 sentences, in story order. `evidence_split="halves"` (the default, as in the paper):
`deal_contiguous_halves`, the story cut into contiguous parts (sentences 1-10 and 11-20 for two
agents) given to the agents in a seeded random order, so each reads a coherent passage.
`evidence_split="alternate"`: `deal_shuffled_alternately`, sentences shuffled and dealt
round-robin. Sentences containing the answer word are marked supporting (statistics only).

## Protocol and episode end
Partners; the chosen word as `<A>word</A>`; ends when an answer repeats the last answer given
(`answer_repeats_last_answer`) or at `max_turns`.

## Metric
Exact match on the chosen word (`word_match` against the candidates: the answer itself, or
the one candidate it names).

## Arguments
data_dir, data_files, split ("test" (default), "validation" (alias "valid") or "train"), limit,
seed, on_error, hub_id (default `cam-cst/cbt`), subset ("CN" (default), "NE", "P" or "V"),
evidence_split ("halves" or "alternate").

## Version History
- v1: first release.
- v2: scoring agrees with the official scripts, and a dialogue ends when an answer repeats
  the last non-empty answer (the reference rule); see `optima_envs.envs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from optima_envs.core.task import Task
from optima_envs.core.termination import answer_repeats_last_answer
from optima_envs.core.types import TaskInstance
from optima_envs.data.cbt import SUBSETS, CBTSource, Subset
from optima_envs.data.common import DataConfig, OnError
from optima_envs.errors import ConfigError
from optima_envs.prompts.templates import InfoAsymmetricPrompts
from optima_envs.scoring import extract_tag, word_match
from optima_envs.splits import deal_contiguous_halves, deal_shuffled_alternately

EvidenceSplitName = Literal["halves", "alternate"]
EVIDENCE_SPLITS = {"halves": deal_contiguous_halves, "alternate": deal_shuffled_alternately}


@dataclass(frozen=True)
class CBTConfig(DataConfig):
    """`DataConfig` plus subset (CN, NE, P or V) and evidence_split ("halves" or "alternate")."""

    split: str = "test"
    subset: Subset = "CN"
    evidence_split: EvidenceSplitName = "halves"

    DATASET: ClassVar[str] = "cbt-ia"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.subset not in SUBSETS:
            raise ConfigError(f"{self.DATASET}: subset must be one of {list(SUBSETS)}, got {self.subset!r}")
        if self.evidence_split not in EVIDENCE_SPLITS:
            raise ConfigError(f"{self.DATASET}: evidence_split must be one of {list(EVIDENCE_SPLITS)}, "
                              f"got {self.evidence_split!r}")


def score_word(answer: str, instance: TaskInstance) -> float:
    return word_match(answer, instance.gold, [text for _, text in instance.choices])


def make_task(*, data_dir: str | None = None, data_files: str | list[str] | None = None, split: str = "test",
              limit: int | None = None, seed: int = 0, on_error: OnError = "raise", hub_id: str | None = None,
              subset: Subset = "CN", evidence_split: EvidenceSplitName = "halves") -> Task:
    """Build the `cbt-ia` task; the keyword arguments are the `CBTConfig` fields."""
    config = CBTConfig(data_dir=data_dir, data_files=data_files, split=split, limit=limit, seed=seed,
                       on_error=on_error, hub_id=hub_id, subset=subset, evidence_split=evidence_split)
    return Task(
        name="cbt-ia",
        family="ia",
        source=CBTSource(config, subset=config.subset),
        split_evidence=EVIDENCE_SPLITS[config.evidence_split],
        prompts=InfoAsymmetricPrompts(
            answer_instruction="When you and your partner agree, give the chosen candidate word as <A>word</A>."),
        extract=extract_tag,
        metric=score_word,
        termination=answer_repeats_last_answer,
        answer_format="<A>word</A>",
    )
