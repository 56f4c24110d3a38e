"""The published board's cells keep their keys: the held-out set a cell recorded, built again
with today's code, describes itself exactly as the cell stored it, and the cell's identity hashes
to its stored key. Checked on every published cell of the generated tasks (no data files needed,
so a clean clone runs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optima_eval.heldout import HeldOut
from optima_eval.leaderboard.cells import IDENTITY_FIELDS, describe_heldout, identity_key, recorded_env_kwargs

BOARD = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "leaderboard" / "cells"
CELLS = sorted(p for task in ("synth-hop-ia", "synth-arith-debate") for p in (BOARD / task).rglob("*.json"))


def test_the_board_has_cells_to_check():
    assert len(CELLS) >= 20


@pytest.mark.parametrize("path", CELLS[::4], ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_a_published_cell_keeps_its_key(path):
    cell = json.loads(path.read_text(encoding="utf-8"))["cell"]
    recorded = cell["heldout"]
    held = HeldOut(recorded["env_id"], recorded_env_kwargs(cell), recorded["count"], recorded["seed"],
                   recorded["first_index"])
    assert describe_heldout(held) == recorded
    assert identity_key({k: cell[k] for k in IDENTITY_FIELDS if k in cell}) == cell["key"]
