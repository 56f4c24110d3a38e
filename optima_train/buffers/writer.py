"""Episode buffers on disk: a directory of immutable Parquet part files and a manifest.

Layout: `<dir>/part-00000.parquet`, `<dir>/part-00001.parquet`, ... and `<dir>/.manifest.json`.
Each `write_episodes` call (or `EpisodeWriter.flush`) adds one new part; nothing is ever
rewritten, so appending across runs is just writing more parts, and the buffer is the set of
parts the manifest lists (read in part-number order).

Atomicity: a part is written to a hidden temp file in the same directory
(`.part-00003.parquet.tmp-<random>`), flushed and fsynced, then published under its final name
with `os.link` (an atomic rename that fails instead of overwriting, so two writers appending at
once take different numbers); then its entry (rows, size, sha256) is added to the manifest,
which is replaced atomically under a file lock (`optima_train.buffers.manifest`). A process
killed mid-write leaves at most a hidden temp file, or a published part the manifest does not
list; readers ignore both (the second with a warning). Delete such leftovers with
`remove_temp_files` when no writer is running.

Integrity: `read_episodes` and `load_episode_dataset` check every part against the manifest
(present, same size and sha256, the schema's column types, the row count) and raise
`BufferCorruptError` naming the damaged file; a buffer with parts but no manifest is refused
too (`rebuild_manifest` builds one for buffers written before manifests existed). Per-part
metadata (schema version, creation time, anything the caller passes, e.g. the run's command line)
lives in each file's Parquet key-value metadata (`read_part_metadata`).

Records that cannot be stored (text UTF-8 cannot encode, a number too large for its column) do
not cost the others: the rest are written, and the rejected ones are kept as escaped JSON lines
in `<dir>/.rejected/<part>.jsonl` with the reason, and reported with a `BufferWarning`.

Read it back with `read_episodes(dir)` (EpisodeRecords), or as a Hugging Face dataset with
`load_episode_dataset(dir)`, which is `datasets.load_dataset("parquet", data_files=[parts])`.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from optima_agents.rollout.records import EpisodeRecord
from optima_train.buffers.manifest import (
    MANIFEST_NAME,
    REJECTED_DIR,
    BufferCorruptError,
    BufferWarning,
    PartEntry,
    add_part,
    file_digest,
    read_manifest,
)
from optima_train.buffers.reader import part_files, part_number
from optima_train.buffers.schema import records_to_table

__all__ = ["EpisodeWriter", "write_episodes"]

_META_KEY = b"optima.metadata"
#: What converting a record to the schema raises for a value it cannot store.
_UNSTORABLE = (ValueError, TypeError, OverflowError, pa.ArrowException)


def write_episodes(directory: str | Path, records: Iterable[EpisodeRecord], *,
                   metadata: Mapping[str, Any] | None = None) -> Path | None:
    """Append `records` to the buffer at `directory` as one new part, atomically.

    A record that cannot be stored (e.g. text UTF-8 cannot encode) is left out, kept in
    `<directory>/.rejected/` and reported with a `BufferWarning`; the others are written. When
    no record can be stored, no part is written and the manifest is left as it was.

    Args:
        directory: the buffer directory (created if missing).
        records: the episodes; nothing is written when there are none.
        metadata: JSON-serialisable data stored in the part's Parquet metadata.

    Returns:
        The published part's path, or None when no record was written.

    Raises:
        BufferCorruptError: the directory holds parts but no readable manifest (appending would
            hide them); see `rebuild_manifest`.
    """
    records = list(records)
    if not records:
        return None
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    _check_appendable(folder)
    table, rejected = _table_of(records)
    final = None
    if table is not None:
        extra = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **dict(metadata or {})}
        if rejected:
            extra["rejected"] = len(rejected)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), _META_KEY: json.dumps(extra).encode()})
        final = _write_part(folder, table, len(rejected))
    if rejected:
        _report_rejected(folder, final, rejected, len(records))
    return final


def _check_appendable(folder: Path) -> None:
    if read_manifest(folder) is None and part_files(folder):
        raise BufferCorruptError(
            f"{folder} holds part files but no {MANIFEST_NAME}, so a new part would hide them from readers. "
            f"If you trust them, build the manifest first: optima_train.buffers.rebuild_manifest({str(folder)!r})")


def _table_of(records: list[EpisodeRecord]) -> tuple[pa.Table | None, list[tuple[int, EpisodeRecord, str]]]:
    """The table of every storable record, and (position, record, why) for the others."""
    try:
        return records_to_table(records), []
    except _UNSTORABLE:
        pass
    kept, rejected = [], []
    for position, record in enumerate(records):
        try:
            records_to_table([record])
        except _UNSTORABLE as error:
            rejected.append((position, record, f"{type(error).__name__}: {error}"))
            continue
        kept.append(record)
    return (records_to_table(kept) if kept else None), rejected


def _write_part(folder: Path, table: pa.Table, rejected: int) -> Path:
    """Write, fsync and publish one part, then commit it to the manifest."""
    number = _next_number(folder)
    tmp = folder / f".part-{number:05d}.parquet.tmp-{secrets.token_hex(4)}"
    try:
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh, compression="zstd")
            fh.flush()
            os.fsync(fh.fileno())
        size, sha256 = file_digest(tmp)
        final = _publish(tmp, folder, number)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(folder)
    add_part(folder, PartEntry(name=final.name, rows=table.num_rows, bytes=size, sha256=sha256, rejected=rejected))
    _fsync_dir(folder)
    return final


def _report_rejected(folder: Path, part: Path | None, rejected: list[tuple[int, EpisodeRecord, str]],
                     total: int) -> None:
    """Keep the records that could not be stored as ASCII JSON lines (lone surrogates escaped) and warn."""
    name = part.stem if part is not None else f"unwritten-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    path = folder / REJECTED_DIR / f"{name}.jsonl"
    path.parent.mkdir(exist_ok=True)
    with open(path, "w", encoding="ascii") as fh:
        for position, record, why in rejected:
            line = {"position": position, "error": why, "record": record.to_dict()}
            fh.write(json.dumps(line, ensure_ascii=True) + "\n")
    first_position, first, why = rejected[0]
    written = f"wrote {total - len(rejected)} of {total} records to {part}" if part else \
        f"wrote none of {total} records"
    warnings.warn(
        f"{written}: {len(rejected)} could not be stored, e.g. record {first_position} ({first.env_id} seed "
        f"{first.seed}, instance {first.instance_id!r}): {why}. They are kept as JSON lines in {path}",
        BufferWarning, stacklevel=3)


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
        """Write the pending records as one part (None when nothing was written)."""
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
    parts = part_files(folder)
    return part_number(parts[-1]) + 1 if parts else 0


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
