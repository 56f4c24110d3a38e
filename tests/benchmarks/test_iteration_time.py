"""The iteration benchmark reads each step's time from the run directory and compares two refs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.iteration_time import breakdown, git, markdown, ratios, run_ref


def fake_run(root: Path, seconds: dict[str, float], tokens: int = 8000) -> Path:
    for step, s in seconds.items():
        folder = root / "iter_000" / step
        folder.mkdir(parents=True)
        info = {"seconds": s, **({"episodes": 512, "generated_tokens": tokens} if step == "generation" else {})}
        (folder / "DONE.json").write_text(json.dumps(info))
    return root


def steps(generation, scoring, selection, training, evaluation=30.0) -> dict[str, float]:
    return {"generation": generation, "scoring": scoring, "selection": selection, "training": training,
            "evaluation": evaluation}


def test_breakdown_sums_the_iteration_without_evaluation(tmp_path):
    result = breakdown(fake_run(tmp_path, steps(600.0, 100.0, 1.0, 300.0, evaluation=200.0)))
    assert result["total_s"] == 1001.0
    assert result["seconds"] == {"generation": 600.0, "scoring": 100.0, "selection": 1.0, "training": 300.0}
    assert (result["episodes"], result["generated_tokens"]) == (512, 8000)


def test_an_unfinished_iteration_is_refused_with_its_missing_steps(tmp_path):
    seconds = steps(600.0, 100.0, 1.0, 300.0)
    del seconds["training"]
    with pytest.raises(FileNotFoundError, match=r"\['training'\].*rerun the benchmark to resume"):
        breakdown(fake_run(tmp_path, seconds))


def record(ref: str, commit: str, run: dict) -> dict:
    return {"ref": ref, "commit": commit, "load_before": 0.3, "wall_s": 900.0, **run}


def test_report_marks_the_target(tmp_path):
    before = record("42aece1", "42aece1" + "0" * 33, breakdown(fake_run(tmp_path / "a", steps(600, 100, 1, 300))))
    after = record("HEAD", "f" * 40, breakdown(fake_run(tmp_path / "b", steps(250, 50, 1, 150))))
    assert ratios(before, after)["generation"] == pytest.approx(250 / 600)
    payload = {"config": "configs/isft/synth_hop_experiment.yaml", "overrides": ["model.dtype=float32"],
               "runs": [before, after], "machine": {"cpus": 2},
               "cpu": {"cpu_capability": "AVX2", "native_bf16": False}}
    text = markdown(payload, command="python benchmarks/iteration_time.py")
    assert "| generation | 600 s | 250 s | 0.42x |" in text
    assert "| **iteration** | **1001 s** | **451 s** | **0.45x** |" in text
    assert "at most 0.5x the before time: **met** (0.45x, HEAD against 42aece1)" in text
    assert "`model.dtype=float32`" in text and "capability `AVX2`" in text

    slower = record("HEAD", "f" * 40, breakdown(fake_run(tmp_path / "c", steps(600, 100, 1, 200))))
    assert "**not met** (0.90x, HEAD against 42aece1)" in markdown({**payload, "runs": [before, slower]}, command="x")


def test_every_later_ref_is_compared_with_the_first_and_the_last_judged(tmp_path):
    before = record("42aece1", "a" * 40, breakdown(fake_run(tmp_path / "a", steps(600, 100, 1, 300))))
    middle = record("padded", "b" * 40, breakdown(fake_run(tmp_path / "b", steps(300, 100, 1, 300))))
    after = {**record("HEAD", "c" * 40, breakdown(fake_run(tmp_path / "c", steps(300, 100, 1, 99)))), "wall_s": None}
    payload = {"config": "c.yaml", "overrides": [], "runs": [before, middle, after], "machine": {"cpus": 2},
               "cpu": {"cpu_capability": "AVX512", "native_bf16": True}}
    text = markdown(payload, command="x")
    assert "| step | 42aece1 (aaaaaaaa) | padded (bbbbbbbb) | HEAD (cccccccc) | padded / 42aece1 | HEAD / 42aece1 |" in text
    assert "| training | 300 s | 300 s | 99 s | 1.00x | 0.33x |" in text
    assert "| **iteration** | **1001 s** | **701 s** | **500 s** | **0.70x** | **0.50x** |" in text
    assert "**met** (0.50x, HEAD against 42aece1)" in text
    assert "`HEAD`: read back from an earlier invocation that recorded no wall time" in text


def test_a_finished_ref_is_read_back_with_the_timing_it_recorded(tmp_path):
    commit = git("rev-parse", "HEAD^{commit}")
    fake_run(tmp_path / commit / "run", steps(600, 100, 1, 300))
    (tmp_path / commit / "timing.json").write_text(json.dumps({"load_before": 0.4, "wall_s": 1234.5}))
    result = run_ref("HEAD", "unused.yaml", [], tmp_path)  # nothing is checked out or run
    assert (result["commit"], result["wall_s"], result["load_before"], result["total_s"]) == (commit, 1234.5, 0.4, 1001.0)
    assert not (tmp_path / commit / "tree").exists()


def test_a_finished_ref_without_recorded_timing_is_read_back_without_a_wall_time(tmp_path):
    commit = git("rev-parse", "HEAD^{commit}")
    fake_run(tmp_path / commit / "run", steps(600, 100, 1, 300))
    result = run_ref("HEAD", "unused.yaml", [], tmp_path)  # nothing is checked out or run
    assert (result["wall_s"], result["load_before"], result["total_s"]) == (None, None, 1001.0)
    assert not (tmp_path / commit / "tree").exists()

