"""Episode buffers: schema, round trips (also through `datasets`), appends, atomic writes; and
`optima rollout` end to end."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from optima_agents.policies import Action, ScriptedPolicy
from optima_agents.rollout import EpisodeRecord, EpisodeSpec, rollout
from optima_train.buffers import (
    EPISODE_SCHEMA,
    SCHEMA_VERSION,
    EpisodeWriter,
    list_parts,
    load_episode_dataset,
    read_episodes,
    read_part_metadata,
    records_to_table,
    remove_temp_files,
    row_to_record,
    write_episodes,
)
from optima_train.buffers import schema as schema_module
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
        with pytest.raises(ValueError, match=re.escape("schema_version 2, newer than this Optima's 1")):
            row_to_record({**row, "schema_version": 2})


class TestRoundTrip:
    def test_write_then_read_and_load_with_datasets(self, records, tmp_path):
        part = write_episodes(tmp_path / "buf", records, metadata={"run": "test"})
        assert part == tmp_path / "buf" / "part-00000.parquet"
        assert read_episodes(tmp_path / "buf") == records
        assert read_episodes(part) == records
        assert datasets_rows(tmp_path / "buf", tmp_path) == records
        meta = read_part_metadata(part)
        assert meta["run"] == "test" and meta["schema_version"] == 1 and "created" in meta

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


class TestRolloutCli:
    def test_errors_are_one_clear_line(self, tmp_path):
        runner = CliRunner()
        result = runner.invoke(app, ["rollout", "--env", "synth-hop-ia", "--backend", "openai", "--out", str(tmp_path)])
        assert result.exit_code == 1 and "needs at least one --base-url" in result.output
        result = runner.invoke(app, ["rollout", "--env", "nope-ia", "--out", str(tmp_path)])
        assert result.exit_code == 1 and "no env named 'nope-ia'" in result.output

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
