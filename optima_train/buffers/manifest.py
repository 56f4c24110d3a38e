"""The buffer manifest: which parts a buffer holds, their row counts and sha256 checksums.

`<dir>/.manifest.json` is the list of committed parts (hidden, like the temp files, so that
`datasets.load_dataset("parquet", data_dir=<dir>)` still sees only the parts). A writer
publishes its part first and then adds the part's entry to the manifest, atomically (a temp
file and a rename, under an OS file lock so concurrent writers never lose each other's
entries). A reader trusts only the parts the manifest lists, and checks each one before use:

- the file exists (a deleted part is an error, not fewer rows);
- its size and sha256 match (any flipped byte is caught, even one Parquet would read);
- its columns have the types of `EPISODE_SCHEMA` (a `score` column of strings is refused);
- it holds the number of rows recorded.

The manifest carries a checksum of its own entries, so damage to the manifest itself is caught
too. A part on disk that the manifest does not list was published by a writer killed before it
recorded it: readers ignore it with a warning (`remove_temp_files` deletes it). Every error
names the file at fault and says what to do.

Format (version 1): `{"format": "optima-episode-buffer", "version": 1, "parts": [{"name",
"rows", "bytes", "sha256", "rejected"}], "sha256": <sha256 of the parts list as canonical JSON>}`;
records a part could not store are kept in `<dir>/.rejected/` (see `write_episodes`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from optima_envs.atomic_files import atomic_write_text
from optima_envs.errors import OptimaError
from optima_train.buffers.schema import EPISODE_SCHEMA

__all__ = ["MANIFEST_NAME", "REJECTED_DIR", "BufferCorruptError", "BufferWarning", "PartEntry", "add_part",
           "check_columns", "file_digest", "read_manifest", "write_manifest"]

MANIFEST_NAME = ".manifest.json"
#: Where `write_episodes` keeps, as JSON lines, the records it could not store.
REJECTED_DIR = ".rejected"
_FORMAT = "optima-episode-buffer"
_VERSION = 1
_LOCK_NAME = ".manifest.lock"


class BufferCorruptError(OptimaError, ValueError):
    """Raised when a buffer's manifest or one of its parts fails a check (the message names the file)."""


class BufferWarning(UserWarning):
    """Warned when a buffer holds a part its manifest does not list, or records could not be written."""


@dataclass(frozen=True)
class PartEntry:
    """One committed part: its file name, rows, size, sha256, and records it could not store."""

    name: str
    rows: int
    bytes: int
    sha256: str
    rejected: int = 0


def file_digest(path: Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex digest) of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _entries_digest(parts: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_manifest(folder: Path) -> list[PartEntry] | None:
    """The committed parts of the buffer at `folder`, or None when it has no manifest.

    Raises:
        BufferCorruptError: the manifest is not valid JSON, not this format, or fails its own checksum.
    """
    path = folder / MANIFEST_NAME
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as error:
        raise _manifest_error(path, f"it is not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise _manifest_error(path, f"it is not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("parts"), list):
        raise _manifest_error(path, f"it is not an {_FORMAT} manifest")
    if data.get("version") != _VERSION:
        raise _manifest_error(path, f"version {data.get('version')!r} is not {_VERSION}; upgrade optima if newer")
    if data.get("sha256") != _entries_digest(data["parts"]):
        raise _manifest_error(path, "its entries do not match its own checksum")
    try:
        return [PartEntry(**entry) for entry in data["parts"]]
    except TypeError as error:
        raise _manifest_error(path, f"an entry is malformed ({error})") from None


def _manifest_error(path: Path, why: str) -> BufferCorruptError:
    return BufferCorruptError(
        f"{path} is damaged: {why}. The buffer's parts cannot be checked without it; restore it from a "
        f"backup, or, if you trust the part files as they are, rebuild it with "
        f"optima_train.buffers.rebuild_manifest({str(path.parent)!r})")


def write_manifest(folder: Path, entries: list[PartEntry]) -> None:
    """Replace the manifest atomically (temp file, fsync, rename)."""
    parts = [asdict(e) for e in entries]
    data = {"format": _FORMAT, "version": _VERSION, "parts": parts, "sha256": _entries_digest(parts)}
    atomic_write_text(folder / MANIFEST_NAME, json.dumps(data, indent=1))


def add_part(folder: Path, entry: PartEntry) -> None:
    """Append `entry` to the manifest under the buffer's lock (creating the manifest if needed)."""
    from filelock import FileLock

    with FileLock(str(folder / _LOCK_NAME)):
        entries = read_manifest(folder) or []
        write_manifest(folder, [*entries, entry])


def check_columns(schema: pa.Schema, where: Path, expected: pa.Schema = EPISODE_SCHEMA) -> None:
    """Raises BufferCorruptError unless `schema` has every column of `expected` (the episode schema
    of the file's version) with its type."""
    problems = []
    for field in expected:
        index = schema.get_field_index(field.name)
        if index < 0:
            problems.append(f"column {field.name!r} is missing")
        elif not schema.field(index).type.equals(field.type):
            problems.append(f"column {field.name!r} is {schema.field(index).type}, expected {field.type}")
    extra = [name for name in schema.names if expected.get_field_index(name) < 0]
    if extra:
        problems.append(f"unknown column(s) {extra}")
    if problems:
        raise BufferCorruptError(f"{where} does not have the episode schema: {'; '.join(problems)}. It was not "
                                 f"written by optima_train.buffers.write_episodes; rewrite it with that function")
