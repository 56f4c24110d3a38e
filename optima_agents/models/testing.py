"""Test helpers: one shared copy of the embedded model for every test session.

Pulling the model takes about a minute, so tests never pull into a fresh temp dir: they use
`$OPTIMA_HOME` when set (CI can cache that folder), else the user cache, and the second and
later sessions find the verified copy at once. Use it from any conftest:

    from optima_agents.models.testing import embedded_model_dir  # noqa: F401  (a fixture)

and mark the tests that load it with `@pytest.mark.model`. This module imports pytest, so
only test code should import it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from optima_agents.models.pull import pull_model
from optima_agents.models.registry import DEFAULT_MODEL

__all__ = ["embedded_model_dir", "ensure_test_model"]


def ensure_test_model() -> Path:
    """Return the folder of the embedded default model, pulling it once if needed."""
    return pull_model(DEFAULT_MODEL, progress=False)


@pytest.fixture(scope="session")
def embedded_model_dir() -> Path:
    """Session fixture: the verified Hugging Face folder of the embedded default model."""
    return ensure_test_model()
