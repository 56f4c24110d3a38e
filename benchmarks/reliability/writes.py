"""Probe (c), writes and empty folders: batches with records a buffer cannot store, and folders
that hold no buffer.

Unstorable records (`optima_train.buffers.testing`: a lone surrogate in a turn's text or in
`format_instruction`, a token id of 2**31), written alone or two at a time, to a new folder and
to an existing buffer: it holds when nothing is written (no part, the folder's files unchanged),
the call returns None, and a `BufferWarning` names the `.rejected/` file that gives back every
record. Beside good records: the good ones read back and only the bad one is kept aside.

Folders that hold no buffer (empty; other files only; only rejected records; only a killed
writer's temp file): reading or verifying one holds when it raises `BufferCorruptError` naming
the folder; a buffer whose manifest lists no parts holds when it reads as no episodes.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

from benchmarks.reliability.tally import Tally


def _episodes(count: int) -> list[Any]:
    """`count` scripted synth-hop episodes."""
    from optima_agents.policies import ScriptedPolicy
    from optima_agents.rollout import rollout

    return rollout("synth-hop-ia", ScriptedPolicy(lambda o: f"turn {o['turn']} <A>Kelo</A>"), count,
                   env_kwargs={"max_turns": 3}, progress=False)


def _write(folder: Path, batch: list[Any]) -> tuple[Path | None, list[str]]:
    """Write `batch`; the part written and every BufferWarning message."""
    from optima_train.buffers import BufferWarning, write_episodes

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        part = write_episodes(folder, batch)
    return part, [str(w.message) for w in caught if issubclass(w.category, BufferWarning)]


def _sidecar_verdict(folder: Path, messages: list[str], bad: list[Any]) -> str | None:
    """Why the rejected records were not kept and reported (None: they were)."""
    from optima_train.buffers.manifest import REJECTED_DIR
    from optima_train.buffers.testing import rejected_records

    sidecars = sorted((folder / REJECTED_DIR).glob("*.jsonl"))
    if len(sidecars) != 1:
        return f"{len(sidecars)} files in {REJECTED_DIR}/, expected 1"
    if rejected_records(sidecars[0]) != bad:
        return "the rejected records do not read back as written"
    if not any(str(sidecars[0]) in m for m in messages):
        return f"no BufferWarning names {sidecars[0]}"
    return None


def _only_unstorable(folder: Path, bad: list[Any], existing: list[Any]) -> str | None:
    """Why writing a batch of only unstorable records broke the contract (None: it kept it)."""
    from optima_train.buffers import read_episodes, write_episodes
    from optima_train.buffers.testing import buffer_files

    if existing:
        write_episodes(folder, existing)
    before = buffer_files(folder)
    part, messages = _write(folder, bad)
    if part is not None:
        return f"wrote {part.name}"
    if buffer_files(folder) != before:
        return "the buffer's files changed"
    if existing and read_episodes(folder) != existing:
        return "the existing records read back differently"
    return _sidecar_verdict(folder, messages, bad)


def _beside_good(folder: Path, good: list[Any], bad: Any) -> str | None:
    """Why a batch of good records and one unstorable record broke the contract (None: it kept it)."""
    from optima_train.buffers import read_episodes

    part, messages = _write(folder, [good[0], bad, *good[1:]])
    if part is None:
        return "no part was written"
    if read_episodes(folder) != good:
        return "the good records read back differently"
    return _sidecar_verdict(folder, messages, [bad])


def _judge(row: Tally, what: str, trial: Callable[[], str | None]) -> None:
    """Run one trial; any exception is a failure to report (the probe's point)."""
    try:
        why = trial()
    except Exception as error:  # the probe's point: anything unexpected is a failure
        why = f"{type(error).__name__}: {error}"
    row.check(why is None, f"{what}: {why}")


def unstorable_rows(workdir: Path) -> list[Tally]:
    """Every kind of unstorable record: alone or in pairs, new folder or existing buffer; and beside good ones."""
    from optima_train.buffers.testing import UNSTORABLE

    records = _episodes(4)
    alone = Tally("c", "buffer: batch of only unstorable records")
    mixed = Tally("c", "buffer: unstorable record beside good ones")
    for k, (kind, make) in enumerate(sorted(UNSTORABLE.items())):
        for existing in ([], records[3:]):
            for size in (1, 2):
                folder = workdir / f"unstorable-{k}-{len(existing)}-{size}"
                bad = [make(r) for r in records[:size]]
                where = "an existing buffer" if existing else "a new folder"
                _judge(alone, f"{size} x {kind} into {where}", lambda: _only_unstorable(folder, bad, existing))
        _judge(mixed, kind, lambda: _beside_good(workdir / f"mixed-{k}", records[:3], make(records[3])))
    return [alone, mixed]


def _fill(folder: Path, content: str) -> None:
    """Make `folder` hold `content` and nothing that is a buffer."""
    folder.mkdir(parents=True)
    if content == "other files":
        (folder / "notes.txt").write_text("not episodes")
        (folder / "sub").mkdir()
    elif content == "only rejected records":
        from optima_train.buffers.testing import UNSTORABLE

        _write(folder, [UNSTORABLE["token id 2**31"](_episodes(1)[0])])
    elif content == "only a temp file":
        (folder / ".part-00000.parquet.tmp-0a1b2c3d").write_bytes(b"PAR1")


def _refused(folder: Path, read: Callable[[Path], Any]) -> str | None:
    """Why reading a folder that holds no buffer did not raise a BufferCorruptError naming it."""
    from optima_train.buffers import BufferCorruptError

    try:
        read(folder)
    except BufferCorruptError as error:
        return None if f"{folder} holds no episode buffer" in str(error) else f"the error does not name it: {error}"
    return "it read as a buffer"


def no_buffer_rows(workdir: Path) -> list[Tally]:
    """Folders that hold no buffer are refused by every reader; a manifest listing no parts is an empty buffer."""
    from optima_train.buffers import read_episodes, rebuild_manifest, verify_buffer

    refused = Tally("c", "buffer: folder that holds no buffer")
    for k, content in enumerate(("nothing", "other files", "only rejected records", "only a temp file")):
        folder = workdir / f"not-a-buffer-{k}"
        _fill(folder, content)
        for read in (read_episodes, verify_buffer):
            _judge(refused, f"{read.__name__} on a folder with {content}", lambda: _refused(folder, read))
    empty = Tally("c", "buffer: manifest listing no parts")
    folder = workdir / "empty-buffer"
    folder.mkdir(parents=True)
    rebuild_manifest(folder)
    _judge(empty, "read_episodes", lambda: None if read_episodes(folder) == [] else "it read as records")
    return [refused, empty]


def run(workdir: Path) -> list[Tally]:
    return [*unstorable_rows(workdir), *no_buffer_rows(workdir)]
