"""What identifies the data a task reads: the content of its files, never where they are.

The same files anywhere, named by `data_dir`, `data_files` or `$OPTIMA_DATA_DIR`, are one data
set, so a result keyed by it (a leaderboard cell) is found again on any machine and under any
path.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["content_digest", "data_identity", "side_folder"]


def content_digest(path: Path) -> str:
    """sha256 of a file's bytes, read once per process for each (file, size, modification time):
    a board of many cells on one model reads its weights once."""
    stat = path.stat()
    return _digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def side_folder(source: Any) -> Path | None:
    """The folder a source reads per question beside its data files (TriviaQA's evidence), if it exists."""
    side = getattr(source, "evidence_dir", None)
    return side if isinstance(side, Path) and side.is_dir() else None


def data_identity(source: Any) -> tuple[dict[str, Any] | None, tuple[Path, ...]]:
    """What identifies the data a task's source reads, and the local files it reads.

    Local files are keyed by their sizes and content digests in the order the source reads them
    (which instance an index picks), not by their names or folder. A side folder the source
    reads per question (TriviaQA's evidence) adds each file's path inside it, size and digest. A
    hub dataset is its id, config and split. A task that generates its questions: (None, ())."""
    from optima_envs.data.common import DatasetSource

    if not isinstance(source, DatasetSource):
        return None, ()
    if source.files is None:
        return {"hub": [source.hub_id, source.hub_config(), source.hub_split()]}, ()
    entries: list[Any] = [(p.stat().st_size, content_digest(p)) for p in source.files]
    identity: dict[str, Any] = {"files": len(entries)}
    side = side_folder(source)
    if side is not None:
        found = sorted(p for p in side.rglob("*") if p.is_file())
        entries.append([(p.relative_to(side).as_posix(), p.stat().st_size, content_digest(p)) for p in found])
        identity["side_files"] = len(found)
    identity["sha256"] = hashlib.sha256(json.dumps(entries).encode("utf-8")).hexdigest()
    return identity, tuple(source.files)
