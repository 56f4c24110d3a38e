"""Test helpers: one shared copy of the embedded model for every test session.

Pulling the model takes about a minute, so tests never pull into a fresh temp dir: they use
`$OPTIMA_HOME` when set (CI can cache that folder), else the user cache, and the second and
later sessions find the verified copy at once. Use it from any conftest:

    from optima_agents.models.testing import embedded_model_dir  # noqa: F401  (a fixture)

and mark the tests that load it with `@pytest.mark.model`. Scripts that only need the folder call
`ensure_test_model()`. Importing this module does not import pytest: the fixture is built, with
pytest, the first time `embedded_model_dir` is looked up.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from optima_agents.models.pull import pull_model
from optima_agents.models.registry import DEFAULT_MODEL

__all__ = ["embedded_model_dir", "ensure_test_model"]


def ensure_test_model() -> Path:
    """Return the folder of the embedded default model, pulling it once if needed."""
    return pull_model(DEFAULT_MODEL, progress=False)


def _embedded_model_dir() -> Path:
    """Session fixture: the verified Hugging Face folder of the embedded default model."""
    return ensure_test_model()


@functools.cache
def _fixture() -> Any:
    """The `embedded_model_dir` session fixture (one object, however often it is imported)."""
    import pytest

    return pytest.fixture(scope="session", name="embedded_model_dir")(_embedded_model_dir)


def __getattr__(name: str) -> Any:
    if name == "embedded_model_dir":
        return _fixture()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
