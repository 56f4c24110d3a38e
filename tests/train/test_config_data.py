"""Training configs name no data path: the data comes from `task.data_dir`, `$OPTIMA_DATA_DIR`
or the hub, and a config whose data is missing fails before any work, saying where it looked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from optima_envs.data.common import DATA_DIR_ENV
from optima_envs.errors import ConfigError
from optima_train.config.io import load_config
from optima_train.idpo import IDPOConfig
from optima_train.isft import ISFTConfig, ISFTTrainer
from optima_train.isft_dpo import ISFTDPOConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_no_shipped_config_names_a_path_outside_the_repository():
    """Relative paths may only reach other files of `configs/` (an `include` of a sibling
    folder's config); nothing names a data folder."""
    root = CONFIGS.resolve()
    for path in sorted(CONFIGS.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert "data_dir:" not in text.replace("# ", ""), path
        for part in re.findall(r"[\w./-]*\.\./[\w./-]*", text):
            assert (path.parent / part).resolve().is_relative_to(root), (path, part)


@pytest.mark.parametrize("config_cls", [ISFTConfig, IDPOConfig, ISFTDPOConfig])
def test_task_data_dir_reaches_both_envs(config_cls):
    cfg = load_config(config_cls, None, ["task.data_dir=/data/gsm8k", "task.env_id=gsm8k-debate"])
    assert cfg.task.train_kwargs()["data_dir"] == "/data/gsm8k" and cfg.task.eval_kwargs()["data_dir"] == "/data/gsm8k"


def test_two_places_for_the_data_are_refused():
    with pytest.raises(ConfigError, match=r"task.data_dir='/a' and task.eval_env_kwargs.data_files both say"):
        load_config(ISFTConfig, None, ["task.data_dir=/a", "task.eval_env_kwargs={data_files: /b/test.jsonl}"])


def test_missing_data_fails_before_any_work(tmp_path, monkeypatch):
    import datasets

    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: (_ for _ in ()).throw(ConnectionError("offline")))
    cfg = load_config(ISFTConfig, CONFIGS / "isft" / "gsm8k.yaml", [f"run.output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError) as error:
        ISFTTrainer(cfg).check_resources()
    message = str(error.value)
    assert "task.env_id='gsm8k-debate'" in message and "could not load 'openai/gsm8k'" in message
    assert "$OPTIMA_DATA_DIR is not set" in message and "--set task.data_dir=" in message
    assert not (tmp_path / "run").exists()


def test_data_dir_from_the_command_line(tmp_path, monkeypatch):
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    row = {"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    cfg = load_config(ISFTConfig, CONFIGS / "isft" / "gsm8k.yaml",
                      [f"task.data_dir={folder}", "task.train_questions=1", "model.name=" + str(tmp_path)])
    with pytest.raises(ConfigError, match="model.name="):  # the data checks passed; the model is next
        ISFTTrainer(cfg).check_resources()
