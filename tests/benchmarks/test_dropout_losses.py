"""The dropout-loss comparison measures each setting's per-step gap from torch's dropout."""

from __future__ import annotations

import pytest

from benchmarks.dropout_losses import SETTINGS, compare


def test_gaps_are_per_step_absolute_differences_from_torch_dropout():
    runs = {"torch dropout": {"losses": [1.0, 0.8, 0.6], "train_loss": 0.8},
            "fast dropout": {"losses": [1.0, 0.9, 0.5], "train_loss": 0.8},
            "no dropout": {"losses": [1.0, 0.7, 0.7], "train_loss": 0.79}}
    gaps = compare(runs)
    assert gaps["torch dropout"] == {"max_abs_gap": 0.0, "mean_abs_gap": 0.0, "train_loss_gap": 0.0}
    assert gaps["fast dropout"]["max_abs_gap"] == pytest.approx(0.1)
    assert gaps["fast dropout"]["mean_abs_gap"] == pytest.approx(0.2 / 3)
    assert gaps["no dropout"]["train_loss_gap"] == pytest.approx(-0.01)


def test_the_settings_are_config_overrides_the_training_config_accepts():
    from optima_train.config.io import load_config
    from optima_train.isft import ISFTConfig

    for overrides in SETTINGS.values():
        load_config(ISFTConfig, None, overrides)
    assert load_config(ISFTConfig, None, SETTINGS["torch dropout"]).lora.fast_dropout is False
    assert load_config(ISFTConfig, None, SETTINGS["no dropout"]).lora.dropout == 0
