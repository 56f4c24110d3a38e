"""`optima eval` and `optima leaderboard` with `--backend auto`: the choice is printed, and what
the results record is the backend and weight type that ran, never "auto" (a scripted backend
stands in for the chosen one; nothing is probed or loaded)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from optima_agents.policies import BackendSpec, ScriptedPolicy, register_backend
from optima_agents.policies import auto
from optima_agents.policies.auto_choice import BackendChoice, Candidate, ProbeResult
from optima_agents.policies.registry import BACKENDS
from optima_train.cli import app


class Chosen(ScriptedPolicy):
    """Answers "<A>Nowhere</A>" and reports the weights it was built with."""

    def __init__(self, model, *, sampling=None, weights="?", **options):
        super().__init__(lambda observation: "<A>Nowhere</A>", name=model)
        self.weights = weights

    def identity(self):
        return {**super().identity(), "backend": "chosen", "dtype": self.weights}


@pytest.fixture
def chosen(monkeypatch):
    """`auto` resolves to the scripted backend "chosen" in weight type q8_0; returns the calls."""
    register_backend(BackendSpec("chosen", Chosen, options=frozenset({"dtype"}), loads_weights=False))
    calls = []
    choice = BackendChoice(ProbeResult(Candidate("chosen", "q8_0", weights="q8_0"), tokens_per_s=123.0),
                           source="cached", probed_at="2025-01-01T00:00:00")
    monkeypatch.setattr(auto, "resolve_backend", lambda model, **kwargs: calls.append((model, kwargs)) or choice)
    yield calls
    BACKENDS.unregister("chosen")


def test_eval_records_the_chosen_backend_and_weights(tmp_path, chosen):
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(app, ["eval", "--model", "smollm2-135m", "--env", "synth-hop-ia", "--backend", "auto",
                                      "--dtype", "float32", "--episodes", "2", "--max-turns", "2", "--no-progress",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert chosen == [("smollm2-135m", {"dtype": "float32"})]
    assert "backend auto: chosen q8_0: 123.0 tokens/s (cached choice, probed 2025-01-01T00:00:00" in result.output
    data = json.loads(out.read_text())
    assert (data["backend"], data["dtype"]) == ("chosen", "q8_0")
    assert data["backend_choice"]["backend"] == "chosen" and data["backend_choice"]["runs_in"] == "q8_0"


def test_eval_refuses_a_server_url_with_auto(tmp_path, chosen):
    result = CliRunner().invoke(app, ["eval", "--model", "m", "--env", "synth-hop-ia", "--backend", "auto",
                                      "--base-url", "http://127.0.0.1:1/v1", "-o", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "backend 'auto' chooses a local one" in " ".join(result.output.split())
    assert chosen == []


def test_leaderboard_plan_names_the_chosen_backend(tmp_path, chosen):
    result = CliRunner().invoke(app, ["leaderboard", "--tasks", "synth-hop-ia", "--systems", "cot", "--backend", "auto",
                                      "--dtype", "float32", "--model", "tiny=smollm2-135m", "--questions", "2",
                                      "--out", str(tmp_path / "board"), "--plan"])
    assert result.exit_code == 0, result.output
    assert len(chosen) == 1 and "backend auto for smollm2-135m: chosen q8_0: 123.0 tokens/s" in result.output
    assert "| tiny (chosen q8_0) | to compute" in result.output
