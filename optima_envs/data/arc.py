"""ARC-Challenge: the original AI2 jsonl, the hub's `allenai/ai2_arc` rows, and a common
restructured jsonl.

Original (`ARC-Challenge-{Train,Dev,Test}.jsonl`): `{"id", "question": {"stem", "choices":
[{"text", "label"}, ...]}, "answerKey"}`.
Hub (`allenai/ai2_arc`, config `ARC-Challenge`): `{"id", "question", "choices": {"text": [...],
"label": [...]}, "answerKey"}`.
Restructured (e.g. `arc_challenge_test.jsonl`): `{"id", "question", "options": [{"label",
"text"}, ...], "answer"}`.

Some real ARC items label their options "1".."5" instead of "A".."E"; those labels and the
answer key are mapped to letters ("1" -> "A", ...), so every instance has letter labels and
answers are always `<A>letter</A>`; the original labels are kept in `meta["original_labels"]`.
Ids are the dataset's ids.
"""

from __future__ import annotations

from typing import Any

from optima_envs.core.types import TaskInstance
from optima_envs.data.common import DatasetSource, Row, require

RELEASE_SPLITS = {"train": "Train", "validation": "Dev", "test": "Test"}


def _pairs(row: Row) -> tuple[str, list[Any], str]:
    """(stem, [(label, text), ...], answer key) from any of the three shapes."""
    question = require(row, "question", (str, dict))
    if isinstance(question, dict):
        stem = require(row, "stem", container=question, label="question.stem")
        choices = require(row, "choices", list, container=question, label="question.choices")
        pairs = [(require(row, "label", container=c, label=f"question.choices[{k}].label"),
                  require(row, "text", container=c, label=f"question.choices[{k}].text", allow_empty=True))
                 for k, c in enumerate(choices)]
        return stem, pairs, require(row, "answerKey")
    if "options" in row.data:
        options = require(row, "options", list)
        pairs = [(require(row, "label", container=o, label=f"options[{k}].label"),
                  require(row, "text", container=o, label=f"options[{k}].text", allow_empty=True))
                 for k, o in enumerate(options)]
        return question, pairs, require(row, "answer")
    choices = require(row, "choices", dict)
    labels = require(row, "label", list, container=choices, label="choices.label")
    texts = require(row, "text", list, container=choices, label="choices.text")
    if len(labels) != len(texts):
        raise row.fail(f"choices.label has {len(labels)} entries but choices.text has {len(texts)}")
    return question, list(zip(labels, texts)), require(row, "answerKey")


def letter_labels(row: Row, labels: list[str], answer: str) -> tuple[list[str], str]:
    """Digit labels "1".."n" become "A".."E"...; letter labels stay. Mixed labels are an error."""
    labels = [str(label).strip() for label in labels]
    answer = str(answer).strip()
    if all(label.isdigit() for label in labels):
        if answer not in labels:
            raise row.fail(f"the answer key {answer!r} is not one of the labels {labels}")
        mapped = [chr(ord("A") + int(label) - 1) for label in labels]
        return mapped, mapped[labels.index(answer)]
    if not all(len(label) == 1 and label.isalpha() for label in labels):
        raise row.fail(f"option labels must be letters or digits, got {labels}")
    return labels, answer


class ARCSource(DatasetSource):
    dataset = "arc-debate"
    data_folder = "arc_challenge"
    default_hub_id = "allenai/ai2_arc"

    def file_patterns(self) -> tuple[str, ...]:
        name = RELEASE_SPLITS[self.config.split]
        split = self.config.split
        return (f"ARC-Challenge-{name}.jsonl", f"*/ARC-Challenge-{name}.jsonl",
                f"ARC-Challenge/ARC-Challenge-{name}.jsonl",
                f"ARC-Challenge_{split}*.jsonl", f"ARC-Challenge/{split}-*.parquet", f"{split}.jsonl")

    def hub_config(self) -> str | None:
        return "ARC-Challenge"

    def files_hint(self) -> str:
        return "the release's ARC-Challenge-Test.jsonl / -Dev.jsonl / -Train.jsonl"

    def to_instance(self, row: Row) -> TaskInstance:
        stem, pairs, answer = _pairs(row)
        original = [str(label).strip() for label, _ in pairs]
        labels, gold = letter_labels(row, original, answer)
        if len(pairs) < 2 or len(set(labels)) != len(labels):
            raise row.fail(f"expected at least two options with distinct labels, got {original}")
        if gold not in labels:
            raise row.fail(f"the answer key {answer!r} is not one of the labels {original}")
        choices = tuple((label, str(text).strip()) for label, (_, text) in zip(labels, pairs))
        return TaskInstance(instance_id=require(row, "id"), question=stem.strip(), gold=gold, choices=choices,
                            meta={"dataset": "arc_challenge", "original_labels": tuple(original)})
