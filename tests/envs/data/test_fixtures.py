"""The committed dataset fixtures (tests/fixtures/data) themselves: a complete `$OPTIMA_DATA_DIR`
for every shipped training config, and small enough to stay in the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

import optima_envs
from optima_envs.data.common import DATA_DIR_ENV
from optima_train.config_io import load_config
from optima_train.idpo import IDPOConfig
from optima_train.isft import ISFTConfig
from optima_train.isft_dpo import ISFTDPOConfig
from tests.envs.data.fixtures import FIXTURES

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
CONFIG_CLASSES = {"isft": ISFTConfig, "idpo": IDPOConfig, "isft_dpo": ISFTDPOConfig}
DATASET_ENVS = {"hotpotqa-ia", "2wikimqa-ia", "triviaqa-ia", "cbt-ia", "gsm8k-debate", "math-debate", "arc-debate",
                "mmlu-debate"}


def _dataset_configs():
    out = []
    for method, config_cls in CONFIG_CLASSES.items():
        for path in sorted((CONFIGS / method).glob("*.yaml")):
            if path.name != "base.yaml" and load_config(config_cls, path).task.env_id in DATASET_ENVS:
                out.append(pytest.param(config_cls, path, id=f"{method}/{path.stem}"))
    return out


@pytest.mark.parametrize("config_cls, path", _dataset_configs())
def test_every_shipped_config_reads_its_splits_from_the_fixtures(config_cls, path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(FIXTURES))
    task = load_config(config_cls, path).task
    for kwargs, index in ((task.train_kwargs(), task.train_first_index), (task.eval_kwargs(), task.eval_first_index)):
        env = optima_envs.make(task.env_id, **kwargs)
        assert env.task.source.origin.startswith(f"files: {FIXTURES}"), env.task.source.origin
        env.reset(seed=0, options={"index": index})


def test_every_dataset_env_has_a_fixture_folder():
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert folders == {"hotpotqa", "2wikimqa", "triviaqa", "cbt", "gsm8k", "math", "arc_challenge", "mmlu"}
    generated = {env_id for env_id in optima_envs.list_envs()
                 if env_id.startswith("synth-") or optima_envs.spec(env_id).family == "game"}
    assert set(optima_envs.list_envs()) - generated == DATASET_ENVS


def test_fixtures_stay_tiny():
    files = [p for p in FIXTURES.rglob("*") if p.is_file()]
    sizes = {str(p.relative_to(FIXTURES)): p.stat().st_size for p in files}
    assert sum(sizes.values()) < 160_000, sum(sizes.values())
    assert max(sizes.values()) < 12_000, max(sizes, key=sizes.get)
