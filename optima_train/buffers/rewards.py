"""Rewards beside an episode buffer: a side table of reward components keyed by episode.

A scoring step reads the episodes its generation step sampled and writes what it computed (the
reward and every component it was combined from, and what a loop adds, such as GRPO's advantage)
to one small Parquet file in its own folder; the buffer stays as sampled and is never written a
second time. Readers attach the table to the buffer's records (`attach_rewards`).

An episode's id is its position in its buffer (committed parts in order): buffers are
append-only, so the position never changes. Each row also keeps the episode's `instance_id` and
`seed`, and attaching checks them, so a table never lands on another buffer's episodes.

Columns: `episode` (int64, not null), `instance_id` (string, not null), `seed` (int64), and
`components` (list<struct<name string, value float64>>, not null), named as in
`EpisodeRecord.reward_components` (a value is null where the scorer gave none, e.g. the reward of
an excluded episode).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import pyarrow as pa

from optima_agents.rollout.records import EpisodeRecord
from optima_envs.atomic_files import atomic_write_parquet
from optima_train.buffers.manifest import BufferCorruptError
from optima_train.buffers.schema import COMPONENT_TYPE

__all__ = ["REWARDS_FILE", "REWARDS_SCHEMA", "EpisodeRewards", "attach_rewards", "read_rewards", "write_rewards"]

#: The side table's file name, in the folder of the step that scored the episodes.
REWARDS_FILE = "rewards.parquet"

REWARDS_SCHEMA = pa.schema([
    pa.field("episode", pa.int64(), nullable=False),
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("seed", pa.int64()),
    pa.field("components", pa.list_(COMPONENT_TYPE), nullable=False),
])


@dataclass(frozen=True)
class EpisodeRewards:
    """The reward components of the episode at position `episode` of its buffer."""

    episode: int
    instance_id: str
    seed: int | None
    components: Mapping[str, float | None] = field(default_factory=dict)

    @classmethod
    def of(cls, episode: int, record: EpisodeRecord, components: Mapping[str, Any]) -> "EpisodeRewards":
        """The row for `record`, at position `episode`, with `components` as floats (None kept)."""
        values = {str(k): None if v is None else float(v) for k, v in components.items()}
        return cls(episode, record.instance_id, record.seed, values)

    def to_row(self) -> dict[str, Any]:
        return {"episode": self.episode, "instance_id": self.instance_id, "seed": self.seed,
                "components": [{"name": k, "value": v} for k, v in self.components.items()]}


def write_rewards(path: str | Path, rows: Sequence[EpisodeRewards]) -> Path:
    """The rows as one Parquet table of `REWARDS_SCHEMA`, written atomically."""
    return atomic_write_parquet(path, [r.to_row() for r in rows], REWARDS_SCHEMA)


def read_rewards(path: str | Path) -> list[EpisodeRewards]:
    """The rows of a table `write_rewards` wrote.

    Raises:
        FileNotFoundError: no such file.
        BufferCorruptError: the file does not have the rewards schema.
    """
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    missing = [name for name in REWARDS_SCHEMA.names if name not in table.schema.names]
    if missing:
        raise BufferCorruptError(f"{path} is not a rewards table: column(s) {missing} are missing. It was not "
                                 "written by optima_train.buffers.write_rewards")
    return [EpisodeRewards(int(row["episode"]), row["instance_id"], row["seed"],
                           {c["name"]: c["value"] for c in row["components"]}) for row in table.to_pylist()]


def attach_rewards(records: Sequence[EpisodeRecord], rewards: Sequence[EpisodeRewards]) -> list[EpisodeRecord]:
    """`records` (a whole buffer, in order) with each episode's table components added to its
    `reward_components`; episodes the table does not list keep theirs.

    Raises:
        BufferCorruptError: a row names an episode the buffer does not have, or one whose instance
            or seed differs (the table belongs to another buffer).
    """
    out = list(records)
    for row in rewards:
        if not 0 <= row.episode < len(out):
            raise BufferCorruptError(f"the rewards table names episode {row.episode}, but the buffer holds "
                                     f"{len(out)} episodes: it was written for another buffer")
        record = out[row.episode]
        if (record.instance_id, record.seed) != (row.instance_id, row.seed):
            raise BufferCorruptError(
                f"the rewards table's episode {row.episode} is instance {row.instance_id!r} seed {row.seed}, the "
                f"buffer's is {record.instance_id!r} seed {record.seed}: it was written for another buffer")
        out[row.episode] = replace(record, reward_components={**record.reward_components, **row.components})
    return out
