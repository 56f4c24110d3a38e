"""Comparing two trained systems: the paired bootstrap's difference and interval, the refusal of
runs on different questions, and a side read from the board's cells by model label."""

from __future__ import annotations

import json

import pytest

from benchmarks import compare_training
from benchmarks.compare_training import check_same_questions, paired_bootstrap


def _run(scores, tokens=50.0, ids=None):
    ids = ids or [f"q{i}" for i in range(len(scores))]
    return [{"position": i, "instance_id": q, "score": s, "score_ok": True, "tokens": tokens}
            for i, (q, s) in enumerate(zip(ids, scores))]


def test_a_side_that_is_right_where_the_other_is_wrong_wins_by_the_whole_gap():
    a = [_run([1, 1, 1, 1, 0] * 8), _run([1, 1, 1, 0, 0] * 8)]
    b = [_run([0, 0, 1, 0, 0] * 8), _run([0, 0, 1, 0, 0] * 8)]
    d = paired_bootstrap(a, b, "score", samples=500, seed=0)
    assert d["diff"] == pytest.approx(0.7 - 0.2)
    assert 0 < d["low"] < d["diff"] < d["high"] <= 1


def test_identical_sides_differ_by_exactly_zero_in_every_resample():
    a = [_run([1, 0, 1, 0, 1, 1])]
    d = paired_bootstrap(a, a, "score", samples=200, seed=3)
    assert d["diff"] == d["low"] == d["high"] == 0


def test_unscored_answers_are_left_out_of_the_score_not_counted_as_wrong():
    run = _run([1, 0, 1])
    run[1]["score_ok"] = False
    assert compare_training.seed_mean([run], "score", range(3)) == 1.0


def test_runs_on_different_questions_are_refused():
    with pytest.raises(SystemExit, match="same held-out questions"):
        check_same_questions([[_run([1, 0])], [_run([1, 0], ids=["q0", "x"])]])


def _board(tmp_path):
    """A board of one task: an untrained baseline, two seeds of each trained system."""
    cells, heldout = [], {"env_kwargs": {"split": "validation"}, "count": 10, "seed": 1, "first_index": 0}
    systems = {"base-sc": ([1] * 1 + [0] * 9, 250.0, "smollm2-135m", "sc"),
               "a-seed0": ([1] * 9 + [0], 40.0, "a-seed0", "mas"), "a-seed1": ([1] * 8 + [0] * 2, 42.0, "a-seed1", "mas"),
               "b-seed0": ([1] * 6 + [0] * 4, 55.0, "b-seed0", "mas"), "b-seed1": ([1] * 7 + [0] * 3, 55.0, "b-seed1", "mas")}
    for name, (scores, tokens, model, system) in systems.items():
        path = f"cells/game/{system}/{name}.json"
        (tmp_path / "board" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "board" / path).write_text(json.dumps({"outcomes": _run(scores, tokens)}))
        mean = sum(scores) / len(scores)
        cells.append({"task": "game", "system": system, "model": model, "dtype": "bfloat16", "cell": path,
                      "heldout": heldout, "score": {"mean": mean, "low": mean - 0.1, "high": mean + 0.1},
                      "tokens": {"mean": tokens}})
    for real in [c for c in cells if c["model"] in ("a-seed0", "smollm2-135m")]:  # ablations filed after them
        cells.append({**real, "cell": real["cell"].replace(".json", "-swap.json"), "ablation": "swap",
                      "ablates": real["cell"], "score": {"mean": 0.95, "low": 0.9, "high": 1.0}})
    (tmp_path / "board" / "leaderboard.json").write_text(json.dumps({"cells": cells}))


def test_board_cells_named_by_label_make_the_two_sides_and_ablations_are_not_taken_for_them(tmp_path, monkeypatch):
    _board(tmp_path)
    monkeypatch.setattr(compare_training, "ROOT", tmp_path)
    written = {}
    monkeypatch.setattr(compare_training, "write_result", lambda name, payload: written.update(name=name, **payload))
    monkeypatch.setattr(compare_training, "write_report", lambda path, text: written.update(report=text))
    compare_training.main(["--task", "game", "--dtype", "bfloat16", "--board", "board", "--samples", "200",
                           "--cells", "grpo=a-seed0,a-seed1", "--cells", "isft=b-seed0,b-seed1", "--out", "x"])

    assert written["name"] == "x" and [r["system"] for r in written["rows"]] == ["grpo", "isft"]
    assert written["rows"][0]["score"]["runs"] == [0.9, 0.8]
    assert written["difference"]["score"]["diff"] == pytest.approx(0.85 - 0.65)
    assert written["difference"]["tokens"]["diff"] == pytest.approx(41.0 - 55.0)
    assert written["best_baseline"]["system"] == "sc"
    assert written["rows"][1]["token_ratio"] == pytest.approx(55.0 / 250.0)
    assert "`a-seed1`: 0.800" in written["report"]


def test_the_two_sides_may_be_cells_of_different_precisions(tmp_path, monkeypatch):
    _board(tmp_path)
    path = tmp_path / "board" / "leaderboard.json"
    cells = json.loads(path.read_text())["cells"]
    path.write_text(json.dumps({"cells": [{**c, "dtype": "float32"} if c["model"].startswith("a-") else c
                                          for c in cells]}))
    monkeypatch.setattr(compare_training, "ROOT", tmp_path)
    written = {}
    monkeypatch.setattr(compare_training, "write_result", lambda name, payload: written.update(payload))
    monkeypatch.setattr(compare_training, "write_report", lambda path, text: None)
    args = ["--task", "game", "--dtype", "bfloat16", "--board", "board", "--samples", "50",
            "--cells", "grpo=a-seed0,a-seed1", "--cells", "isft=b-seed0,b-seed1", "--out", "x"]
    with pytest.raises(SystemExit, match="no bfloat16 mas cell of game for a-seed0, a-seed1"):
        compare_training.main(args)
    compare_training.main(args + ["--side-dtypes", "float32,bfloat16"])
    assert [r["score"]["runs"] for r in written["rows"]] == [[0.9, 0.8], [0.6, 0.7]]
    assert written["best_baseline"]["system"] == "sc"
    with pytest.raises(SystemExit):
        compare_training.main(args + ["--side-dtypes", "float32"])


def test_a_label_missing_from_the_board_is_named_in_the_error(tmp_path, monkeypatch):
    _board(tmp_path)
    monkeypatch.setattr(compare_training, "ROOT", tmp_path)
    with pytest.raises(SystemExit, match="no bfloat16 mas cell of game for c-seed0"):
        compare_training.main(["--task", "game", "--dtype", "bfloat16", "--board", "board",
                               "--cells", "grpo=a-seed0,c-seed0", "--cells", "isft=b-seed0,b-seed1"])


def test_a_best_baseline_that_scored_zero_gives_no_score_ratio_rather_than_nan():
    assert compare_training.ratio(0.7, 0.0) is None and compare_training.times(None) == "n/a"
    assert compare_training.times(compare_training.ratio(24.5, 98.0)) == "0.25x"


def test_two_held_out_sets_of_one_task_must_be_told_apart_with_heldout(tmp_path, monkeypatch):
    _board(tmp_path)
    path = tmp_path / "board" / "leaderboard.json"
    cells = json.loads(path.read_text())["cells"]
    other = [{**c, "heldout": {**c["heldout"], "env_kwargs": {"split": "validation", "distractors": "2"}},
              "cell": c["cell"]} for c in cells if "ablation" not in c]
    path.write_text(json.dumps({"cells": cells + other}))
    monkeypatch.setattr(compare_training, "ROOT", tmp_path)
    args = ["--task", "game", "--dtype", "bfloat16", "--board", "board", "--samples", "50",
            "--cells", "grpo=a-seed0,a-seed1", "--cells", "isft=b-seed0,b-seed1", "--out", "x"]
    with pytest.raises(SystemExit, match="several bfloat16 mas cells of game for a-seed0.*--heldout"):
        compare_training.main(args)
    written = {}
    monkeypatch.setattr(compare_training, "write_result", lambda name, payload: written.update(payload))
    monkeypatch.setattr(compare_training, "write_report", lambda path, text: None)
    compare_training.main(args + ["--heldout", "distractors=2"])
    assert written["rows"][0]["score"]["runs"] == [0.9, 0.8]


def test_questions_are_split_by_where_their_answer_lay_on_the_rebuilt_held_out_set(tmp_path):
    import optima_envs
    from optima_envs.core.places import answer_place

    heldout = {"env_id": "synth-hop-ia", "env_version": 2, "count": 12, "seed": 1_000_000, "first_index": 0,
               "env_kwargs": {"split": "validation", "distractors": "2", "comparison_rate": "0.5", "max_turns": "4"}}
    outcomes = [{"position": i, "instance_id": f"synth-hop-validation-{i}", "answer": None, "score": 0.0,
                 "score_ok": True, "tokens": 10, "infra_failure": False, "score_error": None, "error": None,
                 "samples": [], "transcript": []} for i in reversed(range(12))]
    (tmp_path / "cell.json").write_text(json.dumps({"cell": {"heldout": heldout}, "summary": {}, "outcomes": outcomes}))
    side = compare_training.Side("a", "cells", [{"cell": "cell.json"}])
    places = compare_training.question_places(tmp_path, side)
    env = optima_envs.make("synth-hop-ia", split="validation", distractors=2, comparison_rate=0.5)
    expected: dict[str, list[int]] = {}
    for i in range(12):
        env.reset(seed=1_000_000 + i, options={"index": i})
        expected.setdefault(answer_place(env.task, env.state.instance, env.state.evidence), []).append(i)
    assert places == dict(sorted(expected.items())) and len(places) >= 2
