"""The one-process benchmark's report and argument checks (the engine runs are the benchmark's own)."""

from __future__ import annotations

import pytest

from benchmarks.vllm_in_process import main, markdown, summarise


def runs() -> dict:
    def run(start, rate, wall):
        return {"start_s": start, "tokens_per_s": rate, "wall_s": wall, "score": 0.04, "tokens": 40000}

    return {"one process": [run(34.0, 280.0, 190.0), run(33.0, 270.0, 195.0), run(36.0, 290.0, 185.0)],
            "vLLM's processes": [run(50.0, 250.0, 230.0), run(51.0, 240.0, 232.0), run(49.0, 245.0, 228.0)]}


def test_the_summary_takes_medians_per_mode():
    summary = summarise(runs())
    assert summary["one process"]["start_s_median"] == 34.0
    assert summary["one process"]["tokens_per_s_median"] == 280.0
    assert summary["vLLM's processes"]["wall_s_median"] == 230.0
    assert summary["vLLM's processes"]["tokens_per_s"] == [250.0, 240.0, 245.0]


def test_the_report_sets_each_mode_against_vllms_processes():
    payload = {"command": "python benchmarks/vllm_in_process.py", "model": "smollm2-135m", "env": "synth-hop-ia",
               "episodes": 128, "repeats": 3, "dtype": "bfloat16", "temperature": 0.5, "max_new_tokens": 64,
               "results": summarise(runs()), "machine": {"cpu_kind": "AVX512-BF16", "cpus": 2}}
    text = markdown(payload)
    assert "| one process | 34.0 | 280.0 | 280, 270, 290 | 190.0 | 1.14x, 0.68x |" in text
    assert "| vLLM's processes | 50.0 | 245.0 | 250, 240, 245 | 230.0 | 1.00x, 1.00x |" in text
    assert "median of 3" in text and "AVX512-BF16, 2 cores" in text


@pytest.mark.parametrize("flags", [["--episodes", "0"], ["--repeats", "0"]])
def test_empty_runs_are_refused_before_any_engine_starts(flags, capsys):
    with pytest.raises(SystemExit):
        main(flags)
    assert "must be at least 1" in capsys.readouterr().err
