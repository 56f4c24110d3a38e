"""The iteration benchmark reads each step's time from the run directory and compares two refs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.iteration_time import breakdown, git, markdown, ratios, run_ref

SMOLLM2_135M = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                "num_key_value_heads": 3, "num_hidden_layers": 30, "vocab_size": 49152}


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


def test_a_report_whose_first_ref_is_not_the_targets_before_judges_no_target(tmp_path):
    """A rerun of two later commits compares them; the 0.5x target is about 42aece1 only."""
    first = record("891e28b", "891e28b" + "0" * 33, breakdown(fake_run(tmp_path / "a", steps(260, 86, 1, 170))))
    later = record("471482e", "471482e" + "0" * 33, breakdown(fake_run(tmp_path / "b", steps(250, 80, 1, 156))))
    payload = {"config": "c.yaml", "overrides": [], "runs": [first, later], "machine": {"cpus": 2},
               "cpu": {"cpu_capability": "AVX512", "native_bf16": True}}
    text = markdown(payload, command="x")
    assert "not judged here, the first ref is not `42aece1`; 471482e takes 0.94x the time of 891e28b" in text
    assert "**met**" not in text and "**not met**" not in text


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



@pytest.mark.model
def test_step_ceilings_price_the_work_the_run_did(tmp_path, embedded_model_dir, smollm_tokenizer):
    import datasets
    import yaml

    from benchmarks.iteration_time import step_ceilings
    from benchmarks.machine_ceiling import ModelShapes, generation_ceiling, scoring_flops, training_flops
    from optima_agents.chat import encode_text
    from optima_agents.policies import ScriptedPolicy
    from optima_agents.rollout import EpisodeSpec, rollout
    from optima_train.buffers import write_episodes

    records = rollout("synth-hop-ia", ScriptedPolicy(lambda o: "I know: " + " ".join(o["evidence"]) if o["turn"] < 2
                                                     else "<A>Kelo</A>"),
                      [EpisodeSpec(seed=0, index=0), EpisodeSpec(seed=1, index=1)], env_kwargs={"max_turns": 3},
                      progress=False)
    run = tmp_path / "run"
    write_episodes(run / "iter_000" / "generation" / "episodes", records, metadata={"writer": "test"})
    (run / "iter_000" / "generation" / "DONE.json").write_text(json.dumps({"seconds": 10.0, "generated_tokens": 40}))
    (run / "iter_000" / "selection").mkdir(parents=True)
    rows = [{"input_ids": [5] * 10, "assistant_masks": [0] * 6 + [1] * 4},
            {"input_ids": [5] * 900, "assistant_masks": [0] * 700 + [1] * 200}]
    datasets.Dataset.from_list(rows).to_parquet(str(run / "iter_000" / "selection" / "sft.parquet"))
    (run / "config.yaml").write_text(yaml.safe_dump({"model": {"name": str(embedded_model_dir)},
                                                     "train": {"max_length": 768, "num_train_epochs": 2.0},
                                                     "lora": {"enabled": True, "r": 16}}))
    shapes = ModelShapes.from_config(SMOLLM2_135M)
    rate = 0.01  # GFLOP/s: slow enough that every step's seconds are far above the 0.1 s rounding
    ceiling = {"shapes": vars(shapes), "forward_gflop_per_token": shapes.forward_flops_per_token() / 1e9,
               "cpu_kind": "AVX2", "dtypes": ["float32"], "results": {"float32": {"forward": {"64": rate, "1024": rate}}},
               "file": "machine_ceiling_avx2.json"}

    out = step_ceilings(run, ceiling)
    assert out["file"] == "machine_ceiling_avx2.json"
    # training: the long row is cut to 768 tokens (68 of them labelled), two epochs
    assert (out["trained_tokens"], out["labelled_tokens"]) == (2 * (10 + 768), 2 * (4 + 68))
    assert out["seconds"]["training"] == round(training_flops(shapes, 1556, 144, 16) / (rate * 1e9), 1)
    # scoring: each distinct utterance once, after the scorer's generation prompt (ChatML: 4 tokens)
    texts = dict.fromkeys(t.text for r in records for t in r.turns)
    lengths = [len(encode_text(smollm_tokenizer, text)) for text in texts]
    assert out["scored_texts"] == len(texts) < sum(len(r.turns) for r in records)  # "<A>Kelo</A>" repeats
    assert out["seconds"]["scoring"] == round(scoring_flops(shapes, [(4, n) for n in lengths]) / (rate * 1e9), 1)
    # generation: the backend's own count of generated tokens, the uncached prompt tokens
    expected = generation_ceiling(records, smollm_tokenizer, ceiling, "float32", decode_tokens=40)
    assert out["decode_tokens"] == 40 and out["seconds"]["generation"] == round(expected["ceiling_s"], 1)
    assert 0 < out["prefill_tokens"] < out["prompt_tokens"]  # the second turn reuses the first prompt


def test_the_report_sets_each_step_against_its_ceiling(tmp_path):
    before = record("42aece1", "a" * 40, breakdown(fake_run(tmp_path / "a", steps(600, 100, 1, 300))))
    after = record("HEAD", "c" * 40, breakdown(fake_run(tmp_path / "c", steps(300, 80, 1, 120))))
    ceiling = {"seconds": {"generation": 120.0, "scoring": 40.0, "training": 30.0}, "dtype": "bfloat16",
               "cpu_kind": "AVX512-BF16", "decode_tokens": 8000, "prefill_tokens": 9000, "prompt_tokens": 30000,
               "scored_texts": 1600, "scored_tokens": 70000, "trained_tokens": 33000, "labelled_tokens": 8000}
    payload = {"config": "c.yaml", "overrides": [], "runs": [before, {**after, "ceiling": ceiling}],
               "machine": {"cpus": 2}, "cpu": {"cpu_capability": "AVX512", "native_bf16": True}}
    text = markdown(payload, command="x")
    assert "| step | HEAD: fewest seconds, share reached |" in text  # the before ref was recorded without one
    assert "| generation | 120 s, 40% |" in text and "| training | 30 s, 25% |" in text
    assert "| **iteration** | **190 s, 38% |" not in text and "| **iteration** | **190 s, 38%** |" in text
    # the target is 0.5 x 1001 s = 500 s, so it asks for 190/500 of the ceiling
    assert "The target, 500 s for `HEAD`, asks for 38% of this machine's ceiling" in text
    assert "9000 of 30000 prompt tokens" in text
    assert "Against the machine's ceiling" not in markdown({**payload, "runs": [before, after]}, command="x")
