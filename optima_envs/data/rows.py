"""Rows and readers: a raw record with its location (file and line, JSON item, hub row), a
checked field accessor whose errors name the place and the field, and readers for .jsonl, .json,
.csv and .parquet files."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from optima_envs.errors import DataError

# ----------------------------------------------------------------------------- rows and fields

@dataclass(frozen=True)
class Row:
    """One raw record and where it came from. `error` is set when it could not be parsed."""

    data: Any
    where: str  # "path:line", "path[item]" or "hub <id> (<config>, <split>) row <i>"
    index: int  # position among the rows of its file (or hub split), from 0
    origin: str  # the file's stem, or the hub split's name: the prefix of positional ids
    error: str | None = None

    def fail(self, message: str) -> DataError:
        return DataError(f"{self.where}: {message}")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def require(row: Row, key: str, kind: type | tuple[type, ...] = str, *, container: Any = None,
            label: str | None = None, allow_empty: bool = False) -> Any:
    """`row.data[key]` (or `container[key]`), checked to exist, have type `kind` and, for
    strings and lists, not be empty; otherwise a `DataError` naming the place and the field."""
    data = row.data if container is None else container
    label = label or key
    if not isinstance(data, Mapping):
        raise row.fail(f"expected an object with field {label!r}, got {type(data).__name__} {_short(data)}")
    if key not in data:
        raise row.fail(f"missing field {label!r} (fields present: {sorted(map(str, data))[:15]})")
    value = data[key]
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise row.fail(f"field {label!r} must be {names}, got {type(value).__name__} {_short(value)}")
    empty = not value.strip() if isinstance(value, str) else isinstance(value, (list, tuple)) and not value
    if empty and not allow_empty:
        raise row.fail(f"field {label!r} is empty")
    return value


# ----------------------------------------------------------------------------- readers

def read_rows(path: Path) -> list[Row]:
    """Rows of a .jsonl, .json (a list, one object, or JSON Lines), .csv (no header) or
    .parquet file."""
    suffix = path.suffix.lower()
    readers = {".jsonl": read_jsonl, ".json": read_json, ".csv": read_csv, ".parquet": read_parquet}
    if suffix not in readers:
        raise DataError(f"{path}: unsupported file type {suffix!r}; expected one of {sorted(readers)}")
    return readers[suffix](path)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text (byte {error.start}): {error.reason}") from error


def read_jsonl(path: Path) -> list[Row]:
    """One JSON value per line; blank lines are ignored. A bad line becomes a Row with `error`."""
    rows = []
    for lineno, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            rows.append(Row(json.loads(line), where, len(rows), path.stem))
        except json.JSONDecodeError as error:
            error_text = f"invalid JSON ({error.msg}, column {error.colno})"
            rows.append(Row(None, where, len(rows), path.stem, error=error_text))
    return rows


def read_json(path: Path, key: str | None = None) -> list[Row]:
    """A JSON list (one row per item), a single object (one row), or the list under `key` of
    an object (TriviaQA's `Data`). A file of JSON Lines named .json is read as JSON Lines."""
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            return read_jsonl(path)
        raise DataError(f"{path}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from error
    if key is not None:
        if not isinstance(data, Mapping) or not isinstance(data.get(key), list):
            got = f"an object with fields {sorted(data)[:10]}" if isinstance(data, Mapping) else type(data).__name__
            raise DataError(f"{path}: expected a JSON object with a list under {key!r}, got {got}")
        data = data[key]
    if isinstance(data, list):
        return [Row(item, f"{path}[{i}]", i, path.stem) for i, item in enumerate(data)]
    return [Row(data, str(path), 0, path.stem)]


def read_csv(path: Path) -> list[Row]:
    """A headerless CSV: each row is a list of strings; `where` is the record's first line."""
    rows = []
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            start = 1
            for record in reader:
                if record:
                    rows.append(Row(record, f"{path}:{start}", len(rows), path.stem))
                start = reader.line_num + 1
    except (UnicodeDecodeError, csv.Error) as error:
        raise DataError(f"{path}: cannot read as CSV: {error}") from error
    return rows


def read_parquet(path: Path) -> list[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise DataError(f"{path}: reading Parquet files needs pyarrow: pip install pyarrow") from error
    try:
        items = pq.read_table(path).to_pylist()
    except (OSError, ValueError) as error:  # pyarrow's errors derive from these
        raise DataError(f"{path}: cannot read as Parquet: {error}") from error
    return [Row(item, f"{path}, row {i}", i, path.stem) for i, item in enumerate(items)]
