"""The reliability benchmark's probes on a small scale: every row holds (kill-and-resume, which
trains models, runs only in the benchmark itself)."""

from __future__ import annotations

import pytest

from benchmarks import _reliability_damage, _reliability_env, _reliability_server


def assert_all_held(rows) -> None:
    assert rows and all(r.tried > 0 or r.case.startswith("fault:") for r in rows)
    failures = [f"{r.case}: {r.examples}" for r in rows if r.failed]
    assert not failures, "\n".join(failures)


def test_fuzzed_env_steps_hold():
    rows = _reliability_env.run(400, seed=1)
    assert_all_held(rows)
    assert sum(r.notes["steps"] for r in rows) >= 400


def test_fault_injecting_servers_lose_no_episode(tmp_path):
    rows = _reliability_server.run(12, 0.4, 1, tmp_path)
    assert_all_held(rows)
    assert rows[0].tried == 12 and rows[0].notes["fault_rate"] >= 0.3


@pytest.mark.parametrize("probe", ["data", "buffers"])
def test_damage_is_reported(probe, tmp_path):
    rows = (_reliability_damage.data_rows(7, 1, tmp_path) if probe == "data"
            else _reliability_damage.buffer_rows(10, 1, tmp_path))
    assert_all_held(rows)
