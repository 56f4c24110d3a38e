"""2WikiMultiHopQA: the original release JSON and the hub's column layout.

Original (`train.json`, `dev.json`, `test.json`: a JSON list): `{"_id", "type", "question",
"context": [[title, [sentence, ...]], ...], "supporting_facts": [[title, sent_id], ...],
"evidences": [[subject, relation, object], ...], "answer"}`.
Hub (default `ohjoonhee/2WikiMultihopQA`, splits train/validation/test): the same fields with
`context: {"title": [...], "content" (or "sentences"): [[...], ...]}`, `supporting_facts:
{"title": [...], "sent_id": [...]}`, `evidences: {"fact": [...], "relation": [...],
"entity": [...]}`.

Paragraphs become evidence exactly as for HotpotQA (`optima_envs.data.hotpotqa`); the
evidence triples are kept in `meta["evidences"]`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from optima_envs.core.types import TaskInstance
from optima_envs.data.common import DataConfig, DatasetSource, Row
from optima_envs.data.hotpotqa import multihop_instance

SPLIT_PATTERNS = {
    "train": ("train.json", "train.jsonl", "train-*.parquet", "data/train-*.parquet"),
    "validation": ("dev.json", "dev.jsonl", "validation.json", "validation.jsonl", "validation-*.parquet",
                   "data/validation-*.parquet"),
    "test": ("test.json", "test.jsonl", "test-*.parquet", "data/test-*.parquet"),
}


def evidence_triples(row: Row) -> tuple[tuple[str, str, str], ...]:
    """`evidences` as (subject, relation, object) triples: empty when the field is absent (it
    is optional for our use), a DataError when it is malformed."""
    raw = row.data.get("evidences")
    if raw is None:
        return ()
    if isinstance(raw, dict):
        try:
            raw = list(zip(raw["fact"], raw["relation"], raw["entity"]))
        except (KeyError, TypeError) as error:
            raise row.fail(f"evidences must have 'fact', 'relation' and 'entity' lists ({error})") from error
    triples = []
    for k, triple in enumerate(raw):
        if not (isinstance(triple, (list, tuple)) and len(triple) == 3 and all(isinstance(x, str) for x in triple)):
            raise row.fail(f"evidences[{k}] must be [subject, relation, object], got {str(triple)[:80]!r}")
        triples.append(tuple(triple))
    return tuple(triples)


class TwoWikiMQASource(DatasetSource):
    dataset = "2wikimqa-ia"
    data_folder = "2wikimqa"
    default_hub_id = "ohjoonhee/2WikiMultihopQA"

    def __init__(self, config: DataConfig, *, first_sentence_only: bool = False):
        self.first_sentence_only = first_sentence_only
        super().__init__(config)

    def file_patterns(self) -> tuple[str, ...]:
        return SPLIT_PATTERNS[self.config.split]

    def files_hint(self) -> str:
        return "the release files train.json / dev.json / test.json"

    def loader_options(self) -> tuple[tuple[str, Any], ...]:
        return (("first_sentence_only", self.first_sentence_only),)

    def to_instance(self, row: Row) -> TaskInstance:
        instance = multihop_instance(row, first_sentence_only=self.first_sentence_only, dataset="2wikimqa")
        return replace(instance, meta={**instance.meta, "evidences": evidence_triples(row)})
