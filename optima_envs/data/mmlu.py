"""MMLU (57 subjects): the original headerless CSVs and the hub's `cais/mmlu` rows.

Original release (`data/{test,val,dev}/<subject>_<split>.csv`): rows `question, A, B, C, D,
answer letter`, the subject given by the file name.
Hub (`cais/mmlu`, config `all`): `{"question", "subject", "choices": [4 strings], "answer": 0-3}`.

Options are labelled A-D; gold is the letter. Ids are `<subject>_<release split>-<row>` in both
formats (`anatomy_test-17`: row 17 of anatomy_test.csv, or the 18th anatomy row of the hub's
test split). `subjects=` keeps only some subjects.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Sequence

from optima_envs.core.types import TaskInstance
from optima_envs.data.common import DataConfig, DatasetSource, Row, find_files, require
from optima_envs.errors import ConfigError, DataNotFoundError

SUBJECTS = (
    "abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge", "college_biology",
    "college_chemistry", "college_computer_science", "college_mathematics", "college_medicine", "college_physics",
    "computer_security", "conceptual_physics", "econometrics", "electrical_engineering", "elementary_mathematics",
    "formal_logic", "global_facts", "high_school_biology", "high_school_chemistry", "high_school_computer_science",
    "high_school_european_history", "high_school_geography", "high_school_government_and_politics",
    "high_school_macroeconomics", "high_school_mathematics", "high_school_microeconomics", "high_school_physics",
    "high_school_psychology", "high_school_statistics", "high_school_us_history", "high_school_world_history",
    "human_aging", "human_sexuality", "international_law", "jurisprudence", "logical_fallacies", "machine_learning",
    "management", "marketing", "medical_genetics", "miscellaneous", "moral_disputes", "moral_scenarios", "nutrition",
    "philosophy", "prehistory", "professional_accounting", "professional_law", "professional_medicine",
    "professional_psychology", "public_relations", "security_studies", "sociology", "us_foreign_policy", "virology",
    "world_religions",
)
RELEASE_SPLITS = {"test": "test", "validation": "val", "dev": "dev"}
LABELS = ("A", "B", "C", "D")


def check_subjects(subjects: Sequence[str] | None, dataset: str) -> tuple[str, ...] | None:
    """Validate `subjects=` (a name or a list of names) against the 57 MMLU subjects."""
    if subjects is None:
        return None
    names = (subjects,) if isinstance(subjects, str) else tuple(subjects)
    if not names:
        raise ConfigError(f"{dataset}: subjects must be None (all) or a non-empty list, got {subjects!r}")
    for name in names:
        if name not in SUBJECTS:
            close = difflib.get_close_matches(str(name), SUBJECTS, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ConfigError(f"{dataset}: unknown MMLU subject {name!r}.{hint} Subjects: "
                              f"{', '.join(SUBJECTS[:5])}, ... (optima_envs.data.mmlu.SUBJECTS)")
    return tuple(dict.fromkeys(names))


class MMLUSource(DatasetSource):
    dataset = "mmlu-debate"
    data_folder = "mmlu"
    default_hub_id = "cais/mmlu"

    def __init__(self, config: DataConfig, *, subjects: Sequence[str] | None = None):
        self.subjects = check_subjects(subjects, self.dataset)
        super().__init__(config)

    @property
    def suffix(self) -> str:
        return RELEASE_SPLITS[self.config.split]

    def locate_files(self, data_dir: str) -> tuple[Path, ...]:
        suffix, split = self.suffix, self.config.split
        patterns = (f"{suffix}/*_{suffix}.csv", f"data/{suffix}/*_{suffix}.csv", f"*_{suffix}.csv",
                    f"all/{split}-*.parquet", f"{split}.jsonl")
        files = find_files(data_dir, patterns, dataset=self.dataset, split=split, hint=self.hint())
        if files[0].suffix != ".csv" or self.subjects is None:
            return files
        by_subject = {self._subject_of(f): f for f in files}
        missing = [s for s in self.subjects if s not in by_subject]
        if missing:
            raise DataNotFoundError(f"{self.dataset}: no {suffix} file for subject(s) {missing} in {data_dir!r}")
        return tuple(by_subject[s] for s in self.subjects)

    def hub_config(self) -> str | None:
        return "all"

    def files_hint(self) -> str:
        return "the release's test/, val/ and dev/ folders of <subject>_<split>.csv files"

    def loader_options(self) -> tuple[tuple[str, Any], ...]:
        return (("subjects", self.subjects),)

    def _subject_of(self, path: Path) -> str:
        stem = path.stem
        for suffix in RELEASE_SPLITS.values():
            if stem.endswith(f"_{suffix}"):
                return stem[: -len(suffix) - 1]
        return stem

    def read_file(self, path: Path) -> list[Row]:
        rows = super().read_file(path)
        if path.suffix == ".csv":
            subject = self._subject_of(path)
            if self.subjects is not None and subject not in self.subjects:
                return []
            return [Row({"csv": row.data, "subject": subject}, row.where, row.index, row.origin, row.error)
                    for row in rows]
        return self._number_by_subject(rows)

    def read_hub(self) -> list[Row]:
        return self._number_by_subject(super().read_hub())

    def _number_by_subject(self, rows: list[Row]) -> list[Row]:
        """Hub-format rows: ids count within each subject, as in the per-subject CSVs."""
        counts: dict[str, int] = {}
        out = []
        for row in rows:
            subject = row.data.get("subject") if isinstance(row.data, dict) else None
            if not isinstance(subject, str):
                out.append(row)  # to_instance reports the missing field
                continue
            if self.subjects is not None and subject not in self.subjects:
                continue
            index = counts.get(subject, 0)
            counts[subject] = index + 1
            out.append(Row(row.data, row.where, index, f"{subject}_{self.suffix}", row.error))
        return out

    def to_instance(self, row: Row) -> TaskInstance:
        if isinstance(row.data, dict) and "csv" in row.data:
            record = row.data["csv"]
            if len(record) != 6:
                raise row.fail(f"expected 6 columns (question, A, B, C, D, answer), got {len(record)}")
            question, options, answer = record[0], record[1:5], record[5].strip()
            subject = row.data["subject"]
        else:
            question = require(row, "question")
            subject = require(row, "subject")
            options = require(row, "choices", list)
            answer = require(row, "answer", (int, str))
            if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(LABELS):
                answer = LABELS[answer]
        if len(options) != 4 or not all(isinstance(o, str) for o in options):
            raise row.fail(f"expected 4 option strings, got {str(options)[:80]!r}")
        if answer not in LABELS:
            raise row.fail(f"the answer must be one of {list(LABELS)} (or 0-3), got {answer!r}")
        if not question.strip():
            raise row.fail("the question is empty")
        choices = tuple((label, str(text).strip()) for label, text in zip(LABELS, options))
        return TaskInstance(instance_id=f"{row.origin}-{row.index}", question=question.strip(), gold=answer,
                            choices=choices, meta={"dataset": "mmlu", "subject": subject})
