"""Per-token log-probs and plain system prompts in episode buffers: stored exactly, and buffers
of schema versions 1 and 2 (before those fields existed) still read, alone or appended to by the
current version."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from optima_agents.policies import Action, ScriptedPolicy
from optima_agents.rollout import EpisodeRecord, EpisodeSpec, rollout
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


def unrecorded(records: list[EpisodeRecord]) -> list[EpisodeRecord]:
    """`records` as a buffer of version 1 or 2 gives them back: without plain system prompts."""
    return [replace(r, plain_system_prompts=None) for r in records]


def write_old_part(folder: Path, records: list[EpisodeRecord], number: int = 0, *, metadata: bool = True,
                   version: int = 1) -> Path:
    """A part as schema version 1 (turns without `logprobs`) or 2 (no `plain_system_prompts`)
    wrote it, committed to the manifest."""
    rows = records_to_table(records).to_pylist()
    for row in rows:
        row["schema_version"] = version
        row.pop("plain_system_prompts")
        for turn in row["turns"]:
            if version == 1:
                assert turn.pop("logprobs") is None
    table = pa.Table.from_pylist(rows, schema=episode_schema(version))
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
        write_old_part(tmp_path / "old", without)
        assert [e.rows for e in verify_buffer(tmp_path / "old")] == [3]
        assert read_episodes(tmp_path / "old") == unrecorded(without)

    def test_appending_to_it_gives_one_buffer(self, without, with_logprobs, tmp_path):
        folder = tmp_path / "mixed"
        write_old_part(folder, without)
        write_old_part(folder, with_logprobs, 1, version=2)
        write_episodes(folder, with_logprobs)
        expected = [*unrecorded(without), *unrecorded(with_logprobs), *with_logprobs]
        assert read_episodes(folder) == expected
        dataset = load_episode_dataset(folder, cache_dir=str(tmp_path / "hf"))
        assert [row_to_record(row) for row in dataset] == expected

    def test_a_part_without_version_metadata_is_known_by_its_columns(self, without, tmp_path):
        path = write_old_part(tmp_path / "bare", without, metadata=False)
        assert file_schema_version(pq.read_schema(path)) == 1
        assert read_episodes(tmp_path / "bare") == unrecorded(without)
        path = write_old_part(tmp_path / "bare2", without, metadata=False, version=2)
        assert file_schema_version(pq.read_schema(path)) == 2
        bare = records_to_table(without).replace_schema_metadata(None)
        assert file_schema_version(bare.schema) == SCHEMA_VERSION

    def test_a_version_1_part_with_a_current_column_is_refused(self, with_logprobs, tmp_path):
        """The version in the metadata decides the columns a part must have."""
        table = records_to_table(with_logprobs).drop_columns(["plain_system_prompts"])
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

    def test_version_3_adds_only_the_plain_prompts(self):
        old, new = episode_schema(2), episode_schema(3)
        assert new.names == [*old.names, "plain_system_prompts"]
        assert all(old.field(n).type.equals(new.field(n).type) for n in old.names)
        assert new.field("plain_system_prompts").type == pa.list_(pa.string())

    def test_schema_versions_1_and_2_differ_only_in_the_turn_logprobs(self):
        old, new = episode_schema(1), episode_schema(2)
        assert old.names == new.names
        changed = [n for n in new.names if not old.field(n).type.equals(new.field(n).type)]
        assert changed == ["turns"]
        new_turn = new.field("turns").type.value_type
        assert [f.name for f in new_turn] == [*(f.name for f in old.field("turns").type.value_type), "logprobs"]
        assert new_turn.field("logprobs").type == pa.list_(pa.float64())



class TestPlainPrompts:
    def test_prompts_equal_to_the_system_prompts_are_stored_once(self, without, tmp_path):
        part = write_episodes(tmp_path / "buf", without)
        assert all(r.plain_system_prompts == r.system_prompts for r in without)
        assert pq.read_table(part).column("plain_system_prompts").to_pylist() == [[]] * 3
        assert read_episodes(part) == without

    def test_prompts_without_the_format_instruction_round_trip(self, tmp_path):
        specs = [EpisodeSpec(seed=k, options={"format_instruction": "sample"}) for k in range(2)]
        records = rollout("synth-hop-ia", ScriptedPolicy(_script(False)), specs, env_kwargs={"max_turns": 2},
                          progress=False)
        assert all(r.plain_system_prompts != r.system_prompts for r in records)
        part = write_episodes(tmp_path / "buf", records)
        assert read_episodes(part) == records
        dataset = load_episode_dataset(tmp_path / "buf", cache_dir=str(tmp_path / "hf"))
        assert [row_to_record(row) for row in dataset] == records

    def test_a_record_that_did_not_carry_them_stays_without(self, without, tmp_path):
        part = write_episodes(tmp_path / "buf", unrecorded(without))
        assert pq.read_table(part).column("plain_system_prompts").to_pylist() == [None] * 3
        assert read_episodes(part) == unrecorded(without)
