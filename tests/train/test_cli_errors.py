"""The one exit-code policy of the `optima` commands: the error's type decides."""

from __future__ import annotations

import pytest
import typer

from optima_agents.models.errors import ModelNotFoundError, ModelPullError
from optima_agents.servers import ServerStartError
from optima_envs.errors import ConfigError, DataNotFoundError, OptimaError, UnknownEnvError
from optima_train.buffers import BufferCorruptError
from optima_train.cli.errors import FAILED, REFUSED, exit_code, fail, reported


@pytest.mark.parametrize("error", [ConfigError("x"), DataNotFoundError("x"), UnknownEnvError("x"),
                                   ModelNotFoundError("x"), BufferCorruptError("x"), ValueError("x")])
def test_wrong_input_is_refused(error):
    assert exit_code(error) == REFUSED == 2


@pytest.mark.parametrize("error", [ServerStartError("x"), ModelPullError("x"), OptimaError("x")])
def test_a_failed_step_fails(error):
    assert exit_code(error) == FAILED == 1


def test_fail_prints_one_line_without_markup_and_exits(capsys):
    with pytest.raises(typer.Exit) as raised:
        fail(ServerStartError("port [8000] busy"))
    assert raised.value.exit_code == 1
    assert capsys.readouterr().err.strip() == "error: port [8000] busy"
    with pytest.raises(typer.Exit) as raised:
        fail("--gpu-type 'tpu' is not one of [...]")
    assert raised.value.exit_code == 2


def test_reported_ends_the_command_on_optima_errors_and_keeps_bugs():
    with pytest.raises(typer.Exit) as raised, reported():
        raise ConfigError("bad option")
    assert raised.value.exit_code == 2
    with pytest.raises(KeyError), reported():
        raise KeyError("a bug keeps its traceback")
    with pytest.raises(typer.Exit), reported(KeyError):
        raise KeyError("named types are reported")
