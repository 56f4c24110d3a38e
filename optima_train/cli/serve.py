"""`optima serve`: N vLLM OpenAI-compatible replicas of one model, in the foreground until Ctrl-C.

    optima serve --model smollm2-135m --replicas 2 --enforce-eager
    optima serve --model meta-llama/Meta-Llama-3-8B-Instruct --replicas 8 --gpus-per-replica 1 \\
        --gpu-memory-utilization 0.9 --port-base 8000 -- --max-model-len 8192

Prints each replica's base URL and the options that send `optima rollout`, `eval` or
`leaderboard` requests to all of them (`--backend openai --model NAME --base-url URL ...`), then
serves until Ctrl-C or SIGTERM and stops every replica. A replica that dies while serving is
reported and the others keep serving; the command exits 1 when none is left. Arguments after
`--` go to every vLLM server unchanged. `--json` writes one JSON object per event (ready,
replica_died, stopped) to stdout, and the human-readable lines to stderr.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from optima_agents.server_pool import Replica, ReplicaPool, ReplicaPoolConfig
from optima_envs.errors import OptimaError
from optima_train.cli.errors import exit_code, fail, print_error

_WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


def serve(
    model: str = typer.Option("smollm2-135m", "--model", help="Registry name, model folder or hub id."),
    replicas: int = typer.Option(1, "--replicas", help="How many servers to start."),
    port_base: int | None = typer.Option(
        None, "--port-base", help="Replica i listens on PORT_BASE+i (default: free ports)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 serves other machines)."),
    served_model_name: str | None = typer.Option(
        None, "--served-model-name", help="Name clients send (default: --model)."),
    dtype: str = typer.Option("auto", "--dtype", help="vLLM --dtype (auto: bf16 where the machine runs it natively, "
                              "else float32)."),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="vLLM --enforce-eager (faster startup)."),
    kv_cache_gib: float | None = typer.Option(
        None, "--kv-cache-gib", help="KV cache per replica in GiB (default 1, for CPU)."),
    gpu_memory_utilization: float | None = typer.Option(
        None, "--gpu-memory-utilization", help="Fraction of each GPU a replica may use (GPU)."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="vLLM tensor parallel size."),
    pipeline_parallel_size: int = typer.Option(
        1, "--pipeline-parallel-size", "-pp", help="vLLM pipeline parallel size."),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp", help="vLLM data parallel size."),
    distributed_executor_backend: str | None = typer.Option(
        None, "--distributed-executor-backend", help="mp, ray (multi-node, a running Ray cluster) or uni."),
    gpus_per_replica: int | None = typer.Option(
        None, "--gpus-per-replica", help="Give each replica its own CUDA_VISIBLE_DEVICES, round robin."),
    gpus: str | None = typer.Option(None, "--gpus", help="Device ids to hand out, e.g. 0,1,2,3 (default: "
                                                          "CUDA_VISIBLE_DEVICES, else 0..N-1)."),
    log_dir: Path | None = typer.Option(
        None, "--log-dir", help="Folder of the replica logs (default: a temp folder)."),
    startup_timeout: float = typer.Option(900.0, "--startup-timeout", help="Seconds the slowest replica may take."),
    json_output: bool = typer.Option(False, "--json", help="One JSON object per event on stdout."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print each replica's command and exit."),
    vllm_args: list[str] | None = typer.Argument(None, metavar="VLLM_ARGS",
                                                 help="More vLLM server arguments, after --."),
) -> None:
    """Start N vLLM OpenAI-compatible replicas of a model and serve until Ctrl-C."""
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    try:
        config = ReplicaPoolConfig(
            model=model, served_model_name=served_model_name, dtype=dtype, enforce_eager=enforce_eager,
            replicas=replicas, host=host, port_base=port_base, log_dir=str(log_dir) if log_dir else None,
            startup_timeout_s=startup_timeout, monitor_interval_s=None, kv_cache_gib=kv_cache_gib,
            gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size,
            distributed_executor_backend=distributed_executor_backend,  # type: ignore[arg-type]
            gpus_per_replica=gpus_per_replica, gpu_ids=gpus,  # type: ignore[arg-type]  (a str is split)
            extra_args=tuple(vllm_args or ()),
        )
        pool = ReplicaPool(config)
    except (OptimaError, ValueError) as error:
        fail(error)
    if dry_run:
        for replica in pool.replicas:
            typer.echo(f"# replica {replica.index}: {_public(replica.base_url, host)}  log {replica.server.log_path}")
            typer.echo(replica.command())
        return
    with _LogTo(err):
        code = _run(pool, config, err, json_output)
    raise typer.Exit(code=code)


def _run(pool: ReplicaPool, config: ReplicaPoolConfig, err: Console, json_output: bool) -> int:
    """Start, announce, serve; returns the exit code (0 after Ctrl-C, 1 when the pool failed)."""
    emit = _Emitter(json_output)
    err.print(f"starting {config.replicas} replica{'s' * (config.replicas != 1)} of {config.served_name} "
              f"(logs in {pool.log_dir}) ...")
    try:
        with pool:
            _announce(pool, config, err, emit)
            pool.serve_forever(on_dead=lambda r: emit("replica_died", _replica_event(r, pool)))
    except KeyboardInterrupt:
        err.print("interrupted: stopped every replica")
        emit("stopped", {"reason": "interrupted", "replicas": pool.status()})
        return 0
    except SystemExit as exc:  # SIGTERM, turned into SystemExit by the pool
        err.print("terminated: stopped every replica")
        emit("stopped", {"reason": "terminated", "replicas": pool.status()})
        return exc.code if isinstance(exc.code, int) else 1
    except OptimaError as exc:  # a failed start or every replica gone; the pool has stopped them all
        print_error(str(exc))
        emit("stopped", {"reason": "error", "error": str(exc), "replicas": pool.status()})
        return exit_code(exc)
    return 0


def _announce(pool: ReplicaPool, config: ReplicaPoolConfig, err: Console, emit: Any) -> None:
    urls = [_public(url, config.host) for url in pool.base_urls]
    for replica, url in zip(pool.replicas, urls):
        gpus = f"  GPUs {','.join(replica.gpus)}" if replica.gpus else ""
        err.print(f"replica {replica.index}  {url}  pid {replica.pid}  ready in "
                  f"{replica.server.startup_s or 0.0:.1f} s{gpus}  log {replica.server.log_path}")
    client = ["--backend", "openai", "--model", config.served_name, *[a for u in urls for a in ("--base-url", u)]]
    emit("ready", {"model": config.served_name, "base_urls": urls, "client_args": client, "log_dir": str(pool.log_dir),
                   "replicas": pool.status()})
    if not emit.json:
        for url in urls:
            typer.echo(url)
        err.print("send requests to every replica with these options of optima rollout / eval / leaderboard:")
        typer.echo(" ".join(client))
    err.print("serving; press Ctrl-C to stop")


def _replica_event(replica: Replica, pool: ReplicaPool) -> dict[str, Any]:
    return {"index": replica.index, "url": replica.base_url, "exit_code": replica.exit_code,
            "log": str(replica.server.log_path), "alive_urls": pool.alive_urls}


class _Emitter:
    """Writes `{"event": ..., **fields}` lines to stdout when `json` is on; otherwise nothing."""

    def __init__(self, json_on: bool):
        self.json = json_on

    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        if self.json:
            typer.echo(json.dumps({"event": event, **fields}))
            sys.stdout.flush()


def _public(url: str, host: str) -> str:
    """The URL other machines can use: a wildcard bind address becomes this host's name."""
    if host not in _WILDCARD_HOSTS:
        return url
    return url.replace(f"//{host}:", f"//{socket.gethostname()}:", 1) if host else url


class _LogTo:
    """Shows the pool's log records (a replica died, became unhealthy) on the console while serving."""

    def __init__(self, console: Console):
        self.console = console
        self.logger = logging.getLogger("optima_agents.server_pool")

    def __enter__(self) -> "_LogTo":
        console = self.console

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                style = "yellow" if record.levelno >= logging.WARNING else "dim"
                console.print(f"[{style}]{escape(self.format(record))}[/{style}]")

        self.handler = Handler(level=logging.INFO)
        self.previous_level = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.previous_level)
