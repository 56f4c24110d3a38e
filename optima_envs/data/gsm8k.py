"""GSM8K: the original jsonl release (`grade_school_math/data/{train,test}.jsonl`) and the
hub's `openai/gsm8k` (config `main`), which share one row shape: `{"question", "answer"}`,
the answer being the worked solution ending in `#### <number>`.

Gold is that final number with thousands separators removed (a string, e.g. "18"); the
solution is kept in `meta["solution"]`. Rows carry no id: ids are `<file stem>-<line index>`
(`test-17`), and the hub's rows, in the same order, get the same ids (`test-17`).
"""

from __future__ import annotations

from optima_envs.core.types import TaskInstance
from optima_envs.data.common import DatasetSource, Row, positional_id, require
from optima_envs.scoring import parse_number


def final_number(row: Row, solution: str) -> str:
    """The number after the last `####` of a GSM8K solution, as a plain string."""
    if "####" not in solution:
        raise row.fail("field 'answer' has no '#### <number>' line")
    gold = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not gold or parse_number(gold) is None:
        raise row.fail(f"the final answer after '####' is not a number: {gold!r}")
    return gold


class GSM8KSource(DatasetSource):
    dataset = "gsm8k-debate"
    data_folder = "gsm8k"
    default_hub_id = "openai/gsm8k"

    def file_patterns(self) -> tuple[str, ...]:
        split = self.config.split
        return (f"{split}.jsonl", f"data/{split}.jsonl", f"grade_school_math/data/{split}.jsonl",
                f"main/{split}-*.parquet", f"{split}-*.parquet")

    def hub_config(self) -> str | None:
        return "main"

    def files_hint(self) -> str:
        return "the release's train.jsonl / test.jsonl"

    def to_instance(self, row: Row) -> TaskInstance:
        question = require(row, "question").strip()
        solution = require(row, "answer")
        return TaskInstance(instance_id=positional_id(row), question=question, gold=final_number(row, solution),
                            meta={"dataset": "gsm8k", "solution": solution})
