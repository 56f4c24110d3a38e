"""The reliability benchmark's probes on a small scale: every row holds (kill-and-resume, which
trains models, runs only in the benchmark itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.reliability import damage, env, scoring, server, writes
from benchmarks.reliability.run import COMMAND, PROBES, markdown, result_name

ROOT = Path(__file__).resolve().parents[2]


def assert_all_held(rows) -> None:
    assert rows and all(r.tried > 0 or r.case.startswith("fault:") for r in rows)
    failures = [f"{r.case}: {r.examples}" for r in rows if r.failed]
    assert not failures, "\n".join(failures)


def test_fuzzed_env_steps_hold():
    rows = env.run(400, seed=1)
    assert_all_held(rows)
    assert sum(r.notes["steps"] for r in rows) >= 400


def test_fault_injecting_servers_lose_no_episode(tmp_path):
    rows = server.run(12, 0.4, 1, tmp_path)
    assert_all_held(rows)
    assert rows[0].tried == 12 and rows[0].notes["fault_rate"] >= 0.3


@pytest.mark.parametrize("probe", ["data", "buffers", "writes"])
def test_damage_is_reported(probe, tmp_path):
    rows = {"data": lambda: damage.data_rows(7, 1, tmp_path),
            "buffers": lambda: damage.buffer_rows(10, 1, tmp_path),
            "writes": lambda: writes.run(tmp_path)}[probe]()
    assert_all_held(rows)


def test_math_scoring_holds_under_load():
    pytest.importorskip("math_verify", reason="needs: pip install 'math-verify[antlr4_13_2]'")
    rows = scoring.run(4)
    assert_all_held(rows)
    assert rows[0].tried == 4 and rows[1].tried >= 10


def test_a_partial_run_never_replaces_the_full_result():
    assert result_name("abcde", quick=False) == result_name("edcba", quick=False) == "reliability"
    assert result_name("ce", quick=False) == "reliability_ce"
    assert result_name("abcde", quick=True) == "reliability_quick_abcde"


def test_the_report_records_the_module_command():
    settings = {"fuzz_steps": 10, "seed": 0}
    assert f"`{COMMAND} --only a` (fuzz steps 10, seed 0)" in markdown([], {"a": 1.0}, settings, 1.0)
    assert f"`{COMMAND}` (" in markdown([], dict.fromkeys(PROBES, 1.0), settings, 1.0)


def test_it_runs_as_a_module_from_the_repository_root():
    done = subprocess.run([sys.executable, "-m", "benchmarks.reliability", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {COMMAND} ")
    assert all(option in done.stdout for option in ("--kills", "--quick", "--only", "--fault-rate", "--seed"))
