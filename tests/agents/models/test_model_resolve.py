"""`resolve_model`: registry names, local folders, hub ids, and the messages for everything else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from optima_agents.models import ModelNotFoundError, pull_model, resolve_model


@pytest.fixture
def hub_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty, private hub cache so the real one never leaks into these tests."""
    cache = tmp_path / "hf-hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return cache


class TestByName:
    def test_pulled_name(self, fake_pull) -> None:
        path = pull_model("tiny-test", home=fake_pull.home, progress=False)
        assert resolve_model("Tiny-Test", home=fake_pull.home) == str(path)

    def test_auto_pull(self, fake_pull) -> None:
        assert resolve_model("tiny-test", home=fake_pull.home) == str(fake_pull.target)
        assert fake_pull.builds == 1

    def test_not_pulled_without_auto_pull(self, fake_pull) -> None:
        expected = (
            f"Model 'tiny-test' is not pulled yet (looked in {fake_pull.target}). "
            "Run `optima models pull tiny-test`, or allow auto_pull."
        )
        with pytest.raises(ModelNotFoundError, match=re.escape(expected)):
            resolve_model("tiny-test", home=fake_pull.home, auto_pull=False)
        assert fake_pull.builds == 0

    def test_unknown_name(self) -> None:
        with pytest.raises(ModelNotFoundError) as info:
            resolve_model("smollm-135")
        lines = str(info.value).splitlines()
        assert lines[0] == (
            "Unknown model 'smollm-135': it is not a registry name, a local folder or a hub id. "
            "Did you mean 'smollm2-135m' or 'smollm2-135m-referential'?"
        )
        assert lines[1] == "Registry models: smollm2-135m, smollm2-135m-referential, smollm2-135m-referential-listener."
        assert "`optima models pull NAME`" in lines[2]


class TestByPath:
    def test_folder_with_config(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "config.json").write_text("{}")
        assert resolve_model(str(tmp_path / "m")) == str(tmp_path / "m")
        monkeypatch.chdir(tmp_path)
        assert resolve_model("m") == str(tmp_path / "m")  # relative paths come back absolute

    def test_folder_without_config(self, tmp_path: Path) -> None:
        (tmp_path / "weights.safetensors").write_text("x")
        expected = (
            f"{tmp_path} is not a Hugging Face model folder: config.json is missing "
            "(it contains ['weights.safetensors']). Point at the folder where `save_pretrained` wrote the model."
        )
        with pytest.raises(ModelNotFoundError, match=re.escape(expected)):
            resolve_model(str(tmp_path))

    def test_gguf_file(self, tmp_path: Path) -> None:
        (tmp_path / "m.gguf").write_text("x")
        expected = (
            f"{tmp_path / 'm.gguf'} is a file, not a model folder. "
            "Pass the folder that contains it, or pull a registry model."
        )
        with pytest.raises(ModelNotFoundError, match=re.escape(expected)):
            resolve_model(str(tmp_path / "m.gguf"))

    def test_missing_folder(self, tmp_path: Path) -> None:
        missing = tmp_path / "a" / "b"
        with pytest.raises(ModelNotFoundError, match=re.escape(f"No such model folder: '{missing}'")):
            resolve_model(str(missing))


class TestByHubId:
    def test_online_passes_through(self, hub_env: Path) -> None:
        assert resolve_model("org/some-model") == "org/some-model"

    def test_offline_and_not_cached(self, hub_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        expected = (
            "'org/some-model' looks like a Hugging Face hub id, but HF_HUB_OFFLINE is set and it is not in the "
            f"hub cache ({hub_env}), and there is no local folder of that name. Pass a local model folder, "
            "a registry name (`optima models list`), or unset HF_HUB_OFFLINE."
        )
        with pytest.raises(ModelNotFoundError, match=re.escape(expected)):
            resolve_model("org/some-model")

    def test_offline_suggests_the_embedded_copy(self, hub_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        expected = "Optima has a copy of it as registry model 'smollm2-135m'."
        with pytest.raises(ModelNotFoundError, match=re.escape(expected)):
            resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")

    def test_offline_and_cached(self, hub_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        repo = hub_env / "models--org--cached"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("abc123")
        (repo / "snapshots" / "abc123").mkdir(parents=True)
        (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert resolve_model("org/cached") == "org/cached"

    def test_local_folder_beats_hub_id(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub_env: Path) -> None:
        (tmp_path / "org" / "name").mkdir(parents=True)
        (tmp_path / "org" / "name" / "config.json").write_text("{}")
        monkeypatch.chdir(tmp_path)
        assert resolve_model("org/name") == str(tmp_path / "org" / "name")
