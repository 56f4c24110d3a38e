"""The repeats benchmark finds every trained stage's checkpoint and aggregates runs over seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.training_repeats import best_baseline, stage_cells, stage_checkpoints, summarize
from optima_train.config.io import dump_config, load_config
from optima_train.isft_dpo import ISFTDPOConfig


def test_an_iterative_run_has_one_checkpoint_per_iteration(tmp_path):
    stages = stage_checkpoints("isft", tmp_path, 3)
    assert [(label, name) for label, name, _ in stages] == [
        ("it0", "isft iteration 0"), ("it1", "isft iteration 1"), ("it2", "isft iteration 2")]
    assert stages[2][2] == tmp_path / "iter_002" / "training" / "checkpoint"


def test_an_isft_dpo_run_has_each_cycles_isft_then_idpo_stage(tmp_path):
    config = load_config(ISFTDPOConfig, Path("configs/isft_dpo/synth_hop_experiment.yaml"),
                         ["cycles.isft_iterations=2"])
    (tmp_path / "config.yaml").write_text(dump_config(config))
    stages = stage_checkpoints("isft-dpo", tmp_path, 2)
    assert [label for label, _, _ in stages] == ["c0-isft", "c0-idpo", "c1-isft", "c1-idpo"]
    assert stages[1][1] == "isft-dpo cycle 0, idpo stage"
    # The stage's last iteration: the iSFT stage ran two, the iDPO stage one.
    assert stages[2][2] == tmp_path / "cycle_001" / "isft" / "iter_001" / "training" / "checkpoint"
    assert stages[3][2] == tmp_path / "cycle_001" / "idpo" / "iter_000" / "training" / "checkpoint"


def test_the_spread_over_seeds_is_the_sample_deviation_and_range():
    s = summarize([0.2, 0.3, 0.4])
    assert s["mean"] == pytest.approx(0.3)
    assert s["std"] == pytest.approx(0.1)
    assert (s["min"], s["max"], s["runs"]) == (0.2, 0.4, [0.2, 0.3, 0.4])


def _cell(system, score, tokens, dtype, model="smollm2-135m", task="synth-hop-ia"):
    return {"task": task, "system": system, "model": model, "dtype": dtype,
            "score": {"mean": score}, "tokens": {"mean": tokens}}


def test_the_best_baseline_is_taken_at_the_trained_rows_precision():
    index = [_cell("sc:k=8", 0.09, 415.0, "bfloat16"), _cell("sc:k=8", 0.07, 400.0, "float32"),
             _cell("cot", 0.07, 50.0, "float32"), _cell("mas", 0.30, 60.0, "float32", model="isft-it0-seed1"),
             _cell("sc:k=8", 0.50, 10.0, "float32", task="hotpotqa-ia")]
    # The tie at 0.07 goes to fewer tokens; bf16 rows, trained rows and other tasks are not candidates.
    assert best_baseline(index, "smollm2-135m", "float32")["system"] == "cot"
    assert best_baseline(index, "smollm2-135m", "bfloat16")["score"]["mean"] == 0.09
    with pytest.raises(SystemExit, match="no float16 baseline cells"):
        best_baseline(index, "smollm2-135m", "float16")


def test_a_stage_is_read_from_the_board_for_every_seed_at_one_precision():
    index = [_cell("mas", 0.2, 60.0, "float32", model="isft-it0-seed2"),
             _cell("mas", 0.1, 80.0, "float32", model="isft-it0-seed1"),
             _cell("mas", 0.9, 10.0, "bfloat16", model="isft-it0-seed3"),
             _cell("cot", 0.5, 50.0, "float32", model="isft-it0-seed3")]
    cells = stage_cells(index, "isft", "it0", [1, 2], "float32")
    assert [c["score"]["mean"] for c in cells] == [0.1, 0.2]
    # Seed 3's only mas cell is bf16: a float32 row cannot use it.
    with pytest.raises(SystemExit, match="no float32 mas cell for isft-it0-seed3"):
        stage_cells(index, "isft", "it0", [1, 2, 3], "float32")


def test_training_facts_keep_each_finished_steps_seconds_and_counts(tmp_path):
    from benchmarks.training_repeats import facts_line, training_facts
    from optima_train.run_dir import RunDir

    run = RunDir(tmp_path)
    run.begin_step(0, "search")
    run.mark_done(0, "search", {"seconds": 12.5, "trees": 720, "kept_pairs": 130, "model": "m", "mean_gap": 1.1})
    run.begin_step(0, "training")  # begun, never finished: not a fact
    facts = training_facts("idpo", tmp_path, 2)
    assert facts == {"it0": {"search": {"seconds": 12.5, "trees": 720, "kept_pairs": 130}}, "it1": {}}
    assert facts_line("search", facts["it0"]["search"]) == "search 12 s (trees 720, kept_pairs 130)"
    assert facts_line("selection", {"seconds": None, "train_loss": 0.25}) == "selection (train_loss 0.250)"


def test_seed_facts_of_an_earlier_run_come_from_its_saved_file(tmp_path, monkeypatch):
    import benchmarks._results as results
    import benchmarks.training_repeats as repeats
    from optima_train.run_dir import RunDir

    monkeypatch.setattr(repeats, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    run_dir = tmp_path / "run"
    run = RunDir(run_dir)
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("run: {}\n")
    run.begin_step(0, "training")
    run.mark_done(0, "training", {"seconds": 10.0, "steps": 24})

    assert repeats.seed_facts("r_seed1", "isft", run_dir, 1, trained_now=False) == {
        "it0": {"training": {"seconds": 10.0, "steps": 24}}}  # nothing saved yet: read and saved
    saved = tmp_path / "results" / "r_seed1.json"
    written = saved.read_text()
    run.begin_step(0, "evaluation")
    run.mark_done(0, "evaluation", {"seconds": 5.0})
    assert "evaluation" not in repeats.seed_facts("r_seed1", "isft", run_dir, 1, trained_now=False)["it0"]
    assert saved.read_text() == written  # an earlier run's file is read, not rewritten
    assert "evaluation" in repeats.seed_facts("r_seed1", "isft", run_dir, 1, trained_now=True)["it0"]
    assert repeats.seed_facts("r_seed2", "isft", tmp_path / "gone", 1, trained_now=False) is None


def test_the_trajectory_has_one_line_per_seed_with_the_baselines_and_ceiling_of_one_precision(tmp_path):
    from benchmarks.training_repeats import trajectory
    from optima_eval.leaderboard.trajectory import Point, plot_trajectory

    def stage(model, score, tokens):
        return {"model": model, "score": {"mean": score}, "tokens": {"mean": tokens}}

    rows = [{"cells": [stage("isft-it0-seed1", 0.2, 80.0), stage("isft-it0-seed2", 0.3, 70.0)]},
            {"cells": [stage("isft-it1-seed1", 0.4, 40.0), stage("isft-it1-seed2", 0.5, 30.0)]}]
    index = [_cell("cot", 0.05, 57.0, "float32"), _cell("sc:k=4", 0.06, 200.0, "float32"),
             _cell("solo", 0.51, 20.0, "float32"), _cell("mas", 0.9, 10.0, "bfloat16"),
             _cell("mas", 0.9, 10.0, "float32", task="hotpotqa-ia")]
    runs, baselines, ceiling = trajectory(rows, index, "smollm2-135m", "float32")
    assert runs == {"seed 1": [Point("isft-it0", 80.0, 0.2), Point("isft-it1", 40.0, 0.4)],
                    "seed 2": [Point("isft-it0", 70.0, 0.3), Point("isft-it1", 30.0, 0.5)]}
    assert baselines == [Point("cot", 57.0, 0.05)]  # one point per family, this task and precision only
    assert ceiling == 0.51
    path = plot_trajectory(runs, tmp_path / "t.png", title="t", baselines=baselines, ceiling=ceiling)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="at least one run"):
        plot_trajectory({"seed 1": []}, tmp_path / "empty.png", title="t")
