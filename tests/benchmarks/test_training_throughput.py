"""The training-throughput benchmark reads every variant name it prints back to the same setting."""

from __future__ import annotations

import pytest

from benchmarks.training_throughput import DEFAULT_VARIANTS, OPTIMA_PATH, Variant


@pytest.mark.parametrize("name", [*DEFAULT_VARIANTS, OPTIMA_PATH])
def test_names_round_trip(name):
    assert Variant.parse(name).name == name


def test_the_optima_path_draws_fast_dropout_masks_at_the_default_probability():
    variant = Variant.parse(OPTIMA_PATH)
    assert (variant.dtype, variant.padding_free, variant.fast_dropout, variant.dropout) == ("bf16-weights", True, True,
                                                                                          0.05)
    assert OPTIMA_PATH in DEFAULT_VARIANTS


@pytest.mark.parametrize("name, message", [
    ("bf16 padded segmented", "segmented attention needs padding-free rows"),
    ("bf16 padding-free fast-dropout dropout 0", "fast-dropout and dropout 0 exclude each other"),
    ("bf16 padding-free dropout 0 fast-dropout", "'fast-dropout' is not one of"),
    ("int8 padded", "start with a dtype"),
])
def test_bad_names_are_refused_with_the_reason(name, message):
    with pytest.raises(ValueError, match=message):
        Variant.parse(name)


def report_payload(**overrides):
    variants = {"bf16 padding-free": {"tokens_per_s_median": 150.0, "first_loss": 0.9, "last_loss": 0.8},
                OPTIMA_PATH: {"tokens_per_s_median": 270.0, "first_loss": 0.9, "last_loss": 0.8}}
    return {"command": "python benchmarks/training_throughput.py", "model": "smollm2-135m", "source": "rows",
            "steps": 4, "batch_size": 4, "repeats": 3, "cpu_capability": "AVX512", "torch_threads": 2,
            "optima_path": OPTIMA_PATH, "reference": None, "variants": variants,
            "ceiling": {"tokens_per_s": 800.0, "dtype": "bfloat16", "cpu_kind": "AVX512-BF16",
                        "labelled_share": 0.2, "lora_rank": 16}, **overrides}


def test_the_report_sets_every_variant_against_the_ceiling_and_names_the_reference_once():
    from benchmarks.training_throughput import markdown

    text = markdown(report_payload())
    assert "| variant | tokens/s (median) | vs bf16 padding-free | share of ceiling |" in text
    assert f"| **{OPTIMA_PATH}** (Optima) | 270 | 1.80x | 34% |" in text
    assert "(800 tokens/s: bfloat16 at the 1,024-row rate, AVX512-BF16" in text and "20% of their tokens" in text
    # without a ceiling of this CPU kind the column is left out rather than guessed
    bare = markdown(report_payload(ceiling=None))
    assert "share of ceiling" not in bare and f"| **{OPTIMA_PATH}** (Optima) | 270 | 1.80x | 0.9000 |" in bare


def test_the_ceiling_counts_the_rows_labelled_share(monkeypatch, tmp_path):
    import json

    from benchmarks import machine_ceiling
    from benchmarks.training_throughput import training_ceiling

    config = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
              "num_key_value_heads": 3, "num_hidden_layers": 30, "vocab_size": 49152}
    (tmp_path / "config.json").write_text(json.dumps(config))
    payload = {"cpu_kind": "AVX2", "dtypes": ["float32"], "results": {"float32": {"forward": {"64": 100.0, "1024": 200.0}}},
               "file": "machine_ceiling_avx2.json"}
    monkeypatch.setattr(machine_ceiling, "same_cpu_ceiling", lambda: payload)
    rows = [{"input_ids": [1] * 8, "assistant_masks": [0] * 6 + [1] * 2}, {"input_ids": [1] * 2, "assistant_masks": [1, 1]}]
    out = training_ceiling(rows, tmp_path)
    shapes = machine_ceiling.ModelShapes.from_config(config)
    per_token = machine_ceiling.training_flops(shapes, 10, 4, 16) / 10
    assert out["tokens_per_s"] == pytest.approx(200e9 / per_token) and out["labelled_share"] == 0.4
    assert out["file"] == "machine_ceiling_avx2.json"
    monkeypatch.setattr(machine_ceiling, "same_cpu_ceiling", lambda: None)
    assert training_ceiling(rows, tmp_path) is None
