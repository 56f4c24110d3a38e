"""Episode buffers: schema, round trips (also through `datasets`), appends, atomic writes; and
`optima rollout` end to end."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from optima_agents.policies import Action, ScriptedPolicy
from optima_agents.rollout import EpisodeRecord, EpisodeSpec, rollout
from optima_train.buffers import (
    EPISODE_SCHEMA,
    MANIFEST_NAME,
    SCHEMA_VERSION,
    BufferCorruptError,
    BufferWarning,
    EpisodeWriter,
    list_parts,
    load_episode_dataset,
    read_episodes,
    read_part_metadata,
    rebuild_manifest,
    records_to_table,
    remove_temp_files,
    row_to_record,
    verify_buffer,
    write_episodes,
)
from optima_train.buffers import schema as schema_module
from optima_train.buffers.testing import UNSTORABLE, buffer_files, rejected_records
from optima_train.cli import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def records() -> list[EpisodeRecord]:
    """Four varied episodes: agreed, truncated, infra failure (scripted, fast)."""

    def script(o):
        if "fail" in o["system_prompt"] and o["turn"] == 1:
            return Action(text="", finish_reason="error", error="timeout after 3 retries")
        return "I know: " + " ".join(o["evidence"]) if o["turn"] < 2 else "<A>Kelo</A>"

    specs = [EpisodeSpec(seed=0, index=0), EpisodeSpec(seed=1, index=5, options={"format_instruction": 2}),
             EpisodeSpec(seed=2, index=None, options={"format_instruction": "fail"}), EpisodeSpec(seed=None, index=3)]
    out = rollout("synth-hop-ia", ScriptedPolicy(script), specs, env_kwargs={"max_turns": 3}, progress=False)
    out[1] = dataclasses.replace(out[1], gold=["Kelo", "K."], score_ok=False, score=None, score_error="ScoringError: x")
    assert out[2].infra_failure
    return out


def datasets_rows(directory: Path, tmp_path: Path) -> list[EpisodeRecord]:
    dataset = load_episode_dataset(directory, cache_dir=str(tmp_path / "hf-cache"))
    return [row_to_record(row) for row in dataset]


class TestSchema:
    def test_every_column_is_documented(self):
        for name in EPISODE_SCHEMA.names:
            assert f"`{name}`" in schema_module.__doc__, name
        assert EPISODE_SCHEMA.metadata[b"optima.schema_version"] == str(SCHEMA_VERSION).encode()

    def test_table_matches_the_schema(self, records):
        table = records_to_table(records)
        assert table.schema.equals(EPISODE_SCHEMA) and table.num_rows == 4

    def test_newer_schema_version_is_refused(self, records):
        row = records_to_table(records[:1]).to_pylist()[0]
        newer = SCHEMA_VERSION + 1
        message = f"schema_version {newer}, newer than this Optima's {SCHEMA_VERSION}"
        with pytest.raises(ValueError, match=re.escape(message)):
            row_to_record({**row, "schema_version": newer})


class TestRoundTrip:
    def test_write_then_read_and_load_with_datasets(self, records, tmp_path):
        part = write_episodes(tmp_path / "buf", records, metadata={"run": "test"})
        assert part == tmp_path / "buf" / "part-00000.parquet"
        assert read_episodes(tmp_path / "buf") == records
        assert read_episodes(part) == records
        assert datasets_rows(tmp_path / "buf", tmp_path) == records
        meta = read_part_metadata(part)
        assert meta["run"] == "test" and meta["schema_version"] == SCHEMA_VERSION and "created" in meta

    def test_plain_load_dataset_reads_it(self, records, tmp_path):
        import datasets

        write_episodes(tmp_path / "buf", records)
        ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "buf" / "part-*.parquet"), split="train",
                                   cache_dir=str(tmp_path / "hf-cache"))
        assert ds.num_rows == 4 and ds[0]["turns"][0]["speaker"] == "alice"
        assert json.loads(ds[1]["gold"]) == ["Kelo", "K."] and ds[2]["infra_failure"] is True

    def test_appending_adds_parts_in_order(self, records, tmp_path):
        buf = tmp_path / "buf"
        write_episodes(buf, records[:1])
        write_episodes(buf, records[1:3])
        assert write_episodes(buf, []) is None
        with EpisodeWriter(buf, flush_every=1, metadata={"writer": "test"}) as writer:
            writer.extend(records[3:])
            writer.add(records[0])
        assert [p.name for p in list_parts(buf)] == [f"part-0000{i}.parquet" for i in range(4)]
        assert read_episodes(buf) == records + records[:1]
        assert datasets_rows(buf, tmp_path) == records + records[:1]
        assert read_part_metadata(list_parts(buf)[3])["writer"] == "test"

    def test_writer_drops_pending_records_on_error(self, records, tmp_path):
        with pytest.raises(KeyError):
            with EpisodeWriter(tmp_path / "buf") as writer:
                writer.extend(records)
                raise KeyError("boom")
        assert list_parts(tmp_path / "buf") == []

    def test_missing_buffer(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="no episode buffer at"):
            read_episodes(tmp_path / "nope")


class TestAtomicity:
    def test_killed_writer_leaves_no_visible_part(self, records, tmp_path):
        buf = tmp_path / "buf"
        write_episodes(buf, records[:2])
        dump = tmp_path / "records.json"
        dump.write_text(json.dumps([r.to_dict() for r in records]))
        script = (
            "import json, os, sys\n"
            "import pyarrow.parquet as pq\n"
            "from optima_agents.rollout import EpisodeRecord\n"
            "from optima_train.buffers import write_episodes\n"
            "recs = [EpisodeRecord.from_dict(d) for d in json.load(open(sys.argv[2]))]\n"
            "original = pq.ParquetWriter.write_table\n"
            "def dying(self, table, row_group_size=None):\n"
            "    original(self, table.slice(0, 1), row_group_size=1)  # write part of the file...\n"
            "    os._exit(9)  # ...then die like a killed process: no cleanup, no finally\n"
            "pq.ParquetWriter.write_table = dying\n"
            "write_episodes(sys.argv[1], recs)\n"
        )
        proc = subprocess.run([sys.executable, "-c", script, str(buf), str(dump)], cwd=ROOT, capture_output=True)
        assert proc.returncode == 9, proc.stderr.decode()
        leftovers = list(buf.glob(".part-*"))
        assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # it died mid-write
        assert [p.name for p in list_parts(buf)] == ["part-00000.parquet"]
        assert read_episodes(buf) == records[:2]
        assert datasets_rows(buf, tmp_path) == records[:2]
        import datasets  # a plain data_dir load skips the hidden temp file too

        ds = datasets.load_dataset("parquet", data_dir=str(buf), split="train", cache_dir=str(tmp_path / "c2"))
        assert ds.num_rows == 2
        write_episodes(buf, records[2:])  # the next writer is not disturbed
        assert read_episodes(buf) == records
        assert remove_temp_files(buf) == leftovers and not list(buf.glob(".part-*"))

    def test_failed_write_cleans_up_its_temp_file(self, records, tmp_path, monkeypatch):
        def broken(*args, **kwargs):
            raise OSError("disk full")

        monkeypatch.setattr(pq, "write_table", broken)
        with pytest.raises(OSError, match="disk full"):
            write_episodes(tmp_path / "buf", records)
        assert list((tmp_path / "buf").iterdir()) == []

    def test_a_part_is_never_overwritten(self, records, tmp_path, monkeypatch):
        from optima_train.buffers import writer

        write_episodes(tmp_path / "buf", records[:1])
        monkeypatch.setattr(writer, "_next_number", lambda folder: 0)  # as if a racing writer took 0
        assert write_episodes(tmp_path / "buf", records[1:2]).name == "part-00001.parquet"
        assert read_episodes(tmp_path / "buf") == records[:2]


class TestUnstorableRecords:
    def test_one_bad_record_costs_no_other(self, records, tmp_path):
        bad = dataclasses.replace(records[1], question="broken \ud800 text")
        with pytest.warns(BufferWarning, match=re.escape("wrote 3 of 4 records to")) as caught:
            part = write_episodes(tmp_path / "buf", [records[0], bad, *records[2:]])
        assert "record 1 (synth-hop-ia seed 1" in str(caught[0].message)
        assert read_episodes(tmp_path / "buf") == [records[0], *records[2:]]
        sidecar = tmp_path / "buf" / ".rejected" / f"{part.stem}.jsonl"
        kept = [json.loads(line) for line in sidecar.read_text().splitlines()]
        assert len(kept) == 1 and kept[0]["position"] == 1 and "UnicodeEncodeError" in kept[0]["error"]
        assert EpisodeRecord.from_dict(kept[0]["record"]) == bad
        assert verify_buffer(tmp_path / "buf")[0].rejected == 1

    @pytest.mark.parametrize("kind", sorted(UNSTORABLE))
    def test_a_good_record_beside_a_bad_one_is_written(self, records, tmp_path, kind):
        bad = UNSTORABLE[kind](records[3])
        with pytest.warns(BufferWarning, match=re.escape("wrote 1 of 2 records to")):
            part = write_episodes(tmp_path / "buf", [records[0], bad])
        assert read_episodes(tmp_path / "buf") == [records[0]]
        assert rejected_records(tmp_path / "buf" / ".rejected" / f"{part.stem}.jsonl") == [bad]

    @pytest.mark.parametrize("existing", [False, True], ids=["new folder", "existing buffer"])
    @pytest.mark.parametrize("kind", sorted(UNSTORABLE))
    @pytest.mark.parametrize("size", [1, 2])
    def test_a_batch_of_only_bad_records_writes_nothing(self, records, tmp_path, kind, existing, size):
        folder = tmp_path / "buf"
        if existing:
            write_episodes(folder, records[:1])
        before = buffer_files(folder)
        bad = [UNSTORABLE[kind](r) for r in (records[0], records[3])[:size]]
        with pytest.warns(BufferWarning, match=re.escape(f"wrote none of {size} records: {size} could not be "
                                                         f"stored, e.g. record 0 (synth-hop-ia seed 0")) as caught:
            assert write_episodes(folder, bad) is None
        assert buffer_files(folder) == before  # no part, the manifest unchanged (or still absent)
        [sidecar] = (folder / ".rejected").iterdir()
        assert rejected_records(sidecar) == bad and str(sidecar) in str(caught[0].message)
        if existing:
            assert read_episodes(folder) == records[:1]

    def test_the_writer_reports_a_flush_of_only_bad_records(self, records, tmp_path):
        with pytest.warns(BufferWarning, match="wrote none of 1 records"):
            with EpisodeWriter(tmp_path / "buf", flush_every=1) as writer:
                writer.add(UNSTORABLE["token id 2**31"](records[0]))
        assert writer.parts == [] and len(list((tmp_path / "buf" / ".rejected").iterdir())) == 1


class TestNotABuffer:
    """A folder that holds no buffer is an error naming it, never a buffer of no episodes."""

    @pytest.mark.parametrize("content", ["nothing", "other files", "only rejected records", "only a temp file"])
    def test_a_folder_without_parts_or_manifest_is_refused(self, records, tmp_path, content):
        folder = tmp_path / "runs" / "iter0"
        folder.mkdir(parents=True)
        if content == "other files":
            (folder / "notes.txt").write_text("not episodes")
            (folder / "sub").mkdir()
        elif content == "only rejected records":
            with pytest.warns(BufferWarning):
                write_episodes(folder, [UNSTORABLE["token id 2**31"](records[0])])
        elif content == "only a temp file":
            (folder / ".part-00000.parquet.tmp-0a1b2c3d").write_bytes(b"PAR1")
        message = f"{folder} holds no episode buffer: no part-*.parquet files and no {MANIFEST_NAME}"
        for read in (read_episodes, verify_buffer, load_episode_dataset):
            with pytest.raises(BufferCorruptError, match=re.escape(message)) as caught:
                read(folder)
            assert "Check the path" in str(caught.value)
        if content == "only rejected records":
            assert "its .rejected/ keeps 1 record(s) that could not be stored" in str(caught.value)

    def test_a_manifest_listing_no_parts_is_an_empty_buffer(self, tmp_path):
        (tmp_path / "buf").mkdir()
        assert rebuild_manifest(tmp_path / "buf") == []
        assert read_episodes(tmp_path / "buf") == [] and verify_buffer(tmp_path / "buf") == []


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


class TestDamage:
    @pytest.fixture
    def buf(self, records, tmp_path) -> Path:
        write_episodes(tmp_path / "buf", records[:2])
        write_episodes(tmp_path / "buf", records[2:])
        return tmp_path / "buf"

    def test_the_manifest_lists_parts_rows_and_checksums(self, buf):
        manifest = json.loads((buf / MANIFEST_NAME).read_text())
        assert [(p["name"], p["rows"]) for p in manifest["parts"]] == [("part-00000.parquet", 2),
                                                                       ("part-00001.parquet", 2)]
        assert all(len(p["sha256"]) == 64 and p["bytes"] > 0 for p in manifest["parts"])

    def test_every_flipped_byte_is_caught_and_names_the_part(self, buf):
        part = buf / "part-00001.parquet"
        original = part.read_bytes()
        for offset in np.random.default_rng(0).choice(len(original), size=60, replace=False):
            _flip(part, int(offset))
            with pytest.raises(BufferCorruptError, match=re.escape(f"{part} is damaged")):
                read_episodes(buf)
            with pytest.raises(BufferCorruptError, match=re.escape(f"{part} is damaged")):
                read_episodes(part)
            part.write_bytes(original)
        assert len(read_episodes(buf)) == 4

    def test_a_deleted_part_is_an_error_not_fewer_rows(self, buf):
        (buf / "part-00000.parquet").unlink()
        with pytest.raises(BufferCorruptError, match=re.escape(f"{buf / 'part-00000.parquet'} is missing: the "
                                                                  "manifest lists it with 2 rows")):
            read_episodes(buf)
        with pytest.raises(BufferCorruptError, match="is missing"):
            load_episode_dataset(buf)

    def test_a_damaged_or_deleted_manifest_is_caught(self, buf, records):
        manifest = buf / MANIFEST_NAME
        text = manifest.read_text()
        manifest.write_text(text.replace('"rows": 2', '"rows": 3', 1))
        with pytest.raises(BufferCorruptError, match=re.escape("do not match its own checksum")):
            read_episodes(buf)
        manifest.write_text(text[:-20])
        with pytest.raises(BufferCorruptError, match=re.escape(f"{manifest} is damaged: it is not valid JSON")):
            read_episodes(buf)
        manifest.unlink()
        with pytest.raises(BufferCorruptError, match=re.escape("holds 2 part file(s) but no .manifest.json")):
            read_episodes(buf)
        with pytest.raises(BufferCorruptError, match="rebuild_manifest"):
            write_episodes(buf, records[:1])  # appending would hide the parts from readers
        assert [e.rows for e in rebuild_manifest(buf)] == [2, 2] and len(read_episodes(buf)) == 4

    def test_a_column_of_the_wrong_type_is_refused(self, records, tmp_path):
        table = records_to_table(records)
        index = table.schema.get_field_index("score")
        table = table.set_column(index, "score", table.column("score").cast("string"))
        (tmp_path / "buf").mkdir()
        pq.write_table(table, tmp_path / "buf" / "part-00000.parquet")
        message = "column 'score' is string, expected double"
        with pytest.raises(BufferCorruptError, match=re.escape(message)):
            read_episodes(tmp_path / "buf" / "part-00000.parquet")
        with pytest.raises(BufferCorruptError, match=re.escape(f"{tmp_path / 'buf' / 'part-00000.parquet'} does not")):
            rebuild_manifest(tmp_path / "buf")

    def test_an_uncommitted_part_is_ignored_with_a_warning(self, buf, records):
        (buf / "part-00007.parquet").write_bytes((buf / "part-00000.parquet").read_bytes())
        with pytest.warns(BufferWarning, match=re.escape("ignored ['part-00007.parquet'], not listed")):
            assert len(read_episodes(buf)) == 4
        assert remove_temp_files(buf) == [buf / "part-00007.parquet"]
        assert write_episodes(buf, records[:1]).name == "part-00002.parquet"


class TestRolloutCli:
    def test_errors_are_one_clear_line(self, tmp_path):
        runner = CliRunner()
        result = runner.invoke(app, ["rollout", "--env", "synth-hop-ia", "--backend", "openai", "--out", str(tmp_path)])
        assert result.exit_code == 2 and "needs at least one --base-url" in result.output
        result = runner.invoke(app, ["rollout", "--env", "nope-ia", "--out", str(tmp_path)])
        assert result.exit_code == 2 and "no env named 'nope-ia'" in result.output

    def test_finished_episodes_are_written_when_the_policy_fails(self, tmp_path, monkeypatch):
        from optima_agents import policies
        from optima_train.cli.rollout import run_rollout

        def script(o):
            """Every episode agrees at turn 1, except one that is still talking when the backend dies."""
            if o["question"] != boom_question:
                return "<A>Kelo</A>"
            if o["turn"] == 2:
                raise ConnectionError("the backend crashed")
            return "thinking"

        import optima_envs

        env = optima_envs.make("synth-hop-ia")
        env.reset(seed=0, options={"index": 5})
        boom_question = env.state.instance.question
        monkeypatch.setattr(policies, "make_policy", lambda *a, **k: ScriptedPolicy(script))
        with pytest.raises(ConnectionError):
            run_rollout(env_id="synth-hop-ia", model="x", backend="hf", episodes=8, out=tmp_path / "buf",
                        env_kwargs={"max_turns": 4}, progress=False)
        saved = read_episodes(tmp_path / "buf")
        assert [r.index for r in saved] == [0, 1, 2, 3, 4, 6, 7] and all(r.end_reason == "agreed" for r in saved)
        assert read_part_metadata(list_parts(tmp_path / "buf")[0])["incomplete"] is True

    @pytest.mark.model
    def test_tiny_run_end_to_end(self, embedded_model_dir, tmp_path):
        out = tmp_path / "buf"
        args = ["rollout", "--env", "synth-hop-ia", "--model", str(embedded_model_dir), "--episodes", "2",
                "--max-turns", "2", "--max-new-tokens", "6", "--out", str(out), "--no-progress", "--show", "1",
                "--threads", "1", "--seed", "4"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        for expected in ("mean score", "mean tokens / episode", "generated tokens / s", "infra failures",
                         "part-00000.parquet", "Question:"):
            assert expected in result.output
        records = read_episodes(out)
        assert [r.seed for r in records] == [4, 5] and [r.index for r in records] == [0, 1]
        assert all(r.num_turns == 2 and r.policies["alice"]["backend"] == "hf" for r in records)
        assert records[0].sampling["alice"]["max_new_tokens"] == 6
        assert read_part_metadata(list_parts(out)[0])["command"] == "rollout"
