"""HotpotQA (distractor setting): the original release JSON and the hub's `hotpot_qa` rows.

Original (`hotpot_dev_distractor_v1.json`, `hotpot_train_v1.1.json`, or one object per line):
`{"_id", "question", "answer", "type", "level", "supporting_facts": [[title, sent_id], ...],
"context": [[title, [sentence, ...]], ...]}`.
Hub (`hotpotqa/hotpot_qa`, config `distractor`): `{"id", ..., "supporting_facts": {"title": [...],
"sent_id": [...]}, "context": {"title": [...], "sentences": [[...], ...]}}`.

Each context paragraph becomes one `Evidence` (title + its sentences, stripped and joined by one
space; a paragraph without text is left out), supporting when its title is among the supporting
facts' titles. Instance ids are the dataset's ids (as strings: some copies number their rows).
"""

from __future__ import annotations

from typing import Any, Sequence

from optima_envs.core.types import Evidence, TaskInstance
from optima_envs.data.common import DataConfig, DatasetSource, Row, require

SPLIT_PATTERNS = {
    "validation": ("hotpot_dev_distractor_v1.json", "dev.jsonl", "dev.json", "validation.jsonl",
                   "validation.json", "validation-*.parquet", "distractor/validation-*.parquet",
                   "dev.original_format.json"),
    "train": ("hotpot_train_v1.1.json", "train.jsonl", "train.json", "train-*.parquet",
              "distractor/train-*.parquet", "train.original_format.json"),
}


def paragraphs(row: Row) -> list[tuple[str, list[str]]]:
    """`context` as (title, sentences) pairs, from either the list or the column layout."""
    context = require(row, "context", (list, dict))
    if isinstance(context, dict):
        titles = require(row, "title", list, container=context, label="context.title")
        key = "sentences" if "sentences" in context else "content"  # 2Wiki hub copies say "content"
        bodies = require(row, key, list, container=context, label=f"context.{key}")
        if len(titles) != len(bodies):
            raise row.fail(f"context.title has {len(titles)} entries but context.{key} has {len(bodies)}")
        pairs: Sequence[Any] = list(zip(titles, bodies))
    else:
        pairs = context
    out = []
    for k, pair in enumerate(pairs):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], (list, tuple)) and all(isinstance(s, str) for s in pair[1])):
            raise row.fail(f"context[{k}] must be [title, [sentence, ...]], got {str(pair)[:80]!r}")
        out.append((pair[0], list(pair[1])))
    return out


def supporting_titles(row: Row) -> list[str]:
    """The titles named by `supporting_facts`, from either layout, in order, without repeats."""
    facts = require(row, "supporting_facts", (list, dict))
    if isinstance(facts, dict):
        titles = require(row, "title", list, container=facts, label="supporting_facts.title")
    else:
        titles = []
        for k, fact in enumerate(facts):
            if not (isinstance(fact, (list, tuple)) and len(fact) == 2 and isinstance(fact[0], str)):
                raise row.fail(f"supporting_facts[{k}] must be [title, sent_id], got {str(fact)[:80]!r}")
            titles.append(fact[0])
    if not all(isinstance(t, str) for t in titles):
        raise row.fail("supporting_facts titles must be strings")
    return list(dict.fromkeys(titles))


def multihop_instance(row: Row, *, first_sentence_only: bool, dataset: str) -> TaskInstance:
    """The HotpotQA/2Wiki row shape as a TaskInstance (shared with the 2Wiki loader)."""
    key = "_id" if isinstance(row.data, dict) and "_id" in row.data else "id"
    instance_id = require(row, key, (str, int))  # some copies number their rows: ids become strings
    if isinstance(instance_id, bool):
        raise row.fail(f"field {key!r} must be a string or an int, got {instance_id!r}")
    instance_id = str(instance_id)
    question = require(row, "question").strip()
    answer = require(row, "answer").strip()
    support = supporting_titles(row)
    context = paragraphs(row)
    titles = {title for title, _ in context}
    missing = [t for t in support if t not in titles]
    if missing:
        raise row.fail(f"supporting_facts name {missing} but context has no paragraph with that title")
    evidence = []
    for title, sentences in context:
        chosen = sentences[:1] if first_sentence_only else sentences
        text = " ".join(s.strip() for s in chosen if s.strip())
        if text:
            evidence.append(Evidence(text=text, title=title, supporting=title in support))
    meta = {"dataset": dataset, "supporting_titles": tuple(support)}
    for key in ("type", "level"):
        if isinstance(row.data.get(key), str):
            meta[key] = row.data[key]
    return TaskInstance(instance_id=instance_id, question=question, gold=answer,
                        evidence=tuple(evidence), meta=meta)


class HotpotQASource(DatasetSource):
    """HotpotQA distractor rows (either format, even mixed in one folder's files)."""

    dataset = "hotpotqa-ia"
    data_folder = "hotpotqa"
    default_hub_id = "hotpotqa/hotpot_qa"

    def __init__(self, config: DataConfig, *, first_sentence_only: bool = False):
        self.first_sentence_only = first_sentence_only
        super().__init__(config)

    def file_patterns(self) -> tuple[str, ...]:
        return SPLIT_PATTERNS[self.config.split]

    def hub_config(self) -> str | None:
        return "distractor"

    def files_hint(self) -> str:
        return "hotpot_dev_distractor_v1.json / hotpot_train_v1.1.json, or hub rows as dev.jsonl / train.jsonl"

    def loader_options(self) -> tuple[tuple[str, Any], ...]:
        return (("first_sentence_only", self.first_sentence_only),)

    def to_instance(self, row: Row) -> TaskInstance:
        return multihop_instance(row, first_sentence_only=self.first_sentence_only, dataset="hotpotqa")
