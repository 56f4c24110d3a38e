"""The ceiling benchmark's arithmetic: FLOPs per token from a config, the layer-weighted rate,
and the fewest seconds a workload can take."""

from __future__ import annotations

import pytest

from benchmarks.machine_ceiling import ModelShapes, forward_ceiling, report, workload_ceiling_s

SMOLLM2_135M = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                "num_key_value_heads": 3, "num_hidden_layers": 30, "vocab_size": 49152}


def test_the_embedded_model_costs_about_0_27_gflop_per_token():
    shapes = ModelShapes.from_config(SMOLLM2_135M)
    assert shapes.linears()["k"] == (576, 192)
    # 30 layers of q, k, v, o, gate, up, down plus the LM head: 134.5M multiply-adds.
    assert shapes.forward_flops_per_token() == pytest.approx(2 * (30 * 3_538_944 + 576 * 49152))


def test_the_forward_rate_is_the_flop_weighted_harmonic_mean():
    shapes = ModelShapes.from_config(SMOLLM2_135M)
    same = {name: 50.0 for name in shapes.linears()}
    assert forward_ceiling(shapes, same) == pytest.approx(50.0)
    slow_head = {**same, "lm_head": 25.0}
    flops = {n: 2.0 * i * o * shapes.layer_count(n) for n, (i, o) in shapes.linears().items()}
    head_share = flops["lm_head"] / sum(flops.values())
    assert forward_ceiling(shapes, slow_head) == pytest.approx(50.0 / (1 - head_share + 2 * head_share))


def test_a_workload_ceiling_adds_decode_and_prefill_at_their_own_rates():
    assert workload_ceiling_s(1e9, decode_tokens=100, prefill_tokens=400,
                              decode_gflops=50.0, prefill_gflops=200.0) == pytest.approx(2.0 + 2.0)


def test_the_report_states_the_cpu_and_the_token_rate():
    shapes = ModelShapes.from_config(SMOLLM2_135M)
    layers = {name: 100.0 for name in shapes.linears()}
    payload = {"command": "python benchmarks/machine_ceiling.py", "cpu_kind": "AVX2", "threads": 2,
               "torch": "2.13.0", "repeats": 3, "shapes": vars(shapes),
               "forward_gflop_per_token": shapes.forward_flops_per_token() / 1e9, "weight_gb": 0.54,
               "dtypes": ["float32"], "results": {"float32": {"per_layer": {"64": layers}, "forward": {"64": 100.0}},
                                                   "copy_bandwidth_gbs": 12.0}}
    text = report(payload)
    assert "CPU: AVX2" in text and "| float32 | 64 | 100.0 | 372 |" in text
    assert "12.0 GB/s" in text and "22 tokens/s" in text


def test_uncached_prefill_counts_only_what_no_earlier_prompt_and_reply_covers():
    from benchmarks.machine_ceiling import uncached_prefill_tokens

    first = ([1, 2, 3], [4, 5])
    second_turn = ([1, 2, 3, 4, 5, 6, 7], [8])     # the first prompt + reply, then 2 new tokens
    other_episode = ([1, 2, 9], [])                 # shares the system-prompt prefix [1, 2]
    assert uncached_prefill_tokens([first]) == 3
    assert uncached_prefill_tokens([first, second_turn]) == 3 + 2
    assert uncached_prefill_tokens([first, second_turn, other_episode]) == 3 + 2 + 1
    assert uncached_prefill_tokens([second_turn, first]) == 7 + 0  # order matters: the later one is covered


def test_a_block_cache_reuses_whole_blocks_and_always_computes_the_last_token():
    from benchmarks.machine_ceiling import uncached_prefill_tokens

    first = (list(range(10)), [10, 11])
    second = (list(range(14)), [])                        # the first prompt + reply, then 2 new tokens
    assert uncached_prefill_tokens([first, second]) == 10 + 2
    assert uncached_prefill_tokens([first, second], block=4) == 10 + (14 - 12)
    assert uncached_prefill_tokens([first, second], block=8) == 10 + (14 - 8)
    again = (list(range(12)), [])                         # wholly covered: its last token still runs
    assert uncached_prefill_tokens([first, again]) == 10 + 0
    assert uncached_prefill_tokens([first, again], block=4) == 10 + (12 - 8)


def test_ceiling_rates_fall_back_to_the_fastest_measured_dtype():
    from benchmarks.machine_ceiling import ceiling_rates

    payload = {"dtypes": ["float32", "bfloat16"],
               "results": {"float32": {"forward": {"64": 150.0, "1024": 180.0}},
                           "bfloat16": {"forward": {"64": 330.0, "1024": 380.0}}}}
    assert ceiling_rates(payload, "float32") == (150.0, 180.0, "float32")
    assert ceiling_rates(payload, "fastest") == (330.0, 380.0, "bfloat16")


def test_lora_training_costs_two_passes_of_the_frozen_base_and_the_head_only_where_there_is_loss():
    from benchmarks.machine_ceiling import training_flops

    shapes = ModelShapes.from_config(SMOLLM2_135M)
    decoder, head = 2 * 30 * 3_538_944, 2 * 576 * 49152
    # rank-16 adapters on q, k, v, o, gate, up, down: 162,816 weights per layer, three products each
    adapters = 3 * 2 * 16 * (1152 + 768 + 768 + 1152 + 3 * 2112) * 30
    assert shapes.adapter_flops_per_token(16) * 3 == adapters
    assert training_flops(shapes, tokens=100, labelled=10, lora_rank=16) == pytest.approx(
        100 * (2 * decoder + adapters) + 10 * 2 * head)
    # a full fine-tune also forms every weight gradient, and has no adapters
    assert training_flops(shapes, tokens=100, labelled=10, lora_rank=None) == pytest.approx(
        100 * 3 * decoder + 10 * 2 * head)


def test_scoring_runs_the_decoder_over_the_context_and_the_head_only_at_scored_tokens():
    from benchmarks.machine_ceiling import scoring_flops

    shapes = ModelShapes.from_config(SMOLLM2_135M)
    decoder, head = shapes.decoder_flops_per_token(), shapes.head_flops_per_token()
    assert decoder + head == shapes.forward_flops_per_token()
    assert scoring_flops(shapes, [(3, 10), (3, 1)]) == pytest.approx(17 * decoder + 11 * head)
    assert scoring_flops(shapes, []) == 0


def test_each_cpu_kind_reads_its_own_ceiling_file(tmp_path, monkeypatch):
    import json

    from benchmarks import machine_ceiling

    monkeypatch.setattr(machine_ceiling, "RESULTS", tmp_path)
    (tmp_path / "machine_ceiling.json").write_text(json.dumps({"cpu_kind": "AVX512-BF16", "threads": 2}))
    (tmp_path / "machine_ceiling_avx2.json").write_text(json.dumps({"cpu_kind": "AVX2", "threads": 2}))
    assert machine_ceiling.kind_name("AVX512-BF16") == "machine_ceiling_avx512_bf16"
    assert machine_ceiling.ceiling_for("AVX2")["file"] == "machine_ceiling_avx2.json"
    assert machine_ceiling.ceiling_for("AVX512-BF16")["file"] == "machine_ceiling.json"
    assert machine_ceiling.ceiling_for("AMX") is None
    assert machine_ceiling.kind_name("AMX") == "machine_ceiling_amx"


def test_a_ceiling_file_of_another_kind_is_not_used(tmp_path, monkeypatch):
    import json

    from benchmarks import machine_ceiling

    monkeypatch.setattr(machine_ceiling, "RESULTS", tmp_path)
    (tmp_path / "machine_ceiling_avx2.json").write_text(json.dumps({"cpu_kind": "AMX"}))
    assert machine_ceiling.ceiling_for("AVX2") is None
    (tmp_path / "machine_ceiling_avx2.json").write_text("{not json")
    with pytest.raises(ValueError, match="machine_ceiling_avx2.json: not valid JSON"):
        machine_ceiling.ceiling_for("AVX2")
