"""The game-training collector aggregates over the seeds that reached each iteration and keeps
the runs of an earlier result when their folders are not on this machine."""

from __future__ import annotations

import json

import pytest

from benchmarks import game_training
from benchmarks.game_training import aggregate, chance, previous_runs


def _run(*scores):
    return {"iterations": [{"iteration": i, "score": s, "score_ci": [s - 0.05, s + 0.05], "tokens": 55.0,
                            "kept_dialogues": 100, "kept_examples": 200, "candidates": 1536, "uninformative": 0}
                           for i, s in enumerate(scores)]}


def test_chance_is_the_mean_of_one_over_k():
    assert chance(4, 6) == pytest.approx((1 / 4 + 1 / 5 + 1 / 6) / 3)


def test_each_iteration_is_averaged_over_the_seeds_that_reached_it():
    rows = aggregate({"informative": {0: _run(0.2, 0.3, 0.4), 1: _run(0.2, 0.2)}})["informative"]
    assert [r["seeds"] for r in rows] == [[0, 1], [0, 1], [0]]
    assert rows[1]["score"]["mean"] == pytest.approx(0.25)
    assert rows[2]["score"] == {"mean": 0.4, "stdev": 0.0, "min": 0.4, "max": 0.4, "n": 1}


def test_an_earlier_result_keeps_its_runs_and_a_new_run_replaces_the_same_seed(tmp_path, monkeypatch):
    earlier = {"command": "python benchmarks/game_training.py --run informative:0=runs/a",
               "untrained": {"score": 0.0, "tokens": 190.3, "episodes": 200,
                             "env_kwargs": {"min_candidates": 4, "max_candidates": 6}},
               "runs": {"informative": {"0": _run(0.2, 0.3), "2": _run(0.1)}},
               "evals": {"shipped": {"score": {"mean": 0.4, "low": 0.34, "high": 0.47}, "tokens": {"mean": 55.0}}}}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    runs, evals, untrained, commands = previous_runs(tmp_path / "earlier.json")
    assert sorted(runs["informative"]) == [0, 2] and evals == earlier["evals"]
    assert untrained["tokens"] == 190.3 and commands == [earlier["command"]]

    seed2 = tmp_path / "runs" / "seed2"
    (seed2 / "iter_000" / "selection").mkdir(parents=True)
    (seed2 / "summary.json").write_text(json.dumps({"iterations": [
        {"iteration": i, "heldout_score": s, "heldout_score_ci": [s, s], "heldout_tokens": 54.0,
         "kept_dialogues": 50, "kept_examples": 100} for i, s in enumerate((0.15, 0.35))]}))
    monkeypatch.setattr(game_training, "ROOT", tmp_path)
    monkeypatch.setattr(game_training, "RESULTS", tmp_path / "results")
    written = {}
    monkeypatch.setattr(game_training, "write_result", lambda name, payload: written.update(payload))
    monkeypatch.setattr(game_training, "write_report", lambda path, text: written.update(report=text))
    game_training.main(["--previous", "earlier.json", "--run", "informative:2=runs/seed2"])

    kept = written["runs"]["informative"]
    assert [it["score"] for it in kept["0"]["iterations"]] == [0.2, 0.3]
    assert [it["score"] for it in kept["2"]["iterations"]] == [0.15, 0.35]
    assert written["aggregate"]["informative"][1]["score"]["mean"] == pytest.approx(0.325)
    assert written["earlier_commands"] == [earlier["command"]]
    assert "Runs kept from an earlier collection" in written["report"]


def test_a_missing_earlier_result_is_refused_with_the_fix(tmp_path):
    with pytest.raises(SystemExit, match="no result file"):
        previous_runs(tmp_path / "nope.json")


def test_an_idpo_run_reports_its_pairs_and_its_start_not_the_untrained_pair(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "idpo"
    (run / "iter_000" / "search").mkdir(parents=True)
    (run / "iter_000" / "search" / "DONE.json").write_text(json.dumps({"trees": 256, "kept_pairs": 95}))
    (run / "summary.json").write_text(json.dumps({
        "baseline": {"score": {"mean": 0.405}, "tokens": {"mean": 55.0}, "episodes": 200,
                     "env_kwargs": {"min_candidates": 4, "max_candidates": 6},
                     "model": "/root/.cache/optima/models/smollm2-135m-referential"},
        "iterations": [{"iteration": 0, "heldout_score": 0.6, "heldout_score_ci": [0.55, 0.65],
                        "heldout_tokens": 55.0}]}))
    read = game_training.read_run(run)
    assert read["method"] == "idpo" and read["iterations"][0]["kept_pairs"] == 95
    assert read["baseline"]["model"] == "smollm2-135m-referential"  # the name, never this machine's path

    monkeypatch.setattr(game_training, "ROOT", tmp_path)
    written = {}
    monkeypatch.setattr(game_training, "write_result", lambda name, payload: written.update(payload))
    monkeypatch.setattr(game_training, "write_report", lambda path, text: written.update(report=text))
    game_training.main(["--run", "idpo:0=runs/idpo"])
    assert written["untrained"] == {}
    assert "95 pairs of 256 trees" in written["report"]
    assert "`idpo` starts from `smollm2-135m-referential`, which scores 0.405" in written["report"]


def test_held_out_picks_are_counted_per_target_letter(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    episodes = tmp_path / "evaluation" / "episodes"
    episodes.mkdir(parents=True)
    rows = [("A", "A", 1.0), ("A", "A", 1.0), ("C", "A", 0.0), ("C", "C", 1.0), ("D", "B", 0.0)]
    pq.write_table(pa.table({"gold": [json.dumps(g) for g, _, _ in rows], "final_answer": [p for _, p, _ in rows],
                             "score": [s for _, _, s in rows]}), episodes / "part-00000.parquet")
    picks = game_training.pick_counts(tmp_path)["heldout_picks"]
    assert picks == {"picked": {"A": 3, "B": 1, "C": 1}, "right": {"A": 2, "C": 1}, "targets": {"A": 2, "C": 2, "D": 1}}
    assert game_training.right_of_targets(picks) == "A:2/2 C:1/2 D:0/1"
    assert game_training.right_of_targets({"right": {"A": 1}}) == ""


def test_an_isft_stage_counts_the_listeners_kept_picks(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    stage = tmp_path / "iter_000"
    (stage / "selection").mkdir(parents=True)
    rows = [{"agent": agent, "messages": [{"role": "system", "content": "..."}, {"role": "assistant", "content": reply}]}
            for agent, reply in [("bob", "<A>C</A>"), ("bob", "<A>C</A>"), ("bob", "<A>E</A>"),
                                 ("alice", "<A>A</A>"), ("bob", "Which one?")]]
    pq.write_table(pa.Table.from_pylist(rows), stage / "selection" / "sft.parquet")
    assert game_training.pick_counts(stage) == {"sft_picks": {"C": 2, "E": 1, "other": 1}}


def test_a_run_reports_the_learning_rate_its_saved_config_holds(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"iterations": [
        {"iteration": 0, "heldout_score": 0.8, "heldout_score_ci": [0.75, 0.85], "heldout_tokens": 55.0}]}))
    assert game_training.read_run(run)["learning_rate"] is None  # no saved config: not guessed
    (run / "config.yaml").write_text("train:\n  learning_rate: 0.001\n  num_train_epochs: 1\n")
    read = game_training.read_run(run)
    assert read["learning_rate"] == 0.001
    text = game_training.report({"command": "c", "untrained": {}, "chance": 0.2, "aggregate": {},
                                 "runs": {"lr": {"0": read}}, "evals": {}})
    assert "| lr | 0 | 0 | 0.800 [0.750, 0.850] | 55.0 | None | - | 0.001 |" in text


def test_a_grpo_iteration_reports_its_learning_groups_and_sequences(tmp_path):
    (tmp_path / "iter_000").mkdir()
    (tmp_path / "summary.json").write_text(json.dumps({"iterations": [
        {"iteration": 0, "heldout_score": 0.8, "heldout_score_ci": [0.74, 0.85], "heldout_tokens": 54.0,
         "groups": 64, "zero_variance_groups": 10, "sequences": 864, "clip_fraction": 0.12, "kl": 0.01}]}))
    run = game_training.read_run(tmp_path)
    assert run["method"] == "grpo"
    it = run["iterations"][0]
    assert (it["learning_groups"], it["sequences"], it["kept_dialogues"]) == (54, 864, None)
    payload = {"untrained": {}, "chance": 0.2, "command": "c", "aggregate": {},
               "runs": {"grpo": {"0": run}}, "evals": {}}
    assert "864 sequences of 54/64 groups (GRPO)" in game_training.report(payload)


def test_an_isft_iteration_has_no_grpo_facts():
    assert game_training.grpo_facts({"iteration": 0, "kept_dialogues": 5}) == {}
