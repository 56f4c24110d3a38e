"""The dataset fixtures (optima_envs/test/fixtures) themselves: a complete `$OPTIMA_DATA_DIR` for
every shipped training config, named by `env_kwargs` for every dataset env, shipped with the
package, and small enough to ship."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

import optima_envs
from optima_envs.data.common import DATA_DIR_ENV
from optima_envs.test import FIXTURES, env_kwargs
from optima_train.config.io import load_config
from optima_train.idpo import IDPOConfig
from optima_train.isft import ISFTConfig
from optima_train.isft_dpo import ISFTDPOConfig

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"
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


def test_env_kwargs_point_every_dataset_env_at_its_fixture_folder():
    for env_id in DATASET_ENVS:
        data_dir = env_kwargs(env_id)["data_dir"]
        assert data_dir.parent == FIXTURES and data_dir.is_dir(), (env_id, data_dir)
    assert env_kwargs("synth-hop-ia") == {}
    first = env_kwargs("gsm8k-debate")
    first["data_dir"] = "elsewhere"
    assert env_kwargs("gsm8k-debate")["data_dir"] == FIXTURES / "gsm8k"


def test_every_fixture_file_ships_as_package_data():
    """An installed package has the files `env_kwargs` points at (pyproject's package-data)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    package = FIXTURES.parent
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"][".".join(package.relative_to(ROOT).parts)]
    shipped = {Path(package, f) for pattern in patterns for f in glob.glob(pattern, root_dir=package, recursive=True)}
    assert {p for p in FIXTURES.rglob("*") if p.is_file()} <= shipped


def test_fixtures_stay_tiny():
    files = [p for p in FIXTURES.rglob("*") if p.is_file()]
    sizes = {str(p.relative_to(FIXTURES)): p.stat().st_size for p in files}
    assert sum(sizes.values()) < 160_000, sum(sizes.values())
    assert max(sizes.values()) < 12_000, max(sizes, key=sizes.get)
