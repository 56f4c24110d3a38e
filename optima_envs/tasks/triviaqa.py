"""`triviaqa-ia`: TriviaQA (reading comprehension, with evidence) as an information-asymmetric
dialogue.

## Description
Agents answer a trivia question from evidence snippets that are split between them.

## Evidence split
Snippets (see `optima_envs.data.triviaqa`: the leading chunks of each evidence document, at
most `snippet_chars` characters each, or the search results' description snippets) are
shuffled and dealt round-robin (`deal_shuffled_alternately`), so each agent holds about half.
A snippet containing an answer alias is marked supporting (for statistics only).

## Protocol and episode end
Partners; `<A>answer</A>`; ends when an answer repeats the last answer given
(`answer_repeats_last_answer`) or at `max_turns`.

## Metric
Token F1 as TriviaQA's official script computes it (`triviaqa_f1`: its own normaliser, under
which "David_Seville" is "David Seville"), the maximum over the answer's aliases (Value,
Aliases, NormalizedAliases).

## Arguments
data_dir (the release root holding qa/ and evidence/), data_files (qa JSON files; evidence is
looked for in their ../evidence unless evidence_dir is given), split ("validation" (alias
"dev"), "train", "test" (released without answers)), limit, seed, on_error, hub_id (default
`mandarjoshi/trivia_qa`), domain ("wikipedia", "web" or "both"; default "wikipedia"),
evidence ("documents" or "descriptions"), snippet_chars (default 600), snippets_per_document
(default 2), max_snippets (default 8), evidence_dir.

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
from optima_envs.data.common import DataConfig, OnError
from optima_envs.data.triviaqa import Domain, EvidenceKind, TriviaQASource
from optima_envs.errors import ConfigError
from optima_envs.prompts.templates import InfoAsymmetricPrompts
from optima_envs.scoring import extract_tag, max_over_aliases, triviaqa_f1
from optima_envs.splits import deal_shuffled_alternately


@dataclass(frozen=True)
class TriviaQAConfig(DataConfig):
    """`DataConfig` plus the evidence knobs (see the module docstring)."""

    split: str = "validation"
    domain: Domain = "wikipedia"
    evidence: EvidenceKind = "documents"
    snippet_chars: int = 600
    snippets_per_document: int = 2
    max_snippets: int = 8
    evidence_dir: str | None = None

    DATASET: ClassVar[str] = "triviaqa-ia"

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.DATASET
        if self.domain not in ("wikipedia", "web", "both"):
            raise ConfigError(f"{name}: domain must be 'wikipedia', 'web' or 'both', got {self.domain!r}")
        if self.evidence not in ("documents", "descriptions"):
            raise ConfigError(f"{name}: evidence must be 'documents' or 'descriptions', got {self.evidence!r}")
        if self.evidence == "descriptions" and self.domain == "wikipedia":
            raise ConfigError(f"{name}: evidence='descriptions' needs search results, which only the web domain has "
                              f"(domain={self.domain!r}); use domain='web' or evidence='documents'")
        for field_name, low in (("snippet_chars", 50), ("snippets_per_document", 1), ("max_snippets", 1)):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name}: {field_name} must be an int >= {low}, got {value!r}")


def score_aliases(answer: str, instance: TaskInstance) -> float:
    return max_over_aliases(triviaqa_f1, answer, instance.gold)


def make_task(*, data_dir: str | None = None, data_files: str | list[str] | None = None, split: str = "validation",
              limit: int | None = None, seed: int = 0, on_error: OnError = "raise", hub_id: str | None = None,
              domain: Domain = "wikipedia", evidence: EvidenceKind = "documents", snippet_chars: int = 600,
              snippets_per_document: int = 2, max_snippets: int = 8, evidence_dir: str | None = None) -> Task:
    """Build the `triviaqa-ia` task; the keyword arguments are the `TriviaQAConfig` fields."""
    config = TriviaQAConfig(data_dir=data_dir, data_files=data_files, split=split, limit=limit, seed=seed,
                            on_error=on_error, hub_id=hub_id, domain=domain, evidence=evidence,
                            snippet_chars=snippet_chars, snippets_per_document=snippets_per_document,
                            max_snippets=max_snippets, evidence_dir=evidence_dir)
    source = TriviaQASource(config, domain=config.domain, evidence=config.evidence, snippet_chars=config.snippet_chars,
                            snippets_per_document=config.snippets_per_document, max_snippets=config.max_snippets,
                            evidence_dir=config.evidence_dir)
    return Task(
        name="triviaqa-ia",
        family="ia",
        source=source,
        split_evidence=deal_shuffled_alternately,
        prompts=InfoAsymmetricPrompts(),
        extract=extract_tag,
        metric=score_aliases,
        termination=answer_repeats_last_answer,
        answer_format="<A>answer</A>",
    )
