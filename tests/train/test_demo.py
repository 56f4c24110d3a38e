"""`optima demo`: the untrained and the trained pair on the same held-out games, compared."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from optima_train.cli import app
from optima_train.cli.demo import TRAINED, closing_line


def _record(score, tokens, scored=True):
    return SimpleNamespace(score=score, total_tokens=tokens, scored=scored)


def test_the_closing_line_compares_both_pairs_and_quotes_the_published_result():
    trained = [_record(1.0, 50), _record(0.0, 60), _record(None, 40, scored=False)]
    untrained = [_record(0.0, 190), _record(0.0, 190), _record(0.0, 190)]
    provenance = {"heldout": {"episodes": 200, "score": 0.405, "score_ci": [0.34, 0.475], "tokens": 55.0},
                  "untrained": {"score": 0.0, "tokens": 190.3}, "chance": 0.206,
                  "result_file": "benchmarks/results/isft_referential.json"}
    line = closing_line(trained, untrained, provenance)
    assert line.startswith("trained: 0.50 at 50 tokens per game; untrained: 0.00 at 190 (3 games here)")
    assert "On 200 held-out games (benchmarks/results/isft_referential.json): trained 0.405 [0.340, 0.475] at 55" in line
    assert "untrained 0.000 at 190; a random pick scores 0.21." in line


def test_the_shipped_trained_model_is_registered_with_its_provenance():
    from optima_agents.models.registry import AdapterSpec, get_model_spec

    spec = get_model_spec(TRAINED)
    assert isinstance(spec, AdapterSpec) and spec.base == "smollm2-135m"
    weights = spec.adapter_dir / "adapter_model.safetensors"
    assert weights.stat().st_size <= 30_000_000  # a rank-48 bf16 adapter of the 135M model: 29.4 MB
    provenance = spec.provenance()
    assert provenance["task"]["env_id"] == "referential-game" and provenance["run"]["seed"] in (0, 1, 2)
    assert provenance["command"].startswith("optima train isft --config configs/isft/referential_enumerated.yaml")
    assert [stage["command"].split(" --")[1] for stage in provenance["chain"]] == [
        "config configs/isft/referential_informative.yaml", *["config configs/isft/referential_enumerated.yaml"] * 6]
    assert provenance["heldout"]["episodes"] == 200 and provenance["heldout"]["score"] > provenance["chance"]


def test_a_base_model_is_refused_as_the_trained_one():
    result = CliRunner().invoke(app, ["demo", "--trained", "smollm2-135m", "--oracle"])
    assert result.exit_code == 2 and "is a base model, not a trained one" in result.output


def test_the_oracle_plays_the_same_games_without_a_model():
    result = CliRunner().invoke(app, ["demo", "--oracle", "--episodes", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "game 2" in result.output and "scripted oracle" in result.output


@pytest.mark.model
def test_the_demo_plays_both_pairs_on_the_same_games(embedded_model_dir):
    result = CliRunner().invoke(app, ["demo", "--episodes", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "game 1" in result.output and "game 2" in result.output and TRAINED in result.output
    assert "tokens per game; untrained:" in result.output and "(2 games here)" in result.output
