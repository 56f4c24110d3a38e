"""Where a `VLLMPolicy`'s engine runs, and what an in-process start keeps for the caller (no engine
starts here: the real engine's runs are in test_vllm_policy.py)."""

from __future__ import annotations

import os
import random
import re

import numpy as np
import pytest
import torch

from optima_agents import vllm_cpu_env
from optima_agents.policies import vllm_process
from optima_agents.policies.vllm_process import choose_in_process, engine_environment
from optima_agents.vllm_cpu_env import MULTIPROCESSING

KEY = "OPTIMA_TEST_ENGINE_SETTING"


@pytest.fixture
def small_machine(monkeypatch):
    monkeypatch.setattr(vllm_cpu_env, "usable_cores", lambda: [0, 1])
    monkeypatch.setattr(vllm_process, "_live", 0)  # whatever engines this test session runs


@pytest.fixture
def one_live_engine(monkeypatch):
    monkeypatch.setattr(vllm_process, "_live", 1)
    monkeypatch.setattr(vllm_process, "_held", {MULTIPROCESSING: "0"})


class TestChoice:
    def test_auto_runs_in_process_on_a_small_vllm_cpu_machine(self, small_machine):
        assert choose_in_process("auto", on_vllm_cpu=True) is True
        assert choose_in_process("auto", on_vllm_cpu=False) is False  # a GPU build keeps vLLM's processes

    def test_auto_keeps_vllms_processes_on_a_large_machine(self, monkeypatch):
        monkeypatch.setattr(vllm_cpu_env, "usable_cores", lambda: list(range(32)))
        monkeypatch.setattr(vllm_process, "_live", 0)
        assert choose_in_process("auto", on_vllm_cpu=True) is False

    def test_auto_starts_out_of_process_while_an_in_process_engine_is_live(self, small_machine, one_live_engine):
        assert choose_in_process("auto", on_vllm_cpu=True) is False

    def test_a_second_in_process_engine_is_refused_with_the_fix(self, one_live_engine):
        with pytest.raises(RuntimeError, match=re.escape("Close that policy first, or pass in_process=False")):
            choose_in_process(True, on_vllm_cpu=True)
        assert choose_in_process(False, on_vllm_cpu=True) is False

    def test_a_bad_value_is_refused(self):
        with pytest.raises(ValueError, match=re.escape("in_process must be True, False or 'auto', got 'yes'")):
            choose_in_process("yes", on_vllm_cpu=True)


class TestEnvironment:
    def test_a_start_sets_the_defaults_for_itself_only(self, monkeypatch):
        monkeypatch.delenv(KEY, raising=False)
        with engine_environment({KEY: "0"}, in_process=True) as start:
            assert os.environ[KEY] == "0" and start.environment == {KEY: "0"}
        assert KEY not in os.environ  # no child process inherits it; the engine reads vLLM's cache of it

    def test_a_failed_start_leaves_the_environment_as_it_was(self, monkeypatch):
        monkeypatch.delenv(KEY, raising=False)
        with pytest.raises(OSError):
            with engine_environment({KEY: "0"}, in_process=True):
                raise OSError("the engine did not start")
        assert KEY not in os.environ

    def test_the_callers_setting_wins(self, monkeypatch):
        monkeypatch.setenv(KEY, "mine")
        with engine_environment({KEY: "0"}, in_process=False) as start:
            assert os.environ[KEY] == "mine" and start.environment == {}
        assert os.environ[KEY] == "mine"

    def test_a_start_beside_a_live_in_process_engine_runs_out_of_process_and_refills_its_cache(self, monkeypatch):
        pytest.importorskip("vllm", reason="vLLM's environment cache")
        import vllm.envs as envs

        monkeypatch.delenv(MULTIPROCESSING, raising=False)
        monkeypatch.setattr(vllm_process, "_live", 1)
        monkeypatch.setattr(vllm_process, "_held", {MULTIPROCESSING: "0"})
        try:
            with engine_environment({}, in_process=False):
                assert os.environ[MULTIPROCESSING] == "1" and envs.VLLM_ENABLE_V1_MULTIPROCESSING is True
            assert MULTIPROCESSING not in os.environ
            assert envs.VLLM_ENABLE_V1_MULTIPROCESSING is False  # what the live engine reads as it runs
        finally:
            envs.disable_envs_cache()
        assert envs.VLLM_ENABLE_V1_MULTIPROCESSING is True

    def test_the_caller_keeps_torch_set_num_threads_and_gets_its_count_back_at_close(self, monkeypatch):
        """vLLM's CPU worker replaces torch.set_num_threads with a refusal for the process's life."""
        monkeypatch.setattr(vllm_process, "_live", 0)
        monkeypatch.setattr(vllm_process, "_held", {})
        monkeypatch.setattr(vllm_process, "_threads", None)
        calls: list[int] = []

        def callers_set_num_threads(count: int) -> None:
            calls.append(count)

        monkeypatch.setattr(torch, "set_num_threads", callers_set_num_threads)
        with engine_environment({KEY: "0"}, in_process=True) as start:
            monkeypatch.delenv(KEY, raising=False)
            torch.set_num_threads = lambda count: None  # what the engine's worker does
        assert torch.set_num_threads is callers_set_num_threads  # the caller's again once the engine started
        vllm_process.started_in_process(start)
        assert vllm_process.live_in_process_engines() == 1 and vllm_process._held == {KEY: "0"}
        vllm_process.closed_in_process()
        assert vllm_process.live_in_process_engines() == 0 and vllm_process._held == {}
        assert calls == [start.num_threads]  # the count the caller had before the start

    def test_the_callers_global_generators_are_put_back(self):
        random.seed(3)
        np.random.seed(3)
        torch.manual_seed(3)
        expected = (random.random(), np.random.rand(), torch.rand(1).item())
        random.seed(3)
        np.random.seed(3)
        torch.manual_seed(3)
        with engine_environment({}, in_process=True):
            random.seed(0)  # what vLLM's engine does to the process it runs in
            np.random.seed(0)
            torch.manual_seed(0)
            random.random()
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
