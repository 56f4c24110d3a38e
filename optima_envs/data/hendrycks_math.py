"""MATH (Hendrycks et al.): the original per-problem files, jsonl repackagings, MATH-500, and
the hub's copies.

Original release: `MATH/{train,test}/<subject>/<n>.json`, each `{"problem", "level", "type",
"solution"}`; jsonl files of the same objects (e.g. `MATH_test_5000.jsonl`) and the hub's
`EleutherAI/hendrycks_math` (one config per subject) have the same fields. MATH-500
(`math500.jsonl`, hub `HuggingFaceH4/MATH-500`) adds `answer`, `subject` and `unique_id`.

Gold: `answer` when the row has one, else the content of the solution's last `\\boxed{}` (or
`\\fbox{}`). Ids: `unique_id` when present, else the problem's path for per-problem files
(`test/algebra/1.json`, the form MATH-500 uses), else `<file stem>-<row index>`
(`MATH_test_5000-17`); rows of the hub's per-subject configs are `<subject>-<split>-<index>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from optima_envs.core.types import TaskInstance
from optima_envs.data.common import DataConfig, DatasetSource, Row, load_hub_rows, positional_id, read_json, require
from optima_envs.scoring import extract_boxed

Subset = Literal["full", "math500"]
HUB_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                "prealgebra", "precalculus")
HUB_IDS = {"full": "EleutherAI/hendrycks_math", "math500": "HuggingFaceH4/MATH-500"}


def gold_answer(row: Row) -> str:
    answer = row.data.get("answer")
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    solution = require(row, "solution")
    boxed = extract_boxed(solution, strict=True).answer
    if not boxed:
        raise row.fail("field 'solution' has no \\boxed{...} answer (and the row has no 'answer')")
    return boxed


class MATHSource(DatasetSource):
    dataset = "math-debate"
    data_folder = "math"

    def __init__(self, config: DataConfig, *, subset: Subset = "full"):
        self.subset = subset
        super().__init__(config)

    @property
    def default_hub_id(self) -> str:  # type: ignore[override]
        return HUB_IDS[self.subset]

    def file_patterns(self) -> tuple[str, ...]:
        split = self.config.split
        if self.subset == "math500":
            return ("math500.jsonl", "MATH-500/test.jsonl", "test.jsonl")
        return (f"{split}/*/*.json", f"MATH/{split}/*/*.json", f"MATH_{split}*.jsonl", f"{split}.jsonl",
                f"*/{split}-*.parquet")

    def files_hint(self) -> str:
        return "MATH/test/<subject>/<n>.json, MATH_test_5000.jsonl or math500.jsonl"

    def loader_options(self) -> tuple[tuple[str, Any], ...]:
        return (("subset", self.subset),)

    def read_file(self, path: Path) -> list[Row]:
        rows = read_json(path) if path.suffix == ".json" else super().read_file(path)
        if path.suffix == ".json" and len(rows) == 1 and isinstance(rows[0].data, dict):
            relative = f"{path.parent.parent.name}/{path.parent.name}/{path.name}"  # test/algebra/1.json
            return [Row(rows[0].data, rows[0].where, 0, relative)]
        return rows

    def read_hub(self) -> list[Row]:
        split = self.hub_split()
        if self.subset == "math500":
            return load_hub_rows(self.hub_id, None, split, dataset=self.dataset, hint=self.hint())
        rows = []
        for subject in HUB_SUBJECTS:
            for row in load_hub_rows(self.hub_id, subject, split, dataset=self.dataset, hint=self.hint()):
                rows.append(Row(row.data, row.where, row.index, f"{subject}-{split}"))
        return rows

    def to_instance(self, row: Row) -> TaskInstance:
        problem = require(row, "problem").strip()
        unique_id = row.data.get("unique_id")
        if isinstance(unique_id, str) and unique_id:
            instance_id = unique_id
        elif row.origin.endswith(".json"):
            instance_id = row.origin
        else:
            instance_id = positional_id(row)
        meta = {"dataset": "math", "subset": self.subset}
        for key in ("level", "type", "subject", "solution"):
            if isinstance(row.data.get(key), (str, int)):
                meta[key] = row.data[key]
        return TaskInstance(instance_id=instance_id, question=problem, gold=gold_answer(row), meta=meta)
