"""Cells made by another stack: a valid file becomes a board row beside computed cells, and
every kind of bad file is refused with a message that names the fault, before any cell is stored."""

from __future__ import annotations

import copy
import json
import re

import pytest
from typer.testing import CliRunner

from optima_envs.errors import ConfigError
from optima_eval.heldout import HeldOut
from optima_eval.leaderboard import run_leaderboard, write_reports
from optima_eval.leaderboard.external import import_external
from optima_train.cli import app
from tests.eval.leaderboard.test_leaderboard_runner import _config, _factory, gold  # noqa: F401  (fixture)

COUNT, SEED = 6, 1_000_000


def external(scores=(1.0, 0.0, 1.0, None, 1.0, 0.0)) -> dict:
    questions = HeldOut("synth-hop-ia", {"split": "validation"}, count=COUNT, seed=SEED).questions()
    return {"optima_external_cell": 1, "task": "synth-hop-ia",
            "heldout": {"count": COUNT, "seed": SEED, "first_index": 0},
            "system": "verifiers-grpo", "model": "vf-ckpt", "dtype": "bfloat16", "made_by": "vf-eval optima-synth-hop",
            "source": {"stack": "verifiers", "version": "0.4.0"},
            "outcomes": [{"position": q.position, "instance_id": q.instance.instance_id, "score": s, "tokens": 10 + i,
                          "answer": "Kelo"} for i, (q, s) in enumerate(zip(questions, scores))]}


def write(tmp_path, data, name="cell.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_an_external_cell_is_a_board_row(tmp_path):
    board = tmp_path / "board"
    args = ["leaderboard", "--tasks", "synth-hop-ia", "--systems", "none", "--external",
            str(write(tmp_path, external())), "--out", str(board)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 imported" in result.output
    entry, = json.loads((board / "leaderboard.json").read_text())["cells"]
    assert (entry["system"], entry["model"], entry["dtype"]) == ("verifiers-grpo", "vf-ckpt", "bfloat16")
    assert entry["score"]["mean"] == pytest.approx(3 / 5)  # the unscorable answer is counted apart
    assert entry["counts"] == {"questions": 6, "scored": 5, "infra_failures": 0, "scoring_failures": 1}
    assert entry["tokens"]["mean"] == pytest.approx(12.5)
    assert "verifiers-grpo" in (board / "leaderboard_synth-hop-ia.md").read_text()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0
    assert json.loads((board / "leaderboard.json").read_text())["cells"][0]["key"] == entry["key"]


def test_it_sits_beside_computed_cells_on_the_same_questions(tmp_path, gold):
    config = _config(tmp_path, systems=["cot"])
    run = run_leaderboard(config, policy_factory=_factory(gold, []), log=lambda _: None)
    imported = import_external(write(tmp_path, external()), config.output_dir)
    write_reports([*run.results, imported], config.output_dir)
    rows = json.loads((tmp_path / "board" / "leaderboard.json").read_text())["cells"]
    assert sorted(r["system"] for r in rows) == ["cot", "verifiers-grpo"]
    assert rows[0]["heldout"] == rows[1]["heldout"]


def broken(change):
    data = external()
    change(data)
    return data


BAD = {
    "missing": (lambda d: d.pop("outcomes"), "missing ['outcomes']"),
    "unknown": (lambda d: d.update(extra=1), "unknown ['extra']"),
    "version": (lambda d: d.update(optima_external_cell=2), "reads format 1"),
    "task": (lambda d: d.update(task="no-such-task"), "unknown task 'no-such-task'"),
    "question": (lambda d: d["outcomes"][2].update(instance_id="other"), "is not the held-out question at position 2"),
    "score": (lambda d: d["outcomes"][0].update(score=1.5), "score must be a number in [0, 1]"),
    "tokens": (lambda d: d["outcomes"][0].update(tokens=-1), "tokens must be an int >= 0"),
    "twice": (lambda d: d["outcomes"].append(copy.deepcopy(d["outcomes"][0])), "position 0 is answered twice"),
    "gap": (lambda d: d["outcomes"].pop(4), "1 of 6 held-out questions have no outcome (positions [4])"),
    "location": (lambda d: d["heldout"].update(env_kwargs={"data_dir": "/data"}), "--set synth-hop-ia.data_dir="),
    "name": (lambda d: d.update(system="sc:k=4"), "system must be a non-empty name without ':'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_refused_and_stores_nothing(tmp_path, case):
    change, message = BAD[case]
    path = write(tmp_path, broken(change))
    with pytest.raises(ConfigError, match=re.escape(message)):
        import_external(path, tmp_path / "board")
    assert not (tmp_path / "board").exists()


def test_the_command_refuses_a_bad_file_before_running_any_model(tmp_path):
    path = tmp_path / "cell.json"
    path.write_text("{not json")
    result = CliRunner().invoke(app, ["leaderboard", "--tasks", "synth-hop-ia", "--systems", "cot",
                                      "--external", str(path), "--out", str(tmp_path / "board")])
    assert result.exit_code == 2
    assert "not JSON" in result.output and not (tmp_path / "board").exists()
    nothing = CliRunner().invoke(app, ["leaderboard", "--tasks", "synth-hop-ia", "--systems", "none"])
    assert nothing.exit_code == 2 and "give --external" in nothing.output
