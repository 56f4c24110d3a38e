"""Where each registered id finds its data in tests (datasets: ../shared/data or fixtures)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Callable

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

_FIXTURES: Path | None = None


def fixture_dir() -> Path:
    """One temporary folder per test session with the fixtures of datasets that have no shared
    copy (written in their original release format); removed at exit."""
    global _FIXTURES
    if _FIXTURES is None:
        from tests.envs.data.fixtures import write_2wiki_release

        _FIXTURES = Path(tempfile.mkdtemp(prefix="optima-fixtures-"))
        atexit.register(shutil.rmtree, _FIXTURES, ignore_errors=True)
        write_2wiki_release(_FIXTURES / "2wikimqa")
    return _FIXTURES


_KWARGS: dict[str, dict] = {
    "hotpotqa-ia": {"data_dir": SHARED_DATA / "hotpotqa" / "rpt", "split": "validation"},
    "triviaqa-ia": {"data_dir": SHARED_DATA / "triviaqa" / "hf_datasets_dummy_rc", "domain": "web", "split": "dev"},
    "cbt-ia": {"data_dir": SHARED_DATA / "cbt" / "hf_datasets_dummy", "subset": "CN", "split": "test"},
    "gsm8k-debate": {"data_dir": SHARED_DATA / "gsm8k"},
    "math-debate": {"data_dir": SHARED_DATA / "math", "subset": "math500"},
    "arc-debate": {"data_dir": SHARED_DATA / "arc_challenge"},
    "mmlu-debate": {"data_dir": SHARED_DATA / "mmlu"},
}
_LAZY: dict[str, Callable[[], dict]] = {
    "2wikimqa-ia": lambda: {"data_dir": fixture_dir() / "2wikimqa"},
}


def env_kwargs(env_id: str) -> dict:
    if env_id in _LAZY:
        return dict(_LAZY[env_id]())
    return dict(_KWARGS.get(env_id, {}))
