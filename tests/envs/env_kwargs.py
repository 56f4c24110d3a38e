"""Where each registered id finds its data in tests (datasets: ../shared/data or fixtures)."""

from __future__ import annotations

from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

_KWARGS: dict[str, dict] = {}


def env_kwargs(env_id: str) -> dict:
    return dict(_KWARGS.get(env_id, {}))
