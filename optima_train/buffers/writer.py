"""Episode buffers on disk: a directory of immutable Parquet part files.

Layout: `<dir>/part-00000.parquet`, `<dir>/part-00001.parquet`, ... Each `write_episodes` call
(or `EpisodeWriter.flush`) adds one new part; nothing is ever rewritten, so appending across
runs is just writing more parts, and the buffer is the set of parts (read in part-number order).

Atomicity: a part is written to a hidden temp file in the same directory
(`.part-00003.parquet.tmp-<random>`), flushed and fsynced, then published under its final name
with `os.link` (an atomic rename that fails instead of overwriting, so two writers appending at
once take different numbers) and the directory is fsynced. A process killed mid-write leaves at
most a hidden temp file, which neither `read_episodes` nor `datasets` (which skips hidden files
and which we point at `part-*.parquet`) ever reads. Such leftovers are harmless; delete them
with `remove_temp_files` when no writer is running.

Why no manifest: the directory listing already is the list of complete parts, so there is no
second file to keep in step with it (and nothing to repair after a kill between two renames).
Per-part metadata (schema version, creation time, anything the caller passes, e.g. the run's
command line) lives in each file's Parquet key-value metadata (`read_part_metadata`).

Read it back with `read_episodes(dir)` (EpisodeRecords), or as a Hugging Face dataset with
`load_episode_dataset(dir)`, which is `datasets.load_dataset("parquet", data_files=[parts])`.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow.parquet as pq

from optima_agents.rollout.records import EpisodeRecord
from optima_train.buffers.schema import SCHEMA_VERSION_KEY, records_to_table, table_to_records

__all__ = ["PART_GLOB", "EpisodeWriter", "list_parts", "load_episode_dataset", "read_episodes",
           "read_part_metadata", "remove_temp_files", "write_episodes"]

PART_GLOB = "part-*.parquet"
_PART_RE = re.compile(r"^part-(\d+)\.parquet$")
_META_KEY = b"optima.metadata"


def list_parts(directory: str | Path) -> list[Path]:
    """The published part files of a buffer, in part-number order (empty if there are none)."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _PART_RE.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


def write_episodes(directory: str | Path, records: Iterable[EpisodeRecord], *,
                   metadata: Mapping[str, Any] | None = None) -> Path | None:
    """Append `records` to the buffer at `directory` as one new part, atomically.

    Args:
        directory: the buffer directory (created if missing).
        records: the episodes; nothing is written when there are none.
        metadata: JSON-serialisable data stored in the part's Parquet metadata.

    Returns:
        The published part's path, or None when `records` was empty.
    """
    records = list(records)
    if not records:
        return None
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    table = records_to_table(records)
    extra = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **dict(metadata or {})}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), _META_KEY: json.dumps(extra).encode()})
    number = _next_number(folder)
    tmp = folder / f".part-{number:05d}.parquet.tmp-{secrets.token_hex(4)}"
    try:
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh, compression="zstd")
            fh.flush()
            os.fsync(fh.fileno())
        final = _publish(tmp, folder, number)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(folder)
    return final


def read_episodes(path: str | Path) -> list[EpisodeRecord]:
    """Every record of a buffer directory (parts in order), or of one Parquet file.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: a part was written with a newer schema version.
    """
    target = Path(path)
    if target.is_file():
        return table_to_records(pq.read_table(target))
    if not target.is_dir():
        raise FileNotFoundError(f"no episode buffer at {target} (expected a directory of {PART_GLOB} files)")
    records: list[EpisodeRecord] = []
    for part in list_parts(target):
        records.extend(table_to_records(pq.read_table(part)))
    return records


def read_part_metadata(part: str | Path) -> dict[str, Any]:
    """A part's schema version and the metadata given to `write_episodes`."""
    meta = pq.read_schema(part).metadata or {}
    out = json.loads(meta.get(_META_KEY, b"{}"))
    out["schema_version"] = int(meta.get(SCHEMA_VERSION_KEY, b"0"))
    return out


def load_episode_dataset(directory: str | Path, **kwargs: Any) -> Any:
    """The buffer as a Hugging Face `datasets.Dataset` (one row per episode).

    Raises:
        FileNotFoundError: the directory holds no parts.
    """
    import datasets

    parts = list_parts(directory)
    if not parts:
        raise FileNotFoundError(f"no {PART_GLOB} files in {directory}")
    return datasets.load_dataset("parquet", data_files=[str(p) for p in parts], split="train", **kwargs)


def remove_temp_files(directory: str | Path) -> list[Path]:
    """Delete temp files left by killed writers. Only call it when no writer is running."""
    removed = [p for p in Path(directory).glob(".part-*.parquet.tmp-*") if p.is_file()]
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


class EpisodeWriter:
    """Collects records and appends them as parts, every `flush_every` records and on close.

    Args:
        directory: the buffer directory.
        flush_every (int, *optional*): write a part whenever this many records are pending
            (None: only on `flush`/close). Smaller parts lose less to a crash.
        metadata (dict, *optional*): stored in every part written.

    Used as a context manager it flushes on a normal exit; after an exception the pending
    records are dropped (already written parts stay).
    """

    def __init__(self, directory: str | Path, *, flush_every: int | None = None,
                 metadata: Mapping[str, Any] | None = None):
        if flush_every is not None and flush_every < 1:
            raise ValueError(f"flush_every must be >= 1 or None, got {flush_every}")
        self.directory = Path(directory)
        self.flush_every = flush_every
        self.metadata = dict(metadata or {})
        self.parts: list[Path] = []
        self._pending: list[EpisodeRecord] = []

    def add(self, record: EpisodeRecord) -> None:
        self._pending.append(record)
        if self.flush_every is not None and len(self._pending) >= self.flush_every:
            self.flush()

    def extend(self, records: Iterable[EpisodeRecord]) -> None:
        for record in records:
            self.add(record)

    def flush(self) -> Path | None:
        """Write the pending records as one part (None when nothing was pending)."""
        part = write_episodes(self.directory, self._pending, metadata=self.metadata)
        self._pending = []
        if part is not None:
            self.parts.append(part)
        return part

    def __enter__(self) -> "EpisodeWriter":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.flush()


def _next_number(folder: Path) -> int:
    parts = list_parts(folder)
    return int(_PART_RE.match(parts[-1].name).group(1)) + 1 if parts else 0  # type: ignore[union-attr]


def _publish(tmp: Path, folder: Path, number: int) -> Path:
    """Give `tmp` the first free final name from `number` on, never overwriting a part."""
    while True:
        final = folder / f"part-{number:05d}.parquet"
        try:
            os.link(tmp, final)
            return final
        except FileExistsError:
            number += 1
        except OSError as exc:  # a filesystem without hard links: rename (atomic, but may race)
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            if final.exists():
                number += 1
                continue
            os.replace(tmp, final)
            return final


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
