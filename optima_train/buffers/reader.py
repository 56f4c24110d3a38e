"""Reading episode buffers back, every part checked against the manifest first.

See `optima_train.buffers.writer` for the layout and `optima_train.buffers.manifest` for what is
checked; every check failure is a `BufferCorruptError` that names the file at fault.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from optima_agents.rollout.records import EpisodeRecord
from optima_train.buffers.manifest import (
    MANIFEST_NAME,
    REJECTED_DIR,
    BufferCorruptError,
    BufferWarning,
    PartEntry,
    check_columns,
    file_digest,
    read_manifest,
    write_manifest,
)
from optima_train.buffers.schema import (
    EPISODE_SCHEMA,
    SCHEMA_VERSION_KEY,
    episode_schema,
    file_schema_version,
    table_to_records,
)

__all__ = ["PART_GLOB", "list_parts", "load_episode_dataset", "part_files", "read_episodes", "read_part_metadata",
           "rebuild_manifest", "remove_temp_files", "verify_buffer"]

PART_GLOB = "part-*.parquet"
_PART_RE = re.compile(r"^part-(\d+)\.parquet$")
_META_KEY = b"optima.metadata"


def part_number(path: Path) -> int:
    match = _PART_RE.match(path.name)
    if match is None:
        raise ValueError(f"{path.name!r} is not a part file name (part-NNNNN.parquet)")
    return int(match.group(1))


def part_files(folder: str | Path) -> list[Path]:
    """Every `part-N.parquet` file on disk, committed or not, in part-number order."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _PART_RE.match(p.name) and p.is_file()), key=part_number)


def _committed(folder: Path) -> list[tuple[Path, PartEntry]]:
    """The parts the manifest lists, with their entries; warns about parts it does not list.

    Raises:
        BufferCorruptError: part files but no manifest, or a damaged manifest.
    """
    entries = read_manifest(folder)
    on_disk = part_files(folder)
    if entries is None:
        if on_disk:
            raise BufferCorruptError(
                f"{folder} holds {len(on_disk)} part file(s) but no {MANIFEST_NAME}: it was deleted, or the buffer "
                f"was written before buffers had manifests. Without it a missing or damaged part cannot be "
                f"detected; if you trust the parts, run optima_train.buffers.rebuild_manifest({str(folder)!r})")
        return []
    listed = {e.name for e in entries}
    stray = [p.name for p in on_disk if p.name not in listed]
    if stray:
        warnings.warn(f"{folder}: ignored {stray}, not listed in {MANIFEST_NAME} (a writer was killed before "
                      f"committing them); remove_temp_files({str(folder)!r}) deletes them", BufferWarning, stacklevel=3)
    return sorted(((folder / e.name, e) for e in entries), key=lambda pair: part_number(pair[0]))


def list_parts(directory: str | Path) -> list[Path]:
    """The committed part files of a buffer (those its manifest lists), in part-number order."""
    folder = Path(directory)
    return [path for path, _ in _committed(folder)] if folder.is_dir() else []


def _check_part(path: Path, entry: PartEntry | None) -> pa.Table:
    """The part's table after checking it against its manifest entry (when there is one) and the schema."""
    if entry is not None:
        if not path.is_file():
            raise BufferCorruptError(f"{path} is missing: the manifest lists it with {entry.rows} rows. Restore it "
                                     f"from a backup, or delete the buffer and generate it again")
        size, sha256 = file_digest(path)
        if (size, sha256) != (entry.bytes, entry.sha256):
            raise BufferCorruptError(
                f"{path} is damaged: it has {size} bytes with sha256 {sha256[:16]}..., the manifest recorded "
                f"{entry.bytes} bytes with sha256 {entry.sha256[:16]}.... Restore it from a backup, or delete the "
                f"buffer and generate it again")
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as error:
        raise BufferCorruptError(f"{path} cannot be read as Parquet ({type(error).__name__}: {error})") from None
    try:
        expected = episode_schema(file_schema_version(schema))
    except ValueError as error:
        raise BufferCorruptError(f"{path}: {error}") from None
    check_columns(schema, path, expected)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        raise BufferCorruptError(f"{path} cannot be read as Parquet ({type(error).__name__}: {error})") from None
    if entry is not None and table.num_rows != entry.rows:
        raise BufferCorruptError(f"{path} has {table.num_rows} rows, the manifest recorded {entry.rows}")
    return table


def _records(path: Path, table: pa.Table) -> list[EpisodeRecord]:
    try:
        return table_to_records(table)
    except (ValueError, KeyError, TypeError) as error:
        raise BufferCorruptError(f"{path}: a row cannot be read back as an episode ({type(error).__name__}: "
                                 f"{error})") from None


def _entry_of(part: Path) -> PartEntry | None:
    """The manifest entry of a single part file, when its folder has a manifest listing it."""
    entries = read_manifest(part.parent) or []
    return next((e for e in entries if e.name == part.name), None)


def _require_buffer(folder: Path) -> None:
    """Refuse a path that is not a buffer directory: missing, or holding neither parts nor a
    manifest (an empty buffer has a manifest), so that a wrong path is never read as no data.

    Raises:
        FileNotFoundError: the path does not exist.
        BufferCorruptError: the folder exists but holds no buffer.
    """
    if not folder.is_dir():
        raise FileNotFoundError(f"no episode buffer at {folder} (expected a directory of {PART_GLOB} files)")
    if (folder / MANIFEST_NAME).exists() or part_files(folder):
        return
    rejected = _rejected_count(folder)
    kept = f"; its {REJECTED_DIR}/ keeps {rejected} record(s) that could not be stored" if rejected else ""
    raise BufferCorruptError(
        f"{folder} holds no episode buffer: no {PART_GLOB} files and no {MANIFEST_NAME}{kept}. "
        f"Check the path (a mistyped one reads as an empty folder), or run the step that writes "
        f"the buffer (e.g. optima rollout --out {str(folder)!r}) first")


def _rejected_count(folder: Path) -> int:
    """How many records `write_episodes` kept in `<folder>/.rejected/` because it could not store them."""
    kept = folder / REJECTED_DIR
    if not kept.is_dir():
        return 0
    return sum(len(path.read_bytes().splitlines()) for path in kept.glob("*.jsonl") if path.is_file())


def read_episodes(path: str | Path) -> list[EpisodeRecord]:
    """Every record of a buffer directory (committed parts in order), or of one Parquet file.

    A buffer whose manifest lists no parts reads as no records; a folder with neither parts nor
    a manifest is not a buffer (often a mistyped path) and is refused, so it never reads as one.

    Raises:
        FileNotFoundError: the path does not exist.
        BufferCorruptError: a missing or damaged part or manifest, or a column of the wrong type
            (the message names the file); also a part written with a newer schema version, and a
            folder that holds no buffer.
    """
    target = Path(path)
    if target.is_file():
        return _records(target, _check_part(target, _entry_of(target)))
    _require_buffer(target)
    records: list[EpisodeRecord] = []
    for part, entry in _committed(target):
        records.extend(_records(part, _check_part(part, entry)))
    return records


def verify_buffer(directory: str | Path) -> list[PartEntry]:
    """Check every committed part (present, checksum, column types, rows) without decoding rows.

    Raises:
        FileNotFoundError: no such directory.
        BufferCorruptError: the first problem found, naming its file; or the folder holds no
            buffer (neither parts nor a manifest).
    """
    folder = Path(directory)
    _require_buffer(folder)
    committed = _committed(folder)
    for part, entry in committed:
        _check_part(part, entry)
    return [entry for _, entry in committed]


def read_part_metadata(part: str | Path) -> dict[str, Any]:
    """A part's schema version and the metadata given to `write_episodes`."""
    meta = pq.read_schema(part).metadata or {}
    out = json.loads(meta.get(_META_KEY, b"{}"))
    out["schema_version"] = int(meta.get(SCHEMA_VERSION_KEY, b"0"))
    return out


def load_episode_dataset(directory: str | Path, **kwargs: Any) -> Any:
    """The buffer as a Hugging Face `datasets.Dataset` (one row per episode), parts checked first.

    Parts of an older schema version are cast to the current schema (a version 1 turn gets a null
    `logprobs`), so a buffer appended to across versions loads as one table; pass `features` to
    override.

    Raises:
        FileNotFoundError: the directory does not exist, or its manifest lists no parts.
        BufferCorruptError: see `verify_buffer`.
    """
    import datasets

    verify_buffer(directory)
    parts = list_parts(directory)
    if not parts:
        raise FileNotFoundError(f"no {PART_GLOB} files in {directory}")
    kwargs.setdefault("features", datasets.Features.from_arrow_schema(EPISODE_SCHEMA))
    return datasets.load_dataset("parquet", data_files=[str(p) for p in parts], split="train", **kwargs)


def remove_temp_files(directory: str | Path) -> list[Path]:
    """Delete what killed writers leave: temp files, and parts the manifest does not list. Only call
    it when no writer is running (a live writer's part is uncommitted for a moment)."""
    folder = Path(directory)
    removed = [p for p in folder.glob(".part-*.parquet.tmp-*") if p.is_file()]
    removed += [p for p in folder.glob(f"{MANIFEST_NAME}.*.tmp") if p.is_file()]
    entries = read_manifest(folder)
    if entries is not None:
        listed = {e.name for e in entries}
        removed += [p for p in part_files(folder) if p.name not in listed]
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


def rebuild_manifest(directory: str | Path) -> list[PartEntry]:
    """Write a manifest listing every part file in `directory` as it is now (after checking that
    each one reads with the episode schema): for buffers written before manifests existed, or to
    accept the parts as they are after a manifest was lost.

    Raises:
        BufferCorruptError: a part does not read, or has the wrong column types.
    """
    folder = Path(directory)
    entries = []
    for part in part_files(folder):
        table = _check_part(part, None)
        size, sha256 = file_digest(part)
        entries.append(PartEntry(name=part.name, rows=table.num_rows, bytes=size, sha256=sha256))
    write_manifest(folder, entries)
    return entries
