"""Files written whole or not at all: a reader, or a process started after a kill, sees either
the old file (or folder) or the whole new one, never a part.

    atomic_write_json(run / "summary.json", rows)
    with atomic_dir(run / "checkpoint") as tmp:   # fill tmp; it replaces the folder on success
        model.save_pretrained(tmp)

Each write goes to a temporary name in the target's own folder (so the rename stays on one file
system) and is renamed into place. This module sits at the bottom of the package stack so every
layer (training runs, leaderboard cells and reports, buffers) writes its files the same way.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

__all__ = ["atomic_dir", "atomic_write_bytes", "atomic_write_json", "atomic_write_parquet", "atomic_write_text"]


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, data: Any) -> None:
    """Write `data` as strict JSON: a NaN or infinite float (the mean of no values) is written as
    null, since `NaN` is not JSON and breaks `jq`, JavaScript and other strict readers."""
    text = json.dumps(_finite(data), indent=2, sort_keys=False, default=str, allow_nan=False)
    atomic_write_text(path, text + "\n")


def _finite(data: Any) -> Any:
    """`data` with every non-finite float replaced by None, through dicts, lists and tuples."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, Mapping):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(value) for value in data]
    return data


def atomic_write_parquet(path: str | Path, rows: Sequence[Mapping[str, Any]], schema: Any) -> Path:
    """Write `rows` as one Parquet table of `schema` (a pyarrow schema) atomically: a reader sees
    the old file or the whole new one, never a part (the table is built in memory first)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist([dict(r) for r in rows], schema=schema), sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    return Path(path)


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
