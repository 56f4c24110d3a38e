"""Records an episode buffer cannot store (one for each kind of value its columns refuse), and
what to look at after writing them: the buffer folder's files, and the records `write_episodes`
kept aside in `.rejected/`.

Optima's buffer tests and its reliability benchmark's buffer probe both use these, so both try the
same hostile records and check them the same way; code that writes buffers of its own can too.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from optima_agents.rollout import EpisodeRecord

__all__ = ["UNSTORABLE", "buffer_files", "rejected_records"]


def _first_turn(record: EpisodeRecord, **changes: Any) -> EpisodeRecord:
    """`record` with its first turn changed (the record must have a turn)."""
    first, *rest = record.turns
    return dataclasses.replace(record, turns=(dataclasses.replace(first, **changes), *rest))


#: Why a record cannot be stored -> how to make such a record from a good one.
UNSTORABLE: dict[str, Callable[[EpisodeRecord], EpisodeRecord]] = {
    "lone surrogate in a turn's text": lambda r: _first_turn(r, text="broken \ud800 text"),
    "lone surrogate in format_instruction": lambda r: dataclasses.replace(r, format_instruction="\udc80"),
    "token id 2**31": lambda r: _first_turn(r, token_ids=(2**31,), logprobs=None),
}


def buffer_files(folder: Path) -> dict[str, bytes]:
    """Every file of a buffer folder (its parts, manifest, lock) with its bytes; not the rejected
    records, which live in a subfolder."""
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def rejected_records(sidecar: Path) -> list[EpisodeRecord]:
    """The records a `.rejected/` file keeps, in order.

    Raises:
        ValueError: a line does not say why its record was rejected.
    """
    lines = [json.loads(line) for line in sidecar.read_text(encoding="ascii").splitlines()]
    if not all(line.get("error") for line in lines):
        raise ValueError(f"{sidecar}: a rejected record without the reason")
    return [EpisodeRecord.from_dict(line["record"]) for line in lines]
