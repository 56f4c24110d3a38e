"""Tests of the real dataset samples named by `$OPTIMA_SHARED_DATA` (on the project's machines
`../shared/data`, see its README). Not part of the default suite: without the variable this
folder is not collected (see conftest.py). Run them with

    OPTIMA_SHARED_DATA=../shared/data python -m pytest tests/shared_data
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "OPTIMA_SHARED_DATA"


def shared_root() -> Path:
    """The samples' folder: `$OPTIMA_SHARED_DATA` (relative to the working directory if relative).
    Raises instead of skipping: these tests only run when someone asked for them."""
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        raise RuntimeError(f"tests/shared_data reads the real dataset samples: set {ENV_VAR} to their folder "
                           f"(e.g. {ENV_VAR}=../shared/data)")
    root = Path(os.path.expanduser(value)).resolve()
    if not (root / "README.md").is_file() or not root.is_dir():
        raise RuntimeError(f"{ENV_VAR}={value!r}: {str(root)!r} is not the dataset samples' folder (no README.md)")
    return root
