"""Where each registered id finds its data in tests: the committed dataset fixtures
(`tests/fixtures/data`, see `tests.envs.data.fixtures`), never a folder outside the repository."""

from __future__ import annotations

from tests.envs.data.fixtures import FIXTURES

_KWARGS: dict[str, dict] = {
    "hotpotqa-ia": {"data_dir": FIXTURES / "hotpotqa", "split": "validation"},
    "2wikimqa-ia": {"data_dir": FIXTURES / "2wikimqa"},
    "triviaqa-ia": {"data_dir": FIXTURES / "triviaqa", "domain": "web", "split": "dev"},
    "cbt-ia": {"data_dir": FIXTURES / "cbt", "subset": "CN", "split": "test"},
    "gsm8k-debate": {"data_dir": FIXTURES / "gsm8k"},
    "math-debate": {"data_dir": FIXTURES / "math", "subset": "math500"},
    "arc-debate": {"data_dir": FIXTURES / "arc_challenge"},
    "mmlu-debate": {"data_dir": FIXTURES / "mmlu"},
}


def env_kwargs(env_id: str) -> dict:
    """The data kwargs of `env_id` for tests ({} for ids that need no data, e.g. synth-*)."""
    return dict(_KWARGS.get(env_id, {}))
