"""The rollout benchmark's markdown summary (its table and the targets, each marked met or not), and
the naming and ratios of its llama.cpp paths."""

from __future__ import annotations

import pytest

from benchmarks.rollout_throughput import (LLAMACPP_FAMILIES, LLAMACPP_WEIGHTS, PATHS, expand_paths, main, markdown,
                                           ratios)


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
    assert "| engine-vllm | 700.0 | 699, 700, 702 | 3.0 | 60.0 | 4000 | – | 7.5 | continuous |" in text
    assert "| engine-vllm tokens/s | 700.00 | 600 | yes |" in text
    assert "| engine-vllm / reference-style | 17.50 | 1.5 | yes |" in text
    assert "| engine-openai / reference-style | 1.50 | 1.3 | yes |" in text
    assert "| engine-vllm / vllm-raw | 0.88 | 0.9 | no |" in text
    assert "reference-style 1.000" in text
    assert ratios(results)["engine_vllm_over_raw"] == 0.875


def test_a_path_with_a_ceiling_shows_its_share():
    results = {"engine-vllm": {**path(700.0, scheduling="continuous"), "ceiling_s": 12.0, "ceiling_share": 0.2}}
    text = markdown(payload(results), command="x")
    assert "| engine-vllm | 700.0 | 699, 700, 702 | 3.0 | 60.0 | 4000 | 20% of 12.0 s | 7.5 | continuous |" in text


def test_a_path_that_did_not_run_leaves_its_targets_unmeasured():
    text = markdown(payload({"engine-vllm": path(70.0)}), command="x")
    assert "| engine-vllm tokens/s | 70.00 | 600 | no |" in text
    assert "| engine-vllm / reference-style | not run | 1.5 | – |" in text


class TestLlamaCppPaths:
    def test_families_expand_weight_type_by_weight_type(self):
        names = ["engine-vllm", "engine-llamacpp", "reference-style-llamacpp", "vllm-raw"]
        assert expand_paths(names, ["q4_1", "f16"]) == [
            "engine-vllm", "engine-llamacpp-q4_1", "reference-style-llamacpp-q4_1", "engine-llamacpp-f16",
            "reference-style-llamacpp-f16", "vllm-raw"]

    def test_the_unified_family_expands_beside_the_split_one(self):
        assert expand_paths(["engine-llamacpp", "engine-llamacpp-unified"], ["q4_1"]) == [
            "engine-llamacpp-q4_1", "engine-llamacpp-unified-q4_1"]

    def test_split_streams_are_compared_with_the_unified_buffer_on_the_same_weights(self):
        got = ratios({"engine-llamacpp-q4_1": path(150.0), "engine-llamacpp-unified-q4_1": path(100.0),
                      "engine-llamacpp-unified-f16": path(90.0)})
        assert got["engine_llamacpp_q4_1_split_over_unified"] == 1.5
        assert "engine_llamacpp_f16_split_over_unified" not in got  # no split row for f16

    def test_the_prefix_cache_is_compared_with_full_prefills_on_the_same_weights(self):
        assert expand_paths(["engine-llamacpp", "engine-llamacpp-nocache"], ["q4_1", "f16"]) == [
            "engine-llamacpp-q4_1", "engine-llamacpp-nocache-q4_1", "engine-llamacpp-f16", "engine-llamacpp-nocache-f16"]
        got = ratios({"engine-llamacpp-f16": path(120.0), "engine-llamacpp-nocache-f16": path(80.0),
                      "engine-llamacpp-nocache-q4_1": path(40.0)})
        assert got["engine_llamacpp_f16_cache_over_nocache"] == 1.5
        assert "engine_llamacpp_q4_1_cache_over_nocache" not in got  # no cached row for q4_1

    def test_a_named_weight_path_and_a_repeated_family_are_kept_once(self):
        names = ["reference-style-llamacpp", "engine-llamacpp-q4_1", "reference-style-llamacpp"]
        assert expand_paths(names, ["q4_1"]) == ["reference-style-llamacpp-q4_1", "engine-llamacpp-q4_1"]

    def test_every_expanded_path_is_registered(self):
        for name in expand_paths(list(LLAMACPP_FAMILIES), list(LLAMACPP_WEIGHTS)):
            assert name in PATHS

    def test_ratios_pair_the_same_weights_and_take_the_fastest_engine(self):
        results = {"engine-vllm": path(100.0), "engine-llamacpp-q4_1": path(300.0),
                   "reference-style-llamacpp-q4_1": path(150.0), "engine-llamacpp-f16": path(200.0),
                   "reference-style-llamacpp-f16": path(50.0), "engine-llamacpp-q8_0": path(250.0)}
        got = ratios(results)
        assert got["engine_llamacpp_q4_1_over_reference_llamacpp_q4_1"] == 2.0
        assert got["engine_llamacpp_f16_over_reference_llamacpp_f16"] == 4.0
        assert got["engine_llamacpp_over_reference_llamacpp"] == 2.0  # q4_1: the fastest engine with a pair
        assert got["engine_llamacpp_over_vllm"] == 3.0
        assert "engine_llamacpp_q8_0_over_reference_llamacpp_q8_0" not in got

    def test_targets(self):
        results = {"engine-vllm": path(100.0), "engine-llamacpp-q4_1": path(140.0),
                   "reference-style-llamacpp-q4_1": path(70.0)}
        text = markdown(payload(results), command="x")
        assert "| best engine-llamacpp / engine-vllm | 1.40 | 1.5 | no |" in text
        assert "| engine-llamacpp / reference-style-llamacpp, same weights | 2.00 | 1.5 | yes |" in text

    def test_without_llamacpp_rows_their_targets_are_unmeasured(self):
        text = markdown(payload({"engine-vllm": path(70.0)}), command="x")
        assert "| best engine-llamacpp / engine-vllm | not run | 1.5 | – |" in text

    def test_an_unknown_weight_type_fails_before_anything_runs(self, capsys):
        with pytest.raises(SystemExit):
            main(["--backends", "engine-llamacpp", "--llamacpp-weights", "q4_1,q5_k"])
        assert "--llamacpp-weights 'q4_1,q5_k': choose from ['q4_1', 'q8_0', 'bf16', 'f16', 'f32']" in capsys.readouterr().err


def test_ceiling_share_counts_decode_and_uncached_prefill_at_the_measured_rates(monkeypatch):
    from types import SimpleNamespace

    from benchmarks import machine_ceiling
    from benchmarks import rollout_throughput as rt

    turns = [SimpleNamespace(token_ids=(7, 8)), SimpleNamespace(token_ids=(9,))]
    records = [SimpleNamespace(turns=turns)]
    monkeypatch.setattr(machine_ceiling, "turn_prompts", lambda records, tokenizer: [[1, 2, 3], [1, 2, 3, 7, 8, 4]])
    ceiling = {"forward_gflop_per_token": 0.5, "cpu_kind": "AVX2", "dtypes": ["float32"],
               "results": {"float32": {"forward": {"64": 100.0, "1024": 200.0}}}, "file": "machine_ceiling_avx2.json"}
    result = rt.PathResult(wall_s=1.0, generated_tokens=3, turns=2, episodes=1, backend_calls=2, mean_score=0.0,
                           records=records)
    share = rt.ceiling_share(result, rt.Workload(dtype="float32"), None, ceiling)
    # decode: 3 tokens x 0.5 GFLOP at 100 GFLOP/s; prefill: 3 + 1 uncached tokens x 0.5 GFLOP at 200 GFLOP/s
    assert share["ceiling_prefill_tokens"] == 4 and share["ceiling_prompt_tokens"] == 9
    assert share["ceiling_s"] == round(3 * 0.5 / 100 + 4 * 0.5 / 200, 2)
    assert share["ceiling_share"] == round((3 * 0.5 / 100 + 4 * 0.5 / 200) / 1.0, 3)
    assert share["ceiling_file"] == "machine_ceiling_avx2.json"
    assert "`machine_ceiling_avx2.json`;" in rt.markdown(
        {"workload": {"episodes": 1, "env_id": "synth-hop-ia", "model": "m", "dtype": "float32", "max_turns": 4,
                      "max_new_tokens": 8, "repeats": 1}, "machine": {"cpus": 2}, "load_average": {"before": [0.1]},
         "results": {"engine-vllm": {"tokens_per_s": 3.0, "last_episode_s": 1.0, "generated_tokens": 3, **share}}},
        command="python benchmarks/rollout_throughput.py")
