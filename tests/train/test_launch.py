"""`train.launcher: accelerate` without a model: what a step writes before it launches, and the error
a failed launch gives (the two-process training itself is in test_distributed.py)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from optima_train.config.io import load_config


def test_a_failed_launch_raises_with_its_spec_and_log(tmp_path):
    import datasets
    from trl import SFTConfig, SFTTrainer

    from optima_train.isft import ISFTConfig
    from optima_train.trl_glue import TrainingLaunchError, train_with

    cfg = load_config(ISFTConfig, None, ["model.device=cpu", "lora.r=2", "run.progress=false",
                                         "train.launcher=accelerate", "train.launch_args=[--num_processes, two]"])
    dataset = datasets.Dataset.from_list([{"input_ids": [1, 2, 3], "assistant_masks": [0, 1, 1]}])
    with pytest.raises(TrainingLaunchError, match=re.escape("failed (exit code 2)")) as info:
        train_with(SFTTrainer, SFTConfig, cfg, "some/model", tmp_path / "step", dataset, seed=5)
    assert "invalid int value: 'two'" in str(info.value)  # the log's tail: accelerate's own message
    launch = tmp_path / "step" / "launch"
    spec = json.loads((launch / "spec.json").read_text())
    assert spec["trainer"] == "trl.trainer.sft_trainer:SFTTrainer" and spec["args_class"].endswith(":SFTConfig")
    assert spec["args"]["seed"] == 5 and spec["args"]["use_cpu"] is True and spec["init"] == "some/model"
    assert spec["lora"]["r"] == 2 and spec["folder"] == str((tmp_path / "step").resolve())
    assert datasets.load_from_disk(str(launch / "dataset"))[0]["input_ids"] == [1, 2, 3]
    assert (launch / "launch.log").read_text().startswith(f"{sys.executable} -m accelerate.commands.launch")
