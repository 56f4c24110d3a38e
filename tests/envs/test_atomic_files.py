"""Atomic writes: a write killed part-way leaves the old file or folder, never a part of the new one."""

from __future__ import annotations

import json

import pytest

from optima_envs.atomic_files import atomic_dir, atomic_write_json


def test_atomic_writes(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    with pytest.raises(KeyboardInterrupt), atomic_dir(tmp_path / "ckpt") as tmp:
        (tmp / "w").write_text("half")
        raise KeyboardInterrupt  # killed while writing
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    with atomic_dir(tmp_path / "ckpt") as tmp:
        (tmp / "w").write_text("whole")
    assert (tmp_path / "ckpt" / "w").read_text() == "whole"


def test_json_is_strict_with_a_mean_of_nothing_written_as_null(tmp_path):
    import numpy as np

    data = {"mean": float("nan"), "high": np.float64("inf"), "rows": [(1.5, float("-inf"))], "n": 0}
    atomic_write_json(tmp_path / "a.json", data)
    text = (tmp_path / "a.json").read_text()
    assert "NaN" not in text and "Infinity" not in text

    def refuse(constant):
        raise ValueError(constant)

    assert json.loads(text, parse_constant=refuse) == {"mean": None, "high": None, "rows": [[1.5, None]], "n": 0}
