"""The merged-against-LoRA benchmark's arithmetic and report: the ceiling share counts the base
model's work only, and the report sets each path against the merged one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.llamacpp_lora import ceiling_share, report

CEILING = {"cpu_kind": "AVX2", "forward_gflop_per_token": 0.25, "dtypes": ["float32"],
           "results": {"float32": {"forward": {"64": 50.0, "1024": 100.0}}}}


def test_the_ceiling_share_is_the_base_models_fewest_seconds_over_the_measured():
    actions = [SimpleNamespace(token_ids=(1,) * 40, prompt_tokens=200)] * 2
    # 80 decoded tokens at 50 GFLOP/s and 400 prompt tokens at 100, 0.25 GFLOP each: 0.4 + 1.0 s.
    assert ceiling_share(actions, 2.8, CEILING) == pytest.approx(0.5)
    assert ceiling_share(actions, 2.8, None) is None


def test_the_report_sets_each_path_against_the_merged_one():
    row = {"tokens_per_s": 100.0, "every_run_s": [1.0, 1.1], "generated_tokens": 100, "identical_to_merged": 4,
           "ceiling_share": 0.4}
    payload = {"workload": {"adapter": "a", "lora_rank": 32, "prompts": 4, "max_new_tokens": 16, "threads": 2,
                            "repeats": 2},
               "machine": {"cpu_kind": "AVX2", "cpus": 2},
               "preparation": {"merge_s": 3.0, "export_f16_s": 4.5, "merged_total_s": 7.5, "lora_convert_s": 0.08},
               "results": {"merged-f16": row, "lora-over-f16": {**row, "tokens_per_s": 80.0, "ceiling_share": None}},
               "ratios": {"lora-over-f16_over_merged": 0.8}}
    text = report(payload, "python benchmarks/llamacpp_lora.py")
    assert "| lora-over-f16 | 80.0 | 1.00, 1.10 | 100 | 4/4 | – |" in text
    assert "`lora-over-f16_over_merged` 0.80x" in text
    assert "merge 3.0 s + F16 export 4.5 s = 7.5 s" in text and "0.08 s to convert" in text
