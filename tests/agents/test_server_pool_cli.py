"""`optima serve` through typer's test runner: argument checks, the dry run, and a foreground run on
stand-in replicas (the pool's server factory swapped for `FakeFactory`)."""

from __future__ import annotations

import functools
import json
import re
import socket
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from optima_agents.server_pool import ReplicaPool
from optima_train.cli import app
from optima_train.cli import serve as serve_cmd
from tests.agents.test_server_pool import FakeFactory, gone, model_dir  # noqa: F401  (fixture)

runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["serve", *args], env={"COLUMNS": "200"})


@pytest.fixture
def fake_pool(monkeypatch: pytest.MonkeyPatch) -> FakeFactory:
    """`optima serve` builds its pool with stand-in servers."""
    factory = FakeFactory()
    monkeypatch.setattr(serve_cmd, "ReplicaPool", functools.partial(ReplicaPool, server_factory=factory))
    return factory


class TestServeArguments:
    def test_help(self):
        result = invoke("--help")
        assert result.exit_code == 0, result.output
        for option in ("--replicas", "--port-base", "--tensor-parallel-size", "--data-parallel-size",
                       "--distributed-executor-backend", "--gpus-per-replica", "--kv-cache-gib", "--json"):
            assert option in result.output

    @pytest.mark.parametrize(("args", "message"), [
        (("--replicas", "0"), "error: replicas must be >= 1, got 0"),
        (("--gpus-per-replica", "1", "--tensor-parallel-size", "2"),
         "error: each replica needs tensor_parallel_size x pipeline_parallel_size x data_parallel_size = 2 x 1 x 1 "
         "= 2 GPUs, but gpus_per_replica is 1; set gpus_per_replica to 2"),
        (("--kv-cache-gib", "1", "--gpu-memory-utilization", "0.5"),
         "error: set kv_cache_gib (1.0) or gpu_memory_utilization (0.5), not both"),
        (("--distributed-executor-backend", "slurm"),
         "error: distributed_executor_backend must be one of ['mp', 'ray', 'uni'] or None, got 'slurm'"),
        (("--", "--port", "9000"), "error: extra_args sets --port, which the pool sets for every replica; use "
                                   "port_base instead"),
    ])
    def test_bad_values_are_refused_with_the_reason(self, model_dir, fake_pool, args, message):
        result = invoke("--model", model_dir, *args)
        assert result.exit_code == 2 and message in result.stderr, result.output
        assert "Traceback" not in result.output and fake_pool.built == []

    def test_an_unknown_model_is_refused(self):
        result = invoke("--model", "no-such-model-xyz", "--dry-run")
        assert result.exit_code == 2 and "error: " in result.stderr and "no-such-model-xyz" in result.stderr

    def test_a_vllm_option_without_the_separator_is_a_usage_error(self, model_dir):
        result = invoke("--model", model_dir, "--max-model-len", "512")
        assert result.exit_code == 2 and "No such option: --max-model-len" in result.output

    def test_dry_run_prints_each_command(self, model_dir, tmp_path):
        result = invoke("--model", model_dir, "--replicas", "2", "--port-base", "18200", "--tensor-parallel-size", "2",
                        "--gpus-per-replica", "2", "--gpus", "0,1,2,3", "--gpu-memory-utilization", "0.9",
                        "--log-dir", str(tmp_path / "logs"), "--dry-run", "--", "--max-model-len", "512")
        assert result.exit_code == 0, result.output
        commands = [line for line in result.stdout.splitlines() if not line.startswith("#")]
        assert len(commands) == 2
        for i, (command, gpus) in enumerate(zip(commands, ("0,1", "2,3"))):
            assert command.startswith(f"CUDA_VISIBLE_DEVICES={gpus} {sys.executable} -m "
                                      f"vllm.entrypoints.openai.api_server --model {model_dir} ")
            for part in (f"--port {18200 + i}", "--tensor-parallel-size 2", "--gpu-memory-utilization 0.9",
                         "--max-model-len 512"):
                assert part in command, part
        assert f"# replica 1: http://127.0.0.1:18201/v1  log {tmp_path / 'logs'}/replica-1-port-18201.log" \
            in result.stdout
        assert not (tmp_path / "logs").exists()  # nothing was started


class TestServeForeground:
    def test_prints_the_urls_and_client_options_then_stops_on_ctrl_c(self, model_dir, fake_pool, monkeypatch):
        monkeypatch.setattr(ReplicaPool, "serve_forever", lambda self, **kw: (_ for _ in ()).throw(KeyboardInterrupt))
        result = invoke("--model", model_dir, "--served-model-name", "tiny", "--replicas", "2")
        assert result.exit_code == 0, result.output
        urls = [s.base_url for s in fake_pool.built]
        assert result.stdout.splitlines() == [*urls, f"--backend openai --model tiny --base-url {urls[0]} "
                                                     f"--base-url {urls[1]}"]
        assert "starting 2 replicas of tiny" in result.stderr and "interrupted: stopped every replica" in result.stderr
        assert all(s.process is None for s in fake_pool.built)

    def test_json_events_and_a_dying_replica_reported(self, model_dir, monkeypatch):
        factory = FakeFactory("die_after=0.5", "die_after=1.5")
        monkeypatch.setattr(serve_cmd, "ReplicaPool", functools.partial(ReplicaPool, server_factory=factory))
        monkeypatch.setattr(ReplicaPool, "serve_forever", functools.partialmethod(ReplicaPool.serve_forever, 0.1))
        result = invoke("--model", model_dir, "--served-model-name", "tiny", "--replicas", "2", "--json")
        assert result.exit_code == 1, result.output
        events = [json.loads(line) for line in result.stdout.splitlines()]
        urls = [s.base_url for s in factory.built]
        assert [e["event"] for e in events] == ["ready", "replica_died", "replica_died", "stopped"]
        ready, first, second, stopped = events
        assert ready["base_urls"] == urls and ready["model"] == "tiny"
        assert ready["client_args"] == ["--backend", "openai", "--model", "tiny", "--base-url", urls[0],
                                        "--base-url", urls[1]]
        assert [r["state"] for r in ready["replicas"]] == ["up", "up"]
        assert (first["index"], first["exit_code"], first["alive_urls"]) == (0, 7, [urls[1]])
        assert (second["index"], second["alive_urls"]) == (1, [])
        assert stopped["reason"] == "error" and stopped["error"].startswith("all 2 replicas have exited")
        assert re.search(rf"replica 0 \({re.escape(urls[0])}\) exited with code 7; 1 of 2 replicas still serving",
                         result.stderr)

    def test_a_port_in_use_is_a_clear_error(self, model_dir, fake_pool):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            result = invoke("--model", model_dir, "--replicas", "2", "--port-base", str(port))
        assert result.exit_code == 1, result.output
        assert f"error: port {port} on 127.0.0.1 (replica 0 of 2) is not free (Address already in use); choose " \
               f"another port_base (--port-base) or leave it out to use free ports" in result.stderr
        assert all(s.process is None for s in fake_pool.built)
