"""Children's Book Test: the original text files and the hub's rows.

Original (`cbtest_{CN,NE,P,V}_{train,valid_2000ex,test_2500ex}.txt`): stories separated by a
blank line (the training files also have `_BOOK_TITLE_ : ...` lines, which are skipped); each
is 20 numbered context lines (`1 text` ... `20 text`) then line 21,
`21 query<TAB>answer<TAB><TAB>c1|c2|...|c10`, the query having `XXXXX` for the missing word.
Hub (`cam-cst/cbt`, configs `CN`, `NE`, `P`, `V`): `{"sentences": [20 strings], "question",
"answer", "options": [10 strings]}`.

Ids are `cbtest_<subset>_<release split name>-<story index>` in both formats (the hub keeps
the files' order), e.g. `cbtest_NE_test_2500ex-17`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from optima_envs.core.types import Evidence, TaskInstance
from optima_envs.data.common import DataConfig, DatasetSource, Row, require
from optima_envs.data.rows import Line, read_lines
from optima_envs.scoring import normalize_answer

Subset = Literal["CN", "NE", "P", "V"]
SUBSETS = ("CN", "NE", "P", "V")
RELEASE_SPLITS = {"train": "train", "validation": "valid_2000ex", "test": "test_2500ex"}
_NUMBERED = re.compile(r"(\d+) (.*)", re.DOTALL)


def read_cbt_text(path: Path) -> list[Row]:
    """Stories of an original CBT file as rows in the hub's shape; `where` is the query line.
    A story whose lines are not numbered 1..n followed by a query line, or with a line that is
    not UTF-8, becomes an error row (so `on_error="skip"` skips only that story)."""
    rows: list[Row] = []
    lines: list[Line] = []

    def flush() -> None:
        if lines:
            rows.append(_story(path, lines, len(rows)))
            lines.clear()

    for line in read_lines(path):
        if line.text.startswith("_BOOK_TITLE_"):  # the training files name each book before its stories
            flush()
        elif line.text.strip():
            lines.append(line)
        else:
            flush()
    flush()
    return rows


def _story(path: Path, lines: list[Line], index: int) -> Row:
    last_lineno = lines[-1].number
    where = f"{path}:{last_lineno}"
    bad = next((line for line in lines if line.error is not None), None)
    if bad is not None:
        return Row(None, f"{path}:{bad.number}", index, path.stem, error=bad.error)
    sentences = []
    for expected, (lineno, line) in enumerate(((x.number, x.text) for x in lines), 1):
        match = _NUMBERED.fullmatch(line)
        if match is None or int(match.group(1)) != expected:
            return Row(None, f"{path}:{lineno}", index, path.stem,
                       error=f"expected a line numbered {expected} ('{expected} text'), got {line[:60]!r}")
        if expected < len(lines):
            sentences.append(match.group(2))
    parts = _NUMBERED.fullmatch(lines[-1].text).group(2).split("\t")
    if len(parts) != 4 or parts[2] != "":
        return Row(None, where, index, path.stem,
                   error=f"the query line must be 'N query<TAB>answer<TAB><TAB>c1|...|c10', "
                         f"got {len(parts)} tab-separated fields")
    query, answer, _, candidates = parts
    data = {"sentences": sentences, "question": query, "answer": answer, "options": candidates.split("|")}
    return Row(data, where, index, path.stem)


class CBTSource(DatasetSource):
    dataset = "cbt-ia"
    data_folder = "cbt"
    default_hub_id = "cam-cst/cbt"

    def __init__(self, config: DataConfig, *, subset: Subset = "CN"):
        self.subset = subset
        super().__init__(config)

    def release_name(self) -> str:
        return f"cbtest_{self.subset}_{RELEASE_SPLITS[self.config.split]}"

    def file_patterns(self) -> tuple[str, ...]:
        name = self.release_name()
        return (f"{name}.txt", f"data/{name}.txt", f"CBTest/data/{name}.txt",
                f"{self.subset}/{self.config.split}.jsonl", f"{self.subset}/{self.config.split}-*.parquet")

    def hub_config(self) -> str | None:
        return self.subset

    def files_hint(self) -> str:
        return f"the release's {self.release_name()}.txt"

    def loader_options(self) -> tuple[tuple[str, Any], ...]:
        return (("subset", self.subset),)

    def read_file(self, path: Path) -> list[Row]:
        if path.suffix == ".txt":
            return read_cbt_text(path)
        return super().read_file(path)

    def to_instance(self, row: Row) -> TaskInstance:
        sentences = require(row, "sentences", list)
        query = require(row, "question").strip()
        answer = require(row, "answer").strip()
        options = [o.strip() for o in require(row, "options", list) if isinstance(o, str) and o.strip()]
        if not all(isinstance(s, str) for s in sentences):
            raise row.fail("field 'sentences' must be a list of strings")
        if "XXXXX" not in query:
            raise row.fail(f"the question has no XXXXX blank: {query[:60]!r}")
        options = list(dict.fromkeys(options))
        if answer not in options:
            raise row.fail(f"the answer {answer!r} is not among the options {options}")
        origin = row.origin if row.origin.startswith("cbtest_") else self.release_name()
        gold_norm = normalize_answer(answer)
        evidence = tuple(Evidence(text=s.strip(), supporting=f" {gold_norm} " in f" {normalize_answer(s)} ")
                         for s in sentences if s.strip())
        question = f"Which candidate word fills the blank XXXXX in: {query}"
        return TaskInstance(instance_id=f"{origin}-{row.index}", question=question, gold=answer, evidence=evidence,
                            choices=tuple((o, o) for o in options),
                            meta={"dataset": "cbt", "subset": self.subset, "query": query})
