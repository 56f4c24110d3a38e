"""The SFT step on a tiny model: padding-free batches train to the padded batches' losses, and
examples are cut to `train.max_length` (keeping the start) before they are concatenated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optima_train.config.io import load_config
from tests.train.tiny_model import write_tiny_sft_data

FAST = ["model.device=cpu", "lora.enabled=false", "train.max_steps=3", "train.per_device_train_batch_size=3",
        "train.gradient_accumulation_steps=1", "train.bf16=false", "train.learning_rate=1e-2",
        "train.lr_scheduler_type=constant", "train.warmup_steps=0", "train.logging_steps=1", "run.progress=false"]


def _train(tiny: Path, data: Path, out: Path, *overrides: str) -> dict:
    from optima_train.isft import ISFTConfig
    from optima_train.isft.isft_trainer import train_sft

    cfg = load_config(ISFTConfig, None, [*FAST, *overrides])
    info = train_sft(cfg, data, str(tiny), out, seed=0)
    info["losses"] = [h["loss"] for h in json.loads((out / "train.json").read_text())["log_history"] if "loss" in h]
    return info


def _rewrite(data: Path, edit) -> Path:
    """`data` with every row passed through `edit(index, row)`."""
    import datasets

    from optima_train.examples import write_sft_dataset

    write_sft_dataset(data, [edit(i, row) for i, row in enumerate(datasets.Dataset.from_parquet(str(data)).to_list())])
    return data


def _longer_prompt(row: dict, extra: int) -> dict:
    """`row` with its first `extra` prompt tokens repeated in front (no loss on them)."""
    return {**row, "input_ids": row["input_ids"][:extra] + row["input_ids"],
            "assistant_masks": [0] * extra + row["assistant_masks"]}


def test_padding_free_batches_train_to_the_padded_losses(tiny, tmp_path):
    # rows of 3 lengths in every batch, so the padded batches do pad
    data = _rewrite(write_tiny_sft_data(tiny, tmp_path / "sft.parquet", count=9),
                    lambda i, row: _longer_prompt(row, 3 * (i % 3)))
    padded = _train(tiny, data, tmp_path / "padded", "train.padding_free=false", "train.max_length=64")
    packed = _train(tiny, data, tmp_path / "packed", "train.padding_free=true", "train.max_length=64")
    assert packed["steps"] == padded["steps"] == 3 and len(packed["losses"]) == 3
    assert packed["losses"] == pytest.approx(padded["losses"], rel=1e-4)


def test_padding_free_rows_are_cut_to_max_length_and_rows_left_without_loss_dropped(tiny, tmp_path):
    # the last row's reply starts after token 16: cut at 12 it carries no loss and is dropped
    data = _rewrite(write_tiny_sft_data(tiny, tmp_path / "sft.parquet", count=4),
                    lambda i, row: _longer_prompt(row, 8) if i == 3 else row)
    cut = _train(tiny, data, tmp_path / "cut", "train.padding_free=true", "train.max_length=12",
                 "train.per_device_train_batch_size=2", "train.max_steps=1")
    assert cut["examples"] == 3 and cut["losses"][0] > 0
