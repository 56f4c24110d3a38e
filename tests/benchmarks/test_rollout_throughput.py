"""The rollout benchmark's markdown summary: its table and the targets, each marked met or not."""

from __future__ import annotations

from benchmarks.rollout_throughput import markdown, ratios


def path(tokens_per_s: float, **extra) -> dict:
    return {"tokens_per_s": tokens_per_s, "runs_tokens_per_s": [tokens_per_s - 1, tokens_per_s, tokens_per_s + 2],
            "first_episode_s": 3.0, "last_episode_s": 60.0, "generated_tokens": 4000, "peak_rss_gib": 7.5, **extra}


def payload(results: dict) -> dict:
    return {"workload": {"episodes": 256, "env_id": "synth-hop-ia", "model": "smollm2-135m", "dtype": "float32",
                         "max_turns": 4, "max_new_tokens": 64, "repeats": 3},
            "machine": {"cpus": 2}, "load_average": {"before": [0.5, 0.4, 0.3]}, "results": results,
            "same_transcripts_as": {"path": "engine-vllm", "reference-style": 1.0}}


def test_table_and_targets():
    results = {"reference-style": path(40.0), "engine-openai": path(60.0, scheduling="continuous"),
               "engine-vllm": path(700.0, scheduling="continuous"), "vllm-raw": path(800.0)}
    text = markdown(payload(results), command="python benchmarks/rollout_throughput.py")
    assert "median of 3 run(s)" in text and "float32" in text
    assert "| engine-vllm | 700.0 | 699, 700, 702 | 3.0 | 60.0 | 4000 | 7.5 | continuous |" in text
    assert "| engine-vllm tokens/s | 700.00 | 600 | yes |" in text
    assert "| engine-vllm / reference-style | 17.50 | 1.5 | yes |" in text
    assert "| engine-openai / reference-style | 1.50 | 1.3 | yes |" in text
    assert "| engine-vllm / vllm-raw | 0.88 | 0.9 | no |" in text
    assert "reference-style 1.000" in text
    assert ratios(results)["engine_vllm_over_raw"] == 0.875


def test_a_path_that_did_not_run_leaves_its_targets_unmeasured():
    text = markdown(payload({"engine-vllm": path(70.0)}), command="x")
    assert "| engine-vllm tokens/s | 70.00 | 600 | no |" in text
    assert "| engine-vllm / reference-style | not run | 1.5 | – |" in text
