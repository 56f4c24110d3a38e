"""The shared loader machinery: configs, readers, error messages, subsets, laziness, the hub."""

import json
import re
import sys

import numpy as np
import pytest

import optima_envs
from optima_envs.data.common import DATA_DIR_ENV, DataConfig, DataWarning, clear_cache, read_csv, read_json
from optima_envs.errors import ConfigError, DataError, DataNotFoundError
from optima_envs.test import FIXTURES
from tests.envs.data.fixtures import TWOWIKI_ROWS, multihop_to_hub, read_json_file, write_json, write_jsonl

HOTPOT = FIXTURES / "hotpotqa"


def ids(env):
    return [i.instance_id for i in env.task.source.instances]


class TestDataConfig:
    def test_split_alias_becomes_canonical(self):
        assert DataConfig(split="dev").split == "validation"

    def test_unknown_split_lists_choices(self):
        with pytest.raises(ConfigError, match=re.escape(
                "dataset: split must be one of ['train', 'validation', 'test'] (aliases: {'dev': 'validation', "
                "'valid': 'validation', 'val': 'validation'}), got 'tset'")):
            DataConfig(split="tset")

    @pytest.mark.parametrize("limit", [0, -3, 2.5, True])
    def test_limit_must_be_positive_int(self, limit):
        with pytest.raises(ConfigError, match=re.escape(f"limit must be a positive int or None, got {limit!r}")):
            DataConfig(limit=limit)

    def test_data_dir_and_data_files_are_exclusive(self):
        with pytest.raises(ConfigError, match=re.escape("pass data_dir or data_files, not both")):
            DataConfig(data_dir="a", data_files="b")

    def test_on_error_choices(self):
        with pytest.raises(ConfigError, match=re.escape("on_error must be 'raise' or 'skip', got 'ignore'")):
            DataConfig(on_error="ignore")

    def test_paths_are_normalised(self, tmp_path):
        config = DataConfig(data_files=tmp_path / "a.json")
        assert config.data_files == (str(tmp_path / "a.json"),)

    def test_task_option_errors_come_from_make(self):
        with pytest.raises(ConfigError, match=re.escape("hotpotqa-ia: split must be one of ['train', 'validation']")):
            optima_envs.make("hotpotqa-ia", data_dir=HOTPOT, split="test")


class TestReaders:
    def test_bad_jsonl_line_names_file_and_line(self, tmp_path):
        path = tmp_path / "dev.jsonl"
        path.write_text(json.dumps(TWOWIKI_ROWS[0]) + "\n{not json\n")
        env = optima_envs.make("2wikimqa-ia", data_files=path)
        with pytest.raises(DataError, match=re.escape(f"{path}:2: invalid JSON (Expecting property name")):
            len(env.task.source)

    def test_missing_field_names_item_and_field(self, tmp_path):
        rows = [dict(r) for r in TWOWIKI_ROWS]
        del rows[1]["question"]
        path = write_json(tmp_path / "dev.json", rows)
        with pytest.raises(DataError, match=re.escape(f"{path}[1]: missing field 'question' (fields present: ")):
            len(optima_envs.make("2wikimqa-ia", data_files=path).task.source)

    def test_wrong_type_names_field_and_value(self, tmp_path):
        rows = [dict(TWOWIKI_ROWS[0], answer=["Ona Tallis"])]
        path = write_json(tmp_path / "dev.json", rows)
        with pytest.raises(DataError, match=re.escape(f"{path}[0]: field 'answer' must be str, got list ['Ona Tallis']")):
            len(optima_envs.make("2wikimqa-ia", data_files=path).task.source)

    def test_json_file_holding_json_lines(self, tmp_path):
        path = tmp_path / "dev.json"
        write_jsonl(path, TWOWIKI_ROWS)
        assert [r.where for r in read_json(path)] == [f"{path}:{n}" for n in range(1, 5)]

    def test_invalid_json_file(self, tmp_path):
        path = tmp_path / "dev.json"
        path.write_text('[{"a": 1},\n oops]')
        with pytest.raises(DataError, match=re.escape(f"{path}: invalid JSON at line 2, column 2")):
            read_json(path)

    def test_csv_rows_start_lines(self, tmp_path):
        path = tmp_path / "x_test.csv"
        path.write_text('a,"two\nlines",c\nd,e,f\n')
        assert [(r.data, r.where) for r in read_csv(path)] == [
            (["a", "two\nlines", "c"], f"{path}:1"), (["d", "e", "f"], f"{path}:3")]

    def test_parquet_hub_rows(self, tmp_path):
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        hub = [multihop_to_hub(r) for r in TWOWIKI_ROWS]
        pq.write_table(pa.Table.from_pylist(hub), tmp_path / "validation-00000-of-00001.parquet")
        write_json(tmp_path / "release" / "dev.json", TWOWIKI_ROWS)
        from_parquet = optima_envs.make("2wikimqa-ia", data_dir=tmp_path).task.source.instances
        from_release = optima_envs.make("2wikimqa-ia", data_dir=tmp_path / "release").task.source.instances
        assert from_parquet == from_release


class TestMissingData:
    def test_missing_file_fails_at_make(self, tmp_path, monkeypatch):
        monkeypatch.delenv(DATA_DIR_ENV, raising=False)
        path = tmp_path / "nope.json"
        with pytest.raises(DataNotFoundError, match=re.escape(
                f"hotpotqa-ia: data file '{path}' does not exist (data_files=['{path}']). Local files: "
                f"$OPTIMA_DATA_DIR is not set. Set OPTIMA_DATA_DIR to a folder holding hotpotqa/ "
                f"(hotpot_dev_distractor_v1.json")):
            optima_envs.make("hotpotqa-ia", data_files=path)

    def test_folder_without_the_split_lists_what_was_tried(self, tmp_path):
        with pytest.raises(DataNotFoundError, match=re.escape(
                f"hotpotqa-ia: no file for split 'train' in '{tmp_path}': looked for ['hotpot_train_v1.1.json'")):
            optima_envs.make("hotpotqa-ia", data_dir=tmp_path, split="train")

    def test_missing_folder(self, tmp_path):
        with pytest.raises(DataNotFoundError, match=re.escape(f"gsm8k-debate: data_dir '{tmp_path / 'x'}' is not a folder.")):
            optima_envs.make("gsm8k-debate", data_dir=tmp_path / "x")

    def test_hub_offline_names_hub_id_and_data_dir(self, monkeypatch):
        monkeypatch.delenv(DATA_DIR_ENV, raising=False)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
        datasets = pytest.importorskip("datasets")
        import huggingface_hub.constants

        # Both libraries read the variables at import time: set the flags too, in case another
        # test imported them first (otherwise the load waits on network timeouts).
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
        env = optima_envs.make("hotpotqa-ia")
        with pytest.raises(DataNotFoundError) as caught:
            env.reset(seed=0)
        message = str(caught.value)
        assert message.startswith("hotpotqa-ia: could not load 'hotpotqa/hotpot_qa' (config 'distractor'), "
                                  "split 'validation' from the Hugging Face hub (")
        assert "optima_envs.make('hotpotqa-ia', data_dir='path/to/hotpotqa')" in message

    def test_hub_without_datasets_package(self, monkeypatch):
        monkeypatch.delenv(DATA_DIR_ENV, raising=False)
        monkeypatch.setitem(sys.modules, "datasets", None)
        env = optima_envs.make("mmlu-debate")
        with pytest.raises(DataNotFoundError, match=re.escape(
                "mmlu-debate: no data_dir or data_files was given, and loading 'cais/mmlu' (config 'all'), split "
                "'test' from the Hugging Face hub needs the `datasets` package (pip install datasets). "
                "Local files: $OPTIMA_DATA_DIR is not set. Set OPTIMA_DATA_DIR to a folder holding mmlu/")):
            len(env.task.source)


class TestOnError:
    def _broken(self, tmp_path):
        rows = [json.dumps(r) for r in TWOWIKI_ROWS]
        rows[1] = json.dumps({k: v for k, v in TWOWIKI_ROWS[1].items() if k != "answer"})
        rows.insert(2, "{broken")
        path = tmp_path / "dev.jsonl"
        path.write_text("\n".join(rows) + "\n")
        return path

    def test_raise_is_the_default(self, tmp_path):
        path = self._broken(tmp_path)
        with pytest.raises(DataError, match=re.escape(f"{path}:2: missing field 'answer'")):
            len(optima_envs.make("2wikimqa-ia", data_files=path).task.source)

    def test_skip_counts_warns_and_records(self, tmp_path):
        path = self._broken(tmp_path)
        env = optima_envs.make("2wikimqa-ia", data_files=path, on_error="skip")
        with pytest.warns(DataWarning, match=re.escape("2wikimqa-ia: skipped 2 malformed row(s) of 5 (on_error='skip')")):
            assert ids(env) == ["2w-0001", "2w-0003", "2w-0004"]
        assert [where for where, _ in env.task.source.skipped] == [f"{path}:2", f"{path}:3"]

    def test_duplicate_ids_are_an_error(self, tmp_path):
        path = write_json(tmp_path / "dev.json", [TWOWIKI_ROWS[0], TWOWIKI_ROWS[0]])
        with pytest.raises(DataError, match=re.escape(f"{path}[1]: duplicate instance id '2w-0001' (first at {path}[0])")):
            len(optima_envs.make("2wikimqa-ia", data_files=path).task.source)

    def test_nothing_loaded_is_an_error(self, tmp_path):
        path = tmp_path / "dev.jsonl"
        path.write_text("{broken\n")
        with pytest.warns(DataWarning), pytest.raises(DataError, match=re.escape("2wikimqa-ia: no instances loaded")):
            len(optima_envs.make("2wikimqa-ia", data_files=path, on_error="skip").task.source)


class TestSubset:
    def test_no_limit_keeps_file_order(self):
        rows = [row["_id"] for row in read_json_file(HOTPOT / "hotpot_dev_distractor_v1.json")]
        assert ids(optima_envs.make("hotpotqa-ia", data_dir=HOTPOT)) == rows

    def test_limit_is_a_seeded_permutation_prefix(self):
        rows = [row["_id"] for row in read_json_file(HOTPOT / "hotpot_dev_distractor_v1.json")]
        assert len(rows) == 5  # the fixture; limits 2 and 4 are real subsets of it
        two = ids(optima_envs.make("hotpotqa-ia", data_dir=HOTPOT, limit=2, seed=3))
        assert two == [rows[i] for i in np.random.default_rng(3).permutation(len(rows))[:2]]
        assert two == ids(optima_envs.make("hotpotqa-ia", data_dir=HOTPOT, limit=2, seed=3))
        assert ids(optima_envs.make("hotpotqa-ia", data_dir=HOTPOT, limit=4, seed=3))[:2] == two
        assert ids(optima_envs.make("hotpotqa-ia", data_dir=HOTPOT, limit=2, seed=4)) != two


class TestLaziness:
    def test_make_reads_nothing(self):
        clear_cache()
        env = optima_envs.make("hotpotqa-ia", data_dir=HOTPOT)
        assert env.task.source._instances is None
        first = env.task.source.instances
        assert optima_envs.make("hotpotqa-ia", data_dir=HOTPOT).task.source.instances is first, "not cached"

    def test_changed_file_is_read_again(self, tmp_path):
        path = write_json(tmp_path / "dev.json", TWOWIKI_ROWS[:2])
        assert len(optima_envs.make("2wikimqa-ia", data_files=path).task.source) == 2
        write_json(path, TWOWIKI_ROWS)
        assert len(optima_envs.make("2wikimqa-ia", data_files=path).task.source) == 4
