"""`optima models pull|list` through typer's test runner."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from optima_train.cli.models import models_app

runner = CliRunner()


class TestModelsCli:
    def test_list_empty_home(self, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
        monkeypatch.setenv("OPTIMA_HOME", str(tmp_path))
        result = runner.invoke(models_app, ["list"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "Not pulled yet (`optima models pull NAME`): smollm2-135m" in result.output

    def test_pull_then_list(self, fake_pull, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPTIMA_HOME", str(fake_pull.home))
        result = runner.invoke(models_app, ["pull", "tiny-test"])
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == str(fake_pull.target)
        result = runner.invoke(models_app, ["list"], env={"COLUMNS": "200"})
        assert "tiny-test" in result.output and "yes" in result.output

    def test_pull_unknown_name_is_refused_cleanly(self) -> None:
        result = runner.invoke(models_app, ["pull", "smolm2"])
        assert result.exit_code == 2
        assert "error: Unknown model 'smolm2'" in result.stderr and "Did you mean 'smollm2-135m'?" in result.stderr
        assert "Traceback" not in result.output
