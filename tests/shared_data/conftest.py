"""Collect tests/shared_data only when `$OPTIMA_SHARED_DATA` is set: without it nothing here is
collected, so the default suite neither fails nor skips on a machine without the samples."""

from __future__ import annotations

import os
from pathlib import Path

from tests.shared_data import ENV_VAR


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if os.environ.get(ENV_VAR, "").strip():
        return None
    return collection_path.suffix == ".py" and collection_path.name != "conftest.py" or None
