"""Per-token log-probs in episode buffers: stored exactly, and buffers of schema version 1 (before
the field existed) still read, alone or appended to by the current version."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from optima_agents.policies import Action, ScriptedPolicy
from optima_agents.rollout import EpisodeRecord, rollout
from optima_train.buffers import (
    SCHEMA_VERSION,
    BufferCorruptError,
    load_episode_dataset,
    read_episodes,
    records_to_table,
    row_to_record,
    verify_buffer,
    write_episodes,
)
from optima_train.buffers.manifest import PartEntry, add_part, file_digest
from optima_train.buffers.schema import SCHEMA_VERSION_KEY, episode_schema, file_schema_version


def _script(with_logprobs: bool):
    def script(observation):
        ids = tuple(range(20, 23 + observation["turn"]))
        # Values that float32 would round: the buffer must give back exactly these.
        logprobs = tuple(-0.1 * (k + 1) - 1e-12 for k in range(len(ids))) if with_logprobs else None
        return Action(text=f"turn {observation['turn']} <A>Kelo</A>", token_ids=ids, logprobs=logprobs)
    return script


@pytest.fixture(scope="module")
def with_logprobs() -> list[EpisodeRecord]:
    return rollout("synth-hop-ia", ScriptedPolicy(_script(True)), 3, env_kwargs={"max_turns": 3}, progress=False)


@pytest.fixture(scope="module")
def without() -> list[EpisodeRecord]:
    return rollout("synth-hop-ia", ScriptedPolicy(_script(False)), 3, env_kwargs={"max_turns": 3}, progress=False)


def write_v1_part(folder: Path, records: list[EpisodeRecord], number: int = 0, *, metadata: bool = True) -> Path:
    """A part as schema version 1 wrote it (turns without `logprobs`), committed to the manifest."""
    rows = records_to_table(records).to_pylist()
    for row in rows:
        row["schema_version"] = 1
        for turn in row["turns"]:
            assert turn.pop("logprobs") is None
    table = pa.Table.from_pylist(rows, schema=episode_schema(1))
    if not metadata:
        table = table.replace_schema_metadata(None)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{number:05d}.parquet"
    pq.write_table(table, path)
    size, sha256 = file_digest(path)
    add_part(folder, PartEntry(name=path.name, rows=len(rows), bytes=size, sha256=sha256))
    return path


class TestStored:
    def test_round_trip_is_exact(self, with_logprobs, tmp_path):
        part = write_episodes(tmp_path / "buf", with_logprobs)
        assert any(t.logprobs for r in with_logprobs for t in r.turns)
        assert read_episodes(part) == with_logprobs
        dataset = load_episode_dataset(tmp_path / "buf", cache_dir=str(tmp_path / "hf"))
        assert [row_to_record(row) for row in dataset] == with_logprobs
        assert pq.read_schema(part).metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode()

    def test_absent_logprobs_are_null(self, without, tmp_path):
        part = write_episodes(tmp_path / "buf", without)
        turns = pq.read_table(part).column("turns").to_pylist()
        assert all(t["logprobs"] is None for episode in turns for t in episode)
        assert read_episodes(part) == without


class TestOlderVersion:
    def test_a_version_1_buffer_reads_as_none(self, without, tmp_path):
        write_v1_part(tmp_path / "old", without)
        assert [e.rows for e in verify_buffer(tmp_path / "old")] == [3]
        assert read_episodes(tmp_path / "old") == without

    def test_appending_to_it_gives_one_buffer(self, without, with_logprobs, tmp_path):
        folder = tmp_path / "mixed"
        write_v1_part(folder, without)
        write_episodes(folder, with_logprobs)
        assert read_episodes(folder) == [*without, *with_logprobs]
        dataset = load_episode_dataset(folder, cache_dir=str(tmp_path / "hf"))
        assert [row_to_record(row) for row in dataset] == [*without, *with_logprobs]

    def test_a_part_without_version_metadata_is_known_by_its_columns(self, without, tmp_path):
        path = write_v1_part(tmp_path / "bare", without, metadata=False)
        assert file_schema_version(pq.read_schema(path)) == 1
        assert read_episodes(tmp_path / "bare") == without
        bare = records_to_table(without).replace_schema_metadata(None)
        assert file_schema_version(bare.schema) == SCHEMA_VERSION

    def test_a_version_1_part_with_a_current_column_is_refused(self, with_logprobs, tmp_path):
        """The version in the metadata decides the columns a part must have."""
        table = records_to_table(with_logprobs)
        table = table.replace_schema_metadata({**table.schema.metadata, SCHEMA_VERSION_KEY: b"1"})
        folder = tmp_path / "lying"
        folder.mkdir()
        pq.write_table(table, folder / "part-00000.parquet")
        size, sha256 = file_digest(folder / "part-00000.parquet")
        add_part(folder, PartEntry(name="part-00000.parquet", rows=3, bytes=size, sha256=sha256))
        found, expected = r"list<.*logprobs: list<.*>>>", r"list<.*truncated: bool not null>>\. It was not"
        with pytest.raises(BufferCorruptError, match=rf"column 'turns' is {found}, expected {expected}"):
            read_episodes(folder)

    def test_a_newer_version_says_upgrade(self, without, tmp_path):
        table = records_to_table(without)
        newer = str(SCHEMA_VERSION + 1).encode()
        table = table.replace_schema_metadata({**table.schema.metadata, SCHEMA_VERSION_KEY: newer})
        folder = tmp_path / "future"
        folder.mkdir()
        pq.write_table(table, folder / "part-00000.parquet")
        size, sha256 = file_digest(folder / "part-00000.parquet")
        add_part(folder, PartEntry(name="part-00000.parquet", rows=3, bytes=size, sha256=sha256))
        with pytest.raises(BufferCorruptError, match=f"version {SCHEMA_VERSION + 1} is newer than .*upgrade optima"):
            read_episodes(folder)

    def test_schema_versions_differ_only_in_the_turn_logprobs(self):
        old, new = episode_schema(1), episode_schema()
        assert old.names == new.names
        changed = [n for n in new.names if not old.field(n).type.equals(new.field(n).type)]
        assert changed == ["turns"]
        new_turn = new.field("turns").type.value_type
        assert [f.name for f in new_turn] == [*(f.name for f in old.field("turns").type.value_type), "logprobs"]
        assert new_turn.field("logprobs").type == pa.list_(pa.float64())

