"""Rows and readers: a raw record with its location (file and line, JSON item, hub row), a
checked field accessor whose errors name the place and the field, and readers for .jsonl, .json,
.csv and .parquet files.

Text files are decoded line by line: a line that is not UTF-8 becomes an error row naming that
line (skipped under `on_error="skip"`) instead of rejecting the whole file. So does a JSON line
whose `\\ud800`-style escapes leave a lone surrogate in a string, which no UTF-8 file, Parquet
buffer or tokenizer can store. A JSON document (not JSON Lines) cannot be read around a bad
line; its error names the line and column.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from optima_envs.core.text import first_unencodable
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


@dataclass(frozen=True)
class Line:
    """One line of a text file: its number (from 1), its text, and why it is not UTF-8 (None if it is;
    the text then has U+FFFD for the bytes that did not decode)."""

    number: int
    text: str
    error: str | None = None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise DataError(f"{path}: cannot read the file ({error.strerror or error})") from error


_FIX = "fix or delete the line, or pass on_error='skip' to skip it"


def _decode_error(reason: str, offset_in_line: int) -> str:
    return f"not UTF-8 text (byte {offset_in_line + 1} of the line: {reason}); {_FIX}"


def read_lines(path: Path) -> list[Line]:
    """The lines of a text file (split at \\n, \\r\\n or \\r), each decoded as UTF-8 on its own."""
    lines = []
    for number, raw in enumerate(_read_bytes(path).splitlines(), 1):
        try:
            lines.append(Line(number, raw.decode("utf-8")))
        except UnicodeDecodeError as error:
            lines.append(Line(number, raw.decode("utf-8", "replace"), _decode_error(error.reason, error.start)))
    return lines


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """Where a parsed JSON value holds a string UTF-8 cannot encode (e.g. `'question'`), or None."""
    if isinstance(value, str):
        return path or "the value" if first_unencodable(value) is not None else None
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _lone_surrogate(item, f"{path}[{key!r}]")
        if found is not None:
            return found
    return None


def _json_row(text: str, where: str, index: int, origin: str) -> Row:
    """One JSON Lines line as a Row (an error row when it does not parse or cannot be stored)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return Row(None, where, index, origin, error=f"invalid JSON ({error.msg}, column {error.colno})")
    if _SURROGATE_ESCAPE.search(text) and (field := _lone_surrogate(data)) is not None:
        return Row(None, where, index, origin, error=f"{field} holds a lone UTF-16 surrogate (a \\ud800-style "
                                                     "escape without its pair), which UTF-8 cannot store; fix the text")
    return Row(data, where, index, origin)


def read_jsonl(path: Path) -> list[Row]:
    """One JSON value per line; blank lines are ignored. A bad line (not UTF-8, not JSON, a lone
    surrogate) becomes a Row with `error` that names the line."""
    rows = []
    for line in read_lines(path):
        if not line.text.strip():
            continue
        where = f"{path}:{line.number}"
        if line.error is not None:
            rows.append(Row(None, where, len(rows), path.stem, error=line.error))
        else:
            rows.append(_json_row(line.text, where, len(rows), path.stem))
    return rows


def _decode_document(path: Path) -> str:
    """A whole file as UTF-8 text; the error names the line and column of the first bad byte."""
    raw = _read_bytes(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = max(raw.rfind(b"\n", 0, error.start), raw.rfind(b"\r", 0, error.start)) + 1
        line = len(raw[:line_start].splitlines()) + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte {error.start - line_start + 1} of the line: "
                        f"{error.reason}); a JSON document cannot be read around a bad line, so fix the file") from None


def _is_json_lines(path: Path) -> bool:
    text = _read_bytes(path).decode("utf-8", "replace")
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return error.msg == "Extra data"
    return False


def read_json(path: Path, key: str | None = None) -> list[Row]:
    """A JSON list (one row per item), a single object (one row), or the list under `key` of
    an object (TriviaQA's `Data`). A file of JSON Lines named .json is read as JSON Lines."""
    try:
        text = _decode_document(path)
    except DataError:
        if _is_json_lines(path):
            return read_jsonl(path)
        raise
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
    items = data if isinstance(data, list) else [data]
    rows = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]" if isinstance(data, list) else str(path)
        field = _lone_surrogate(item) if _SURROGATE_ESCAPE.search(text) else None
        error = None if field is None else (f"{field} holds a lone UTF-16 surrogate (a \\ud800-style escape "
                                            "without its pair), which UTF-8 cannot store; fix the text")
        rows.append(Row(None if error else item, where, i, path.stem, error=error))
    return rows


def read_csv(path: Path) -> list[Row]:
    """A headerless CSV: each row is a list of strings; `where` is the record's first line. A
    record with bytes that are not UTF-8 becomes an error row naming its line."""
    rows = []
    text = _read_bytes(path).decode("utf-8", "surrogateescape")  # undecodable bytes -> U+DC80..U+DCFF
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        start = 1
        for record in reader:
            if record:
                where = f"{path}:{start}"
                bad = next((k for k, f in enumerate(record) if first_unencodable(f) is not None), None)
                if bad is None:
                    rows.append(Row(record, where, len(rows), path.stem))
                else:
                    error = f"not UTF-8 text (an invalid byte in field {bad + 1} of the record); {_FIX}"
                    rows.append(Row(None, where, len(rows), path.stem, error=error))
            start = reader.line_num + 1
    except csv.Error as error:
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
