"""Where a dataset env finds its data: explicit paths, then `$OPTIMA_DATA_DIR/<folder>`, then the
hub; and a missing dataset says where it looked and how to point elsewhere."""

from __future__ import annotations

import json

import pytest

import optima_envs
from optima_envs.data.common import DATA_DIR_ENV
from optima_envs.errors import DataNotFoundError

ROWS = [{"question": "Ada has 3 apples and buys 4 more. How many apples does she have?",
         "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
        {"question": "A box holds 6 eggs. How many eggs are in 5 boxes?", "answer": "6 * 5 = <<6*5=30>>30\n#### 30"}]


def _gsm8k(folder, rows=ROWS):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


@pytest.fixture
def offline_hub(monkeypatch):
    """The hub as an offline machine sees it: every load fails at once."""
    import datasets

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub (offline)")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)


def test_env_var_folder_is_used(tmp_path, monkeypatch):
    _gsm8k(tmp_path / "gsm8k")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    env = optima_envs.make("gsm8k-debate", split="test")
    env.reset(seed=0, options={"index": 1})
    assert env.state.instance.gold_text == "30"
    assert str(tmp_path / "gsm8k" / "test.jsonl") in env.task.source.origin


def test_explicit_data_dir_wins_over_the_env_var(tmp_path, monkeypatch):
    _gsm8k(tmp_path / "env" / "gsm8k")
    _gsm8k(tmp_path / "mine", ROWS[1:])
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "env"))
    env = optima_envs.make("gsm8k-debate", split="test", data_dir=tmp_path / "mine")
    assert len(env.task.source) == 1


@pytest.mark.parametrize("env_value, says", [
    (None, "$OPTIMA_DATA_DIR is not set"),
    ("{tmp}", "$OPTIMA_DATA_DIR/gsm8k ('{tmp}/gsm8k') is not a folder"),
])
def test_missing_data_says_where_it_looked(tmp_path, monkeypatch, offline_hub, env_value, says):
    if env_value is None:
        monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    else:
        monkeypatch.setenv(DATA_DIR_ENV, env_value.format(tmp=tmp_path))
    env = optima_envs.make("gsm8k-debate", split="test")
    with pytest.raises(DataNotFoundError) as error:
        env.reset(seed=0)
    message = str(error.value)
    assert "could not load 'openai/gsm8k' (config 'main'), split 'test' from the Hugging Face hub" in message
    assert says.format(tmp=tmp_path) in message
    assert "Set OPTIMA_DATA_DIR to a folder holding gsm8k/" in message and "--set task.data_dir=" in message


def test_env_var_folder_without_the_split_is_an_error(tmp_path, monkeypatch):
    _gsm8k(tmp_path / "gsm8k")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(DataNotFoundError, match=r"no file for split 'train' in .*gsm8k"):
        optima_envs.make("gsm8k-debate", split="train")
