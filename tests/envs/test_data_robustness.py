"""Hostile data files: bytes that are not UTF-8, lone-surrogate escapes, a folder given as a file.
Each bad line is named by file and line, and `on_error="skip"` skips only that line."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import pytest

import optima_envs
from optima_envs.data.common import DataWarning, clear_cache
from optima_envs.errors import DataError, DataNotFoundError
from optima_envs.test import FIXTURES


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_cache()
    yield
    clear_cache()


def damaged_copy(source: Path, target: Path, line: int, damage: bytes) -> Path:
    """`source` copied to `target` with `damage` inserted after the first 10 bytes of line `line` (from 1)."""
    lines = source.read_bytes().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1][:10] + damage + lines[line - 1][10:]
    target.write_bytes(b"".join(lines))
    return target


def gsm8k(path: Path, **kwargs):
    return optima_envs.make("gsm8k-debate", data_files=[str(path)], **kwargs)


class TestNotUTF8:
    def test_a_bad_byte_names_its_line(self, tmp_path):
        path = damaged_copy(FIXTURES / "gsm8k" / "test.jsonl", tmp_path / "test.jsonl", 3, b"\xff")
        message = f"{path}:3: not UTF-8 text (byte 11 of the line: invalid start byte); fix or delete the line"
        with pytest.raises(DataError, match=re.escape(message)):
            gsm8k(path).reset(seed=0)

    def test_skip_skips_only_that_line(self, tmp_path):
        source = FIXTURES / "gsm8k" / "test.jsonl"
        total = len([x for x in source.read_text().splitlines() if x.strip()])
        path = damaged_copy(source, tmp_path / "test.jsonl", 2, b"\xc3\x28")
        env = gsm8k(path, on_error="skip")
        with pytest.warns(DataWarning, match="skipped 1 malformed row"):
            env.reset(seed=0)
        assert len(env.task.source) == total - 1
        assert [where for where, _ in env.task.source.skipped] == [f"{path}:2"]

    def test_a_json_document_names_line_and_column(self, tmp_path):
        path = tmp_path / "data.json"
        path.write_bytes(b'[\n {"question": "a",\n  "answer": "b \xfe #### 1"}\n]\n')
        message = (f"{path}:3: not UTF-8 text (byte 16 of the line: invalid start byte); a JSON document cannot be "
                   "read around a bad line, so fix the file")
        with pytest.raises(DataError, match=re.escape(message)):
            gsm8k(path).reset(seed=0)

    def test_a_csv_record_is_skipped_alone(self, tmp_path):
        source = sorted((FIXTURES / "mmlu" / "test").glob("*.csv"))[0]
        folder = tmp_path / "mmlu" / "test"
        folder.mkdir(parents=True)
        shutil.copytree(FIXTURES / "mmlu" / "dev", tmp_path / "mmlu" / "dev")
        rows = len(source.read_bytes().splitlines())
        damaged_copy(source, folder / source.name, 1, b"\x80")
        env = optima_envs.make("mmlu-debate", data_dir=str(tmp_path / "mmlu"), on_error="skip",
                               subjects=[source.stem[:-5]])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env.reset(seed=0)
        assert len(env.task.source) == rows - 1 and "not UTF-8" in env.task.source.skipped[0][1]
        assert any(issubclass(w.category, DataWarning) for w in caught)

    def test_a_cbt_story_with_a_bad_line_is_skipped_alone(self, tmp_path):
        source = FIXTURES / "cbt" / "cbtest_CN_test_2500ex.txt"
        path = damaged_copy(source, tmp_path / source.name, 2, b"\xff")
        with pytest.raises(DataError, match=re.escape(f"{path}:2: not UTF-8 text")):
            optima_envs.make("cbt-ia", data_dir=str(tmp_path), split="test").reset(seed=0)
        clear_cache()
        env = optima_envs.make("cbt-ia", data_dir=str(tmp_path), split="test", on_error="skip")
        with pytest.warns(DataWarning):
            env.reset(seed=0)
        assert env.task.source.skipped[0][0] == f"{path}:2"


class TestLoneSurrogates:
    def test_an_escaped_lone_surrogate_is_a_bad_row(self, tmp_path):
        source = FIXTURES / "gsm8k" / "test.jsonl"
        lines = source.read_text().splitlines()
        lines[1] = lines[1].replace('"question": "', '"question": "\\ud800 ', 1)
        (tmp_path / "test.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'test.jsonl'}:2: ['question'] holds a lone UTF-16 "
                                                      "surrogate")):
            gsm8k(tmp_path / "test.jsonl").reset(seed=0)

    def test_a_proper_surrogate_pair_escape_is_fine(self, tmp_path):
        source = FIXTURES / "gsm8k" / "test.jsonl"
        lines = source.read_text().splitlines()
        lines[0] = lines[0].replace('"question": "', '"question": "\\ud83d\\ude00 ', 1)
        (tmp_path / "test.jsonl").write_text("\n".join(lines) + "\n")
        env = gsm8k(tmp_path / "test.jsonl")
        env.reset(seed=0, options={"index": 0})
        assert env.state.instance.question.startswith("\U0001f600 ")


class TestDataFiles:
    def test_a_folder_is_not_a_data_file(self, tmp_path):
        with pytest.raises(DataNotFoundError, match=re.escape(f"gsm8k-debate: data file {str(tmp_path)!r} is a folder, "
                                                              f"not a file (data_files=[{str(tmp_path)!r}]). Pass "
                                                              f"data_dir={str(tmp_path)!r}")):
            gsm8k(tmp_path)
