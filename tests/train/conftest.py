"""Fixtures shared by the training-step tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random Llama and its tokenizer (`tests.train.tiny_model`), built once per module."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))
