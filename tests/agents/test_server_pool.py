"""`ReplicaPool` and `ReplicaPoolConfig` without a model: command lines, device assignment, and the
lifecycle (concurrent start, failed start, death while serving, stop, signals) on stand-in
server processes.

The stand-in (`FAKE_SERVER`) is a real process started from the `VLLMServer` the pool built: its
command keeps every vLLM argument and only swaps `-m vllm.entrypoints...` for a script that
answers /health, /v1/models and /v1/chat/completions on `--port`, and starts a child process of
its own (as vLLM starts its engine) so that tests can see the whole process group go.

`TestReplicaRouter` checks the routing rule itself (`optima_agents.policies.routing`), with no
server: the split a pool of replicas gets from `OpenAIPolicy` is the router's doing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from optima_agents.server_pool import ReplicaPool, ReplicaPoolConfig, ReplicaPoolError
from optima_agents.servers import ServerStartError, VLLMServer
from optima_envs.errors import ConfigError

GIB = 1024**3

FAKE_SERVER = textwrap.dedent(r"""
    import http.server, json, os, subprocess, sys, threading, time
    port = int(sys.argv[sys.argv.index("--port") + 1])
    mode = os.environ.get("FAKE_MODE", "ok")
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"engine pid {engine.pid}", flush=True)
    if mode == "exit":
        print("boom: fake startup failure", flush=True)
        sys.exit(3)
    time.sleep(float(os.environ.get("FAKE_START_S", "0")))
    if mode.startswith("die_after="):
        threading.Timer(float(mode.split("=")[1]), lambda: os._exit(7)).start()
    reply_s = float(mode.split("=")[1] if mode.startswith("reply_s=") else os.environ.get("FAKE_REPLY_S", "0"))
    body = json.dumps({"id": "x", "object": "chat.completion", "usage": {"prompt_tokens": 7, "completion_tokens": 3},
                       "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [5, 6, 7],
                                    "message": {"role": "assistant", "content": "I know. <A>Kelo</A>"}}]}).encode()

    class H(http.server.BaseHTTPRequestHandler):
        def answer(self, status, payload):
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        def do_GET(self):
            if self.path == "/health":
                self.answer(503 if mode == "never" else 200, b"{}")
            else:
                self.answer(200, b'{"data": []}')
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            time.sleep(reply_s)
            self.answer(200, body)
        def log_message(self, *a):
            pass

    class S(http.server.ThreadingHTTPServer):
        request_queue_size = 256
        daemon_threads = True
        allow_reuse_address = True

    print("serving", flush=True)
    S(("127.0.0.1", port), H).serve_forever()
""")


class FakeFactory:
    """A `ServerFactory`: builds the `VLLMServer` the pool asks for, then runs `FAKE_SERVER` in its
    place; replica i gets `modes[i]` (default "ok") and the extra environment `env`.

    Modes: "ok"; "exit" (fails at startup); "never" (never healthy); "die_after=S" (exits S
    seconds after starting); "reply_s=S" (each answer takes S seconds, overriding FAKE_REPLY_S)."""

    def __init__(self, *modes: str, **env: str):
        self.modes, self.env = modes, env
        self.built: list[VLLMServer] = []

    def __call__(self, model: str, **kwargs: Any) -> VLLMServer:
        server = VLLMServer(model, **kwargs)
        mode = self.modes[len(self.built)] if len(self.built) < len(self.modes) else "ok"
        server.args = [sys.executable, "-c", FAKE_SERVER, *server.args[1:]]
        server.env = {**server.env, **self.env, "FAKE_MODE": mode}
        self.built.append(server)
        return server


@pytest.fixture
def model_dir(tmp_path: Path) -> str:
    """A folder `resolve_model` accepts (config.json only: nothing loads it)."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return str(folder)


def config(model_dir: str, tmp_path: Path, **kwargs: Any) -> ReplicaPoolConfig:
    return ReplicaPoolConfig(model=model_dir, served_model_name="tiny", log_dir=str(tmp_path / "logs"),
                             **{"replicas": 2, "startup_timeout_s": 60.0, "monitor_interval_s": None, **kwargs})


def value_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def engine_pid(replica: Any) -> int:
    """The pid of the stand-in's own child process, from its log."""
    match = re.search(r"engine pid (\d+)", replica.server.log_path.read_text())
    assert match, replica.server.log_tail()
    return int(match.group(1))


def gone(pid: int, wait_s: float = 10.0) -> bool:
    """True once `pid` no longer runs (a zombie counts as gone)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


class TestReplicaPoolConfig:
    @pytest.mark.parametrize(("kwargs", "message"), [
        ({"replicas": 0}, "replicas must be >= 1, got 0"),
        ({"port_base": 65535, "replicas": 2},
         "port_base must leave room for 2 ports in 1024..65535 (the last would be 65536), got 65535"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be >= 1, got 0"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in (0, 1], got 1.5"),
        ({"kv_cache_gib": 1.0, "gpu_memory_utilization": 0.5},
         "set kv_cache_gib (1.0) or gpu_memory_utilization (0.5), not both: vLLM takes one KV cache size"),
        ({"distributed_executor_backend": "slurm"},
         "distributed_executor_backend must be one of ['mp', 'ray', 'uni'] or None, got 'slurm'"),
        ({"extra_args": ("--port", "9000")},
         "extra_args sets --port, which the pool sets for every replica; use port_base instead "
         "(got extra_args=['--port', '9000'])"),
        ({"extra_args": ("--tensor-parallel-size=2",)},
         "extra_args sets --tensor-parallel-size, which the pool sets for every replica; use tensor_parallel_size "
         "instead (got extra_args=['--tensor-parallel-size=2'])"),
        ({"gpus_per_replica": 1, "tensor_parallel_size": 2, "data_parallel_size": 2},
         "each replica needs tensor_parallel_size x pipeline_parallel_size x data_parallel_size = 2 x 1 x 2 = 4 "
         "GPUs, but gpus_per_replica is 1; set gpus_per_replica to 4"),
        ({"gpus_per_replica": 1, "distributed_executor_backend": "ray"},
         "gpus_per_replica (1) with distributed_executor_backend='ray': Ray places the workers on its cluster's "
         "GPUs; leave gpus_per_replica out"),
        ({"gpu_ids": "0,1"}, "gpu_ids (['0', '1']) is only used with gpus_per_replica; set both"),
        ({"gpus_per_replica": 2, "gpu_ids": "3"},
         "gpus_per_replica is 2 but only 1 device ids are there to hand out (gpu_ids=['3'])"),
    ])
    def test_bad_values_name_the_field_and_the_value(self, kwargs, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            ReplicaPoolConfig(**kwargs)

    def test_extra_args_string_is_split_and_served_name_defaults_to_model(self):
        cfg = ReplicaPoolConfig(model="m", extra_args="--max-model-len 512 --seed 3")
        assert cfg.extra_args == ("--max-model-len", "512", "--seed", "3")
        assert cfg.served_name == "m" and ReplicaPoolConfig(model="m", served_model_name="n").served_name == "n"

    def test_parallel_args_only_for_non_defaults(self):
        assert ReplicaPoolConfig().parallel_args() == []
        cfg = ReplicaPoolConfig(tensor_parallel_size=8, pipeline_parallel_size=2, data_parallel_size=2,
                                distributed_executor_backend="ray", gpu_memory_utilization=0.85)
        assert cfg.parallel_args() == ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2",
                                       "--data-parallel-size", "2", "--distributed-executor-backend", "ray",
                                       "--gpu-memory-utilization", "0.85"]

    def test_devices_round_robin(self, monkeypatch):
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        assert ReplicaPoolConfig(replicas=2).device_assignment() == []
        cfg = ReplicaPoolConfig(replicas=4, gpus_per_replica=2, tensor_parallel_size=2)
        assert cfg.gpu_ids == ("0", "1", "2", "3", "4", "5", "6", "7")
        assert cfg.device_assignment() == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7")]
        cfg = ReplicaPoolConfig(replicas=3, gpus_per_replica=1, gpu_ids="5, 7")
        assert cfg.device_assignment() == [("5",), ("7",), ("5",)]

    def test_devices_default_to_the_visible_ones(self, monkeypatch):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
        cfg = ReplicaPoolConfig(replicas=2, gpus_per_replica=2)
        assert cfg.device_assignment() == [("4", "5"), ("6", "7")]

    def test_sharing_gpus_warns(self, caplog):
        with caplog.at_level("WARNING", logger="optima_agents.server_pool"):
            ReplicaPoolConfig(replicas=3, gpus_per_replica=1, gpu_ids=("0", "1"))
        assert "3 replicas x 1 GPUs each > 2 devices ['0', '1']: replicas share GPUs (round robin)" in caplog.text


class TestCommands:
    """What each replica would run: built by the real `VLLMServer`, never launched."""

    def test_defaults_add_no_parallel_options(self, model_dir, tmp_path):
        pool = ReplicaPool(config(model_dir, tmp_path, replicas=3))
        ports = [r.server.port for r in pool.replicas]
        assert len(set(ports)) == 3
        for replica in pool.replicas:
            args = replica.server.args
            assert args[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
            assert value_after(args, "--model") == model_dir and value_after(args, "--served-model-name") == "tiny"
            assert value_after(args, "--kv-cache-memory-bytes") == str(GIB)
            assert not any(a.startswith("--") and ("parallel" in a or "distributed" in a) for a in args)
            log = f"replica-{replica.index}-port-{replica.server.port}.log"
            assert replica.server.log_path == tmp_path / "logs" / log
            assert replica.gpus == () and replica.state == "built" and replica.server.process is None
        assert pool.base_urls == [f"http://127.0.0.1:{p}/v1" for p in ports]
        assert pool.client_args() == ["--backend", "openai", "--model", "tiny", "--base-url", pool.base_urls[0],
                                      "--base-url", pool.base_urls[1], "--base-url", pool.base_urls[2]]

    def test_parallel_options_and_extra_args_pass_through(self, model_dir, tmp_path):
        pool = ReplicaPool(config(model_dir, tmp_path, port_base=18100, tensor_parallel_size=2,
                                  pipeline_parallel_size=2, data_parallel_size=2, distributed_executor_backend="mp",
                                  dtype="float16", enforce_eager=True, kv_cache_gib=2.0,
                                  extra_args=("--max-model-len", "512"), env={"VLLM_LOGGING_LEVEL": "DEBUG"}))
        rpc_ports = set()
        for replica in pool.replicas:
            args = replica.server.args
            assert value_after(args, "--port") == str(18100 + replica.index)
            for flag, value in (("--tensor-parallel-size", "2"), ("--pipeline-parallel-size", "2"),
                                ("--data-parallel-size", "2"), ("--distributed-executor-backend", "mp"),
                                ("--dtype", "float16"), ("--max-model-len", "512"),
                                ("--kv-cache-memory-bytes", str(2 * GIB))):
                assert value_after(args, flag) == value, flag
            assert "--enforce-eager" in args
            rpc_ports.add(value_after(args, "--data-parallel-rpc-port"))  # vLLM's default 29550 would collide
            assert replica.server.env["VLLM_LOGGING_LEVEL"] == "DEBUG"
        assert len(rpc_ports) == 2

    def test_a_given_rpc_port_is_left_alone(self, model_dir, tmp_path):
        pool = ReplicaPool(config(model_dir, tmp_path, replicas=1, data_parallel_size=2,
                                  extra_args=("--data-parallel-rpc-port", "13345")))
        args = pool.replicas[0].server.args
        assert args.count("--data-parallel-rpc-port") == 1 and value_after(args, "--data-parallel-rpc-port") == "13345"

    def test_logprobs_are_the_processed_ones_unless_asked_otherwise(self, model_dir, tmp_path):
        args = ReplicaPool(config(model_dir, tmp_path, replicas=1)).replicas[0].server.args
        assert value_after(args, "--logprobs-mode") == "processed_logprobs"
        own = ReplicaPool(config(model_dir, tmp_path, replicas=1, extra_args=("--logprobs-mode", "raw_logits")))
        args = own.replicas[0].server.args
        assert args.count("--logprobs-mode") == 1 and value_after(args, "--logprobs-mode") == "raw_logits"

    def test_gpu_memory_utilization_replaces_the_kv_cache_bytes(self, model_dir, tmp_path):
        args = ReplicaPool(config(model_dir, tmp_path, gpu_memory_utilization=0.9)).replicas[0].server.args
        assert value_after(args, "--gpu-memory-utilization") == "0.9" and "--kv-cache-memory-bytes" not in args

    def test_gpus_per_replica_sets_each_replicas_devices(self, model_dir, tmp_path, monkeypatch):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
        pool = ReplicaPool(config(model_dir, tmp_path, replicas=4, gpus_per_replica=2, tensor_parallel_size=2))
        assert [r.server.env["CUDA_VISIBLE_DEVICES"] for r in pool.replicas] == ["0,1", "2,3", "4,5", "6,7"]
        assert [r.gpus for r in pool.replicas] == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7")]
        assert pool.replicas[1].command().startswith(f"CUDA_VISIBLE_DEVICES=2,3 {sys.executable} -m vllm.")

    def test_without_gpus_per_replica_the_environment_is_inherited(self, model_dir, tmp_path, monkeypatch):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
        pool = ReplicaPool(config(model_dir, tmp_path))
        assert all(r.server.env["CUDA_VISIBLE_DEVICES"] == "3" and r.gpus == () for r in pool.replicas)


@contextlib.contextmanager
def busy_port_after_a_free_one(tries: int = 50):
    """Hold a listening port whose predecessor is free, so replica 1 (not replica 0) is the busy one.

    An ephemeral port's predecessor may belong to another process on a shared machine; such ports are
    skipped rather than letting the pool report replica 0."""
    for _ in range(tries):
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port - 1))
            except OSError:
                busy.close()
                continue
        try:
            yield port
        finally:
            busy.close()
        return
    raise RuntimeError(f"no free port below a busy one in {tries} tries")


class TestLifecycle:
    def test_replicas_start_together_and_stop_with_their_children(self, model_dir, tmp_path):
        pool = ReplicaPool(config(model_dir, tmp_path, replicas=3), server_factory=FakeFactory(FAKE_START_S="2"))
        start = time.monotonic()
        with pool:
            took = time.monotonic() - start
            assert took < 5.0, f"3 replicas taking 2 s each started in {took:.1f} s: not concurrently"
            assert [s["state"] for s in pool.status()] == ["up"] * 3
            assert pool.alive_urls == pool.base_urls and pool.dead_urls == []
            for url in pool.base_urls:
                with urllib.request.urlopen(url.replace("/v1", "/health"), timeout=5) as response:
                    assert response.status == 200
            pids = [r.pid for r in pool.replicas] + [engine_pid(r) for r in pool.replicas]
        assert all(gone(pid) for pid in pids)
        assert [s["state"] for s in pool.status()] == ["stopped"] * 3
        assert all(r.server.log_path.exists() for r in pool.replicas)  # logs are kept
        pool.stop()  # a second stop does nothing

    def test_a_replica_that_exits_fails_the_start_and_stops_the_others(self, model_dir, tmp_path):
        pool = ReplicaPool(config(model_dir, tmp_path), server_factory=FakeFactory("never", "exit"))
        with pytest.raises(ServerStartError) as info:
            with pool:
                pytest.fail("the pool started")
        message = str(info.value)
        assert message.startswith(f"replica 1 of 2 ({pool.base_urls[1]}) failed to start: vLLM server exited with "
                                  f"code 3 during startup")
        assert "boom: fake startup failure" in message
        assert gone(pool.replicas[0].pid) and gone(engine_pid(pool.replicas[0]))
        assert [s["state"] for s in pool.status()] == ["stopped", "dead"]

    def test_a_replica_never_healthy_times_out(self, model_dir, tmp_path):
        pool = ReplicaPool(config(model_dir, tmp_path, startup_timeout_s=2.0),
                           server_factory=FakeFactory("ok", "never"))
        port = pool.replicas[1].server.port
        with pytest.raises(ServerStartError, match=re.escape(
                f"1 of 2 replicas were not healthy after 2 s (ports [{port}]); raise startup_timeout_s "
                f"(--startup-timeout) if the machine is busy.")):
            pool.start()
        assert all(gone(r.pid) for r in pool.replicas)

    def test_a_port_in_use_is_refused_before_anything_starts(self, model_dir, tmp_path):
        with busy_port_after_a_free_one() as port:
            pool = ReplicaPool(config(model_dir, tmp_path, port_base=port - 1), server_factory=FakeFactory())
            with pytest.raises(ServerStartError, match=re.escape(
                    f"port {port} on 127.0.0.1 (replica 1 of 2) is not free (Address already in use); choose another "
                    f"port_base (--port-base) or leave it out to use free ports")):
                pool.start()
        assert all(r.server.process is None and r.pid is None for r in pool.replicas)

    def test_a_replica_dying_while_serving_is_reported_and_the_others_serve_on(self, model_dir, tmp_path, caplog):
        with ReplicaPool(config(model_dir, tmp_path, monitor_interval_s=0.2), server_factory=FakeFactory()) as pool:
            dead = pool.replicas[1]
            with caplog.at_level("WARNING", logger="optima_agents.server_pool"):
                os.killpg(dead.pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while not pool.dead_urls and time.monotonic() < deadline:
                    time.sleep(0.05)
            assert pool.dead_urls == [dead.base_url] and pool.alive_urls == [pool.base_urls[0]]
            assert f"replica 1 ({dead.base_url}) exited with code -9; 1 of 2 replicas still serving." in caplog.text
            assert pool.status()[1]["state"] == "dead" and pool.status()[1]["exit_code"] == -9
            assert gone(engine_pid(dead))  # its process group was reaped
            assert pool.replicas[0].server.healthy() and pool.check() == []

    def test_serve_forever_ends_when_every_replica_is_gone(self, model_dir, tmp_path):
        factory = FakeFactory("die_after=0.5", "die_after=1.0")
        with ReplicaPool(config(model_dir, tmp_path), server_factory=factory) as pool:
            died = []
            with pytest.raises(ReplicaPoolError, match=re.escape(
                    f"all 2 replicas have exited; see their logs in {tmp_path / 'logs'}")):
                pool.serve_forever(poll_s=0.05, on_dead=died.append)
        assert [r.index for r in died] == [0, 1] and [r.exit_code for r in died] == [7, 7]

    def test_an_unhealthy_replica_is_reported_and_its_recovery_too(self, model_dir, tmp_path, caplog, monkeypatch):
        with ReplicaPool(config(model_dir, tmp_path, replicas=1), server_factory=FakeFactory()) as pool:
            replica = pool.replicas[0]
            with caplog.at_level("WARNING", logger="optima_agents.server_pool"):
                monkeypatch.setattr(replica.server, "healthy", lambda timeout_s=2.0: False)
                for _ in range(3):
                    pool.check()
                assert pool.status()[0]["state"] == "unhealthy" and pool.alive_urls == pool.base_urls
                monkeypatch.undo()
                pool.check()
            assert pool.status()[0]["state"] == "up"
            assert f"replica 0 ({replica.base_url}) is running but has not answered /health 3 times in a row" \
                in caplog.text
            assert f"replica 0 ({replica.base_url}) answers /health again" in caplog.text


_SIGNAL_SCRIPT = textwrap.dedent("""
    import json, signal, sys
    # A shell without job control starts background commands with SIGINT ignored, and Python then
    # keeps it ignored; the test is about the pool under Python's usual KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {root!r})
    from tests.agents.test_server_pool import FakeFactory
    from optima_agents.server_pool import ReplicaPool, ReplicaPoolConfig
    config = ReplicaPoolConfig(model={model!r}, replicas=2, log_dir={logs!r}, monitor_interval_s=None)
    with ReplicaPool(config, server_factory=FakeFactory()) as pool:
        print(json.dumps([r.pid for r in pool.replicas]), flush=True)
        pool.serve_forever(poll_s=0.1)
""")


class TestSignals:
    @pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, -signal.SIGINT)])
    def test_a_signal_stops_every_replica(self, model_dir, tmp_path, sig, code):
        root = str(Path(__file__).resolve().parents[2])
        script = _SIGNAL_SCRIPT.format(root=root, model=model_dir, logs=str(tmp_path / "logs"))
        process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, cwd=root)
        try:
            pids = json.loads(process.stdout.readline() or "null")
            assert pids, process.stderr.read()
            engines = [int(m) for log in (tmp_path / "logs").glob("*.log")
                       for m in re.findall(r"engine pid (\d+)", log.read_text())]
            assert len(engines) == 2
            process.send_signal(sig)
            # generous bounds: on a loaded 2-core machine the stop and the reaping can take a while
            assert process.wait(timeout=120) == code, process.stderr.read()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert all(gone(pid, wait_s=60) for pid in pids + engines)


class TestReplicaRouter:
    """The routing rule on its own: fewest in flight, ties to the URL routed the fewest so far."""

    @staticmethod
    def router(urls: int = 2, probe: Any = lambda index: True, probe_backoff_s: float = 600.0) -> Any:
        from optima_agents.policies.routing import ReplicaRouter

        return ReplicaRouter([f"http://replica-{i}/v1" for i in range(urls)], probe, probe_backoff_s=probe_backoff_s)

    @staticmethod
    def attempts(router: Any) -> list[int]:
        return [s["attempts"] for s in router.stats()]

    def test_a_batch_splits_by_counts_whatever_happens_while_it_is_sent(self):
        router = self.router()
        batch = router.reserve(24)
        assert batch == [0, 1] * 12
        for index in batch[:5]:  # replica 0 answers its first requests while the rest are sent
            router.release(router.claim(index))
        assert [router.claim(index) for index in batch[5:]] == batch[5:]
        assert self.attempts(router) == [12, 12]

    def test_odd_batches_even_out_over_calls(self):
        router = self.router(urls=3)
        for expected in ([0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2]):
            batch = router.reserve(4)
            assert batch == expected
            for index in batch:
                router.release(router.claim(index))
        assert self.attempts(router) == [4, 4, 4]

    def test_a_batch_first_fills_the_replica_with_fewer_in_flight(self):
        router = self.router()
        held = [router.acquire() for _ in range(4)]  # sent one by one: 0, 1, 0, 1
        router.release(held[1])
        router.release(held[3])
        assert held == [0, 1, 0, 1] and router.reserve(4) == [1, 1, 0, 1]

    def test_sequential_requests_alternate(self):
        router = self.router(urls=3)
        order = []
        for _ in range(7):
            order.append(router.acquire())
            router.release(order[-1])
        assert order == [0, 1, 2, 0, 1, 2, 0]

    def test_a_reservation_on_a_url_that_went_down_is_routed_again(self):
        router = self.router()
        batch = router.reserve(4)
        router.record_failure(1, "ConnectError", connection=True)
        assert [router.claim(index) for index in batch] == [0, 0, 0, 0]
        router.cancel(router.reserve(1)[0])
        assert self.attempts(router) == [4, 0] and [s["in_flight"] for s in router.stats()] == [4, 0]

    def test_a_url_due_for_a_probe_is_left_to_the_first_request(self):
        probed = []
        router = self.router(probe=lambda index: probed.append(index) or True, probe_backoff_s=0.05)
        router.record_failure(1, "ConnectError", connection=True)
        time.sleep(0.06)
        assert router.reserve(3) == [None, 0, 0]
        assert router.claim(None) == 1 and probed == [1]
        assert router.dead_urls == []


class TestPolicyOverReplicas:
    """`OpenAIPolicy` over a pool of stand-ins: the request split, and a replica killed mid-rollout."""

    def policy(self, pool: ReplicaPool) -> Any:
        from optima_agents.policies import OpenAIPolicy

        return OpenAIPolicy("tiny", base_urls=pool.base_urls, tokenizer=None, timeout_s=10.0, backoff_s=0.01,
                            probe_backoff_s=0.2)

    def test_lock_step_splits_evenly_however_fast_each_replica_answers(self, model_dir, tmp_path):
        """Replica 0 answers at once and replica 1 takes 0.3 s, so replica 0's first answers come
        back while a step's requests are still being sent; each `act` call routes its requests
        together before sending any, so the split is exact all the same."""
        from optima_agents.rollout import RolloutEngine, episode_specs

        factory = FakeFactory("reply_s=0", "reply_s=0.3")
        with ReplicaPool(config(model_dir, tmp_path), server_factory=factory) as pool:
            with self.policy(pool) as policy:
                records = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 2}, progress=False,
                                        scheduling="lock-step").run(episode_specs(40))
                stats = policy.url_stats()
        assert len(records) == 40 and not any(r.infra_failure for r in records)
        assert all(len(r.turns) == 2 for r in records)
        assert [s["attempts"] for s in stats] == [40, 40], stats
        assert [s["successes"] for s in stats] == [40, 40] and all(s["in_flight"] == 0 for s in stats)

    def test_requests_sent_one_at_a_time_alternate(self, model_dir, tmp_path):
        from tests.agents.test_openai_policy import ask

        factory = FakeFactory("reply_s=0", "reply_s=0.05")
        with ReplicaPool(config(model_dir, tmp_path), server_factory=factory) as pool:
            with self.policy(pool) as policy:
                used = [policy.act([ask(str(i), seed=i)])[0].meta["base_url"] for i in range(9)]
                used += [policy.submit(ask(str(i), seed=i)).result().meta["base_url"] for i in range(9, 12)]
        assert used == [pool.base_urls[i % 2] for i in range(12)]

    def test_requests_submitted_one_by_one_follow_load(self, model_dir, tmp_path):
        """Continuous scheduling routes each turn when it is sent: the replica that answers 30
        times faster frees its slots first and rightly takes most of the second turns."""
        from optima_agents.rollout import RolloutEngine, episode_specs

        factory = FakeFactory("reply_s=0.01", "reply_s=0.3")
        with ReplicaPool(config(model_dir, tmp_path), server_factory=factory) as pool:
            with self.policy(pool) as policy:
                records = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 2}, progress=False,
                                        scheduling="continuous").run(episode_specs(40))
                stats = policy.url_stats()
        assert len(records) == 40 and not any(r.infra_failure for r in records)
        fast, slow = (s["attempts"] for s in stats)
        assert fast + slow == 80 and fast > slow, stats

    def test_a_replica_killed_mid_rollout_loses_no_episode(self, model_dir, tmp_path, caplog):
        from optima_agents.rollout import RolloutEngine, episode_specs

        with ReplicaPool(config(model_dir, tmp_path, monitor_interval_s=0.1),
                         server_factory=FakeFactory(FAKE_REPLY_S="0.05")) as pool:
            victim = pool.replicas[1]
            with self.policy(pool) as policy, caplog.at_level("WARNING"):
                killer = threading.Thread(target=kill_after, args=(policy, victim.pid, 20), daemon=True)
                killer.start()
                engine = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 2}, max_live=8, progress=False)
                records = engine.run(episode_specs(40))
                killer.join(timeout=5)
                stats = {s["url"]: s for s in policy.url_stats()}
                deadline = time.monotonic() + 5
                while not pool.dead_urls and time.monotonic() < deadline:
                    time.sleep(0.05)
            assert len(records) == 40 and not any(r.infra_failure for r in records)
            assert all(len(r.turns) == 2 for r in records)
            assert sum(s["successes"] for s in stats.values()) == 80  # every request answered exactly once
            assert policy.dead_urls == [victim.base_url] and pool.dead_urls == [victim.base_url]
            assert stats[victim.base_url]["connection_failures"] >= 1
            assert f"OpenAIPolicy: {victim.base_url} is down" in caplog.text
            assert f"replica 1 ({victim.base_url}) exited with code -9" in caplog.text
            # the engine reports it too, in its stats and its log
            assert engine.last_stats.dead_urls == [victim.base_url]
            assert f"1 server(s) were down when the rollout ended: {victim.base_url}" in caplog.text


def kill_after(policy: Any, pid: int, successes: int) -> None:
    """SIGKILL a replica's process group once `successes` requests have been answered."""
    deadline = time.monotonic() + 120
    while sum(s["successes"] for s in policy.url_stats()) < successes and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(pid, signal.SIGKILL)
