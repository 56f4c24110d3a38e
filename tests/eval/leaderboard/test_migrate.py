"""Migrating a board to the current cell identity: a cell stored under the older identity (its
data folder and model path in its key) gets the key a fresh run computes, keeps its summary and
outcomes byte for byte, and the index and reports name it portably; a second run writes nothing."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from optima_envs.test import FIXTURES
from optima_eval.leaderboard import LeaderboardConfig, plan_cells, run_leaderboard, write_reports
from optima_eval.leaderboard.cells import IDENTITY_FIELDS, cell_path, identity_key, write_cell
from optima_eval.leaderboard.migrate import MigrationError, migrate_board
from optima_eval.portable_paths import Roots
from optima_eval.systems import Outcome

_HEAD = '{\n  "cell": '


def _tail(text: str) -> str:
    """A cell file's text after its description: the summary and outcomes."""
    _, end = json.JSONDecoder().raw_decode(text, len(_HEAD))
    return text[end:]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@dataclasses.dataclass
class Board:
    root: Path
    roots: Roots
    config: LeaderboardConfig
    fresh_key: str
    old_key: str
    old_path: Path
    tail: str
    command: str


@pytest.fixture
def board(tmp_path, monkeypatch) -> Board:
    """A one-cell gsm8k board made with an older identity: the data folder in the held-out
    options, the checkpoint's path in the model, no `locations`; its command names both absolutely."""
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / "gsm8k", data / "gsm8k")
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "llama"}')
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setenv("OPTIMA_DATA_DIR", str(data))
    root = tmp_path / "board"
    config = LeaderboardConfig(tasks=["gsm8k-debate"], systems=["cot"], models=[f"trained={checkpoint}"],
                               dtype="float32", questions=2, output_dir=str(root), max_new_tokens=16,
                               env_kwargs={"gsm8k-debate": {"data_dir": str(data / "gsm8k")}})
    cell = plan_cells(config)[0]
    outcomes = [Outcome(i, f"q{i}", "42", 0.0, True, 7) for i in range(2)]
    result = write_cell(cell, root, outcomes, seconds=1.0)
    command = f"OPTIMA_DATA_DIR={data} optima leaderboard --model trained={checkpoint} --out {root}"
    write_reports([result], root, command=command)

    old = dict(result.description)
    old.pop("locations")
    held = {k: v for k, v in old["heldout"].items() if k != "data"}
    old["heldout"] = {**held, "env_kwargs": {**held["env_kwargs"], "data_dir": str(data / "gsm8k")}}
    old["model"] = {"model": str(checkpoint), **old["model"], "path": str(checkpoint)}
    old["key"] = identity_key({k: old[k] for k in IDENTITY_FIELDS if k in old})
    text = result.path.read_text()
    old_path = cell_path(root, "gsm8k-debate", "cot", "trained", old["key"])
    old_path.write_text(_HEAD + json.dumps(old, indent=2).replace("\n", "\n  ") + _tail(text))
    result.path.unlink()
    index = json.loads((root / "leaderboard.json").read_text())
    index["cells"][0].update(cell=old_path.relative_to(root).as_posix(), key=old["key"], heldout=old["heldout"])
    (root / "leaderboard.json").write_text(json.dumps(index, indent=2))
    return Board(root, Roots(data=data, models=None, project=tmp_path, home=None), config, cell.key, old["key"],
                 old_path, _tail(text), command)


def test_an_older_cell_gets_the_key_a_fresh_run_computes(board):
    assert board.old_key != board.fresh_key
    report = migrate_board(board.root, board.roots)
    assert report.changed == {board.old_key: board.fresh_key}
    [stored] = list((board.root / "cells").rglob("*.json"))
    assert stored.name == f"trained-{board.fresh_key}.json" and not board.old_path.exists()
    text = stored.read_text()
    assert _tail(text) == board.tail  # summary and outcomes byte for byte
    cell = json.loads(text)["cell"]
    assert cell["key"] == board.fresh_key and "path" not in cell["model"] and "model" not in cell["model"]
    assert "data_dir" not in cell["heldout"]["env_kwargs"] and cell["heldout"]["data"]["files"] == 1
    assert cell["locations"] == {"model": "ckpt", "data": ["$OPTIMA_DATA_DIR/gsm8k/test.jsonl"]}


def test_the_index_and_reports_name_the_new_key_and_no_folder_of_this_machine(board, tmp_path):
    migrate_board(board.root, board.roots)
    [entry] = json.loads((board.root / "leaderboard.json").read_text())["cells"]
    assert entry["key"] == board.fresh_key and entry["cell"].endswith(f"trained-{board.fresh_key}.json")
    # the data folder is inside the project here, so the variable's value is written relative to it
    assert entry["command"] == "OPTIMA_DATA_DIR=data optima leaderboard --model trained=ckpt --out board"
    for name, data in _files(board.root).items():
        if not name.endswith(".png"):
            assert str(tmp_path) not in data.decode(), name
    table = (board.root / "leaderboard_gsm8k-debate.md").read_text()
    assert f"`{entry['command']}`" in table and "data `$OPTIMA_DATA_DIR/gsm8k/test.jsonl`" in table


def test_a_second_migration_writes_nothing(board):
    migrate_board(board.root, board.roots)
    before = _files(board.root)
    assert migrate_board(board.root, board.roots).written == []
    assert _files(board.root) == before


def test_a_rescore_after_the_migration_finds_the_cell_and_rewrites_no_report(board):
    migrate_board(board.root, board.roots)
    before = _files(board.root)

    def no_model(model):
        raise AssertionError("a rescore runs no model")

    run = run_leaderboard(dataclasses.replace(board.config, rescore=True), policy_factory=no_model,
                          log=lambda _: None)
    assert len(run.cached) == 1 and not run.skipped and not run.rescored
    write_reports([], board.root, every_task=True)
    assert _files(board.root) == before


def test_refs_follow_the_new_key(board, tmp_path):
    ref = tmp_path / "repeats.json"
    ref.write_text(json.dumps({"cell": f"cells/gsm8k-debate/cot/trained-{board.old_key}.json",
                               "run_dir": str(tmp_path / "runs" / "a")}))
    migrate_board(board.root, board.roots, refs=[ref])
    assert json.loads(ref.read_text()) == {"cell": f"cells/gsm8k-debate/cot/trained-{board.fresh_key}.json",
                                           "run_dir": "runs/a"}


def test_a_cell_whose_data_is_missing_stops_the_migration_before_anything_is_written(board, tmp_path):
    shutil.rmtree(tmp_path / "data" / "gsm8k")
    before = _files(board.root)
    with pytest.raises(MigrationError, match=f"cell {board.old_key} .*its data cannot be read here"):
        migrate_board(board.root, board.roots)
    assert _files(board.root) == before
