"""`ReplicaPoolConfig`: what a `ReplicaPool` serves, on which ports and devices, with which vLLM options."""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass, field
from typing import Literal, Mapping, get_args

from optima_envs.errors import ConfigError

__all__ = ["DistributedBackend", "ReplicaPoolConfig"]

logger = logging.getLogger("optima_agents.server_pool")

DistributedBackend = Literal["mp", "ray", "uni"]

# Options the pool sets itself on every replica's command line: given again in `extra_args` they
# would silently override (argparse keeps the last) or contradict it.
_MANAGED_FLAGS = {
    "--model": "model", "--host": "host", "--port": "port_base", "--dtype": "dtype",
    "--served-model-name": "served_model_name", "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size", "--pipeline-parallel-size": "pipeline_parallel_size",
    "-pp": "pipeline_parallel_size", "--data-parallel-size": "data_parallel_size", "-dp": "data_parallel_size",
    "--distributed-executor-backend": "distributed_executor_backend",
}


@dataclass(frozen=True)
class ReplicaPoolConfig:
    """N identical vLLM OpenAI-compatible servers of one model.

    Parameters:
        > Model

        model (`str`, *optional*, defaults to `"smollm2-135m"`):
            A registry name, a local model folder or a hub id (`resolve_model`).
        served_model_name (`str` or `None`, *optional*, defaults to `None`):
            The name clients send as `model`; `None` means `model` as given.
        dtype (`str`, *optional*, defaults to `"auto"`):
            vLLM's `--dtype`; "auto" is resolved by `VLLMServer` for this machine.
        enforce_eager (`bool`, *optional*, defaults to `False`):
            vLLM's `--enforce-eager` (faster startup, slower decoding).

        > Replicas

        replicas (`int`, *optional*, defaults to `1`):
            How many servers to start.
        host (`str`, *optional*, defaults to `"127.0.0.1"`):
            The address every replica binds (`0.0.0.0` to serve other machines).
        port_base (`int` or `None`, *optional*, defaults to `None`):
            Replica `i` listens on `port_base + i`; `None` picks free ports.
        log_dir (`str` or `None`, *optional*, defaults to `None`):
            Where `replica-<i>-port-<port>.log` files go (kept after stopping); `None` means
            `$TMPDIR/optima-serve-<pid>`.
        startup_timeout_s (`float`, *optional*, defaults to `900`):
            How long the slowest replica may take to answer /health.
        monitor_interval_s (`float` or `None`, *optional*, defaults to `5`):
            How often a background thread checks the replicas while serving; `None`: no thread
            (call `ReplicaPool.check()` or `serve_forever()` yourself).
        env (`dict`, *optional*):
            Extra environment variables for every replica.

        > Memory (at most one of the two)

        kv_cache_gib (`float` or `None`, *optional*, defaults to `None`):
            KV cache per replica (`--kv-cache-memory-bytes`); `None` with no
            `gpu_memory_utilization` means `VLLMServer`'s 1 GiB, which suits CPU.
        gpu_memory_utilization (`float` or `None`, *optional*, defaults to `None`):
            vLLM's `--gpu-memory-utilization`, the fraction of each GPU a replica may take (GPU).

        > Parallelism (passed to vLLM as they are)

        tensor_parallel_size (`int`, *optional*, defaults to `1`):
            GPUs one copy of the model is split over (`--tensor-parallel-size`).
        pipeline_parallel_size (`int`, *optional*, defaults to `1`):
            Pipeline stages (`--pipeline-parallel-size`), e.g. one per node under Ray.
        data_parallel_size (`int`, *optional*, defaults to `1`):
            Engine copies behind one replica's API server (`--data-parallel-size`); each replica
            then gets its own free `--data-parallel-rpc-port`, since vLLM's default is one fixed port.
        distributed_executor_backend (`"mp"`, `"ray"`, `"uni"` or `None`, *optional*, defaults to `None`):
            `--distributed-executor-backend`; `"ray"` spans the nodes of a running Ray cluster.
        gpus_per_replica (`int` or `None`, *optional*, defaults to `None`):
            Give each replica its own `CUDA_VISIBLE_DEVICES`: replica `i` gets the next
            `gpus_per_replica` ids of `gpu_ids`, round robin. `None` sets nothing (every replica
            sees every device).
        gpu_ids (`tuple of str` or `None`, *optional*, defaults to `None`):
            The device ids to hand out; `None` means `CUDA_VISIBLE_DEVICES` of this process when
            set, else `0 .. replicas * gpus_per_replica - 1`.
        extra_args (`tuple of str`, *optional*):
            More vLLM arguments for every replica (a string is split like a shell would).

    Raises:
        ConfigError: a value out of range, both memory options, an option the pool sets given in
            `extra_args`, or fewer GPUs per replica than its parallel sizes need.
    """

    # Model
    model: str = field(default="smollm2-135m", metadata={"help": "Registry name, model folder or hub id."})
    served_model_name: str | None = field(default=None, metadata={"help": "Name clients send as `model`."})
    dtype: str = field(default="auto", metadata={"help": "vLLM --dtype (auto: bf16 where the machine runs it natively, else float32)."})
    enforce_eager: bool = field(default=False, metadata={"help": "vLLM --enforce-eager."})
    # Replicas
    replicas: int = field(default=1, metadata={"help": "Servers to start."})
    host: str = field(default="127.0.0.1", metadata={"help": "Address the servers bind."})
    port_base: int | None = field(default=None, metadata={"help": "Replica i listens on port_base + i."})
    log_dir: str | None = field(default=None, metadata={"help": "Folder of the replica logs."})
    startup_timeout_s: float = field(default=900.0, metadata={"help": "Seconds the slowest replica may take."})
    monitor_interval_s: float | None = field(default=5.0, metadata={"help": "Seconds between background checks."})
    env: Mapping[str, str] = field(default_factory=dict, metadata={"help": "Extra environment variables."})
    # Memory
    kv_cache_gib: float | None = field(default=None, metadata={"help": "KV cache per replica in GiB."})
    gpu_memory_utilization: float | None = field(default=None, metadata={"help": "vLLM --gpu-memory-utilization."})
    # Parallelism
    tensor_parallel_size: int = field(default=1, metadata={"help": "vLLM --tensor-parallel-size."})
    pipeline_parallel_size: int = field(default=1, metadata={"help": "vLLM --pipeline-parallel-size."})
    data_parallel_size: int = field(default=1, metadata={"help": "vLLM --data-parallel-size."})
    distributed_executor_backend: DistributedBackend | None = field(
        default=None,
        metadata={"help": "vLLM --distributed-executor-backend.", "choices": list(get_args(DistributedBackend))})
    gpus_per_replica: int | None = field(default=None, metadata={"help": "CUDA devices per replica."})
    gpu_ids: tuple[str, ...] | None = field(default=None, metadata={"help": "Device ids to hand out."})
    extra_args: tuple[str, ...] = field(default=(), metadata={"help": "More vLLM arguments."})

    def __post_init__(self) -> None:
        if isinstance(self.extra_args, str):
            object.__setattr__(self, "extra_args", tuple(shlex.split(self.extra_args)))
        object.__setattr__(self, "extra_args", tuple(str(a) for a in self.extra_args))
        if isinstance(self.gpu_ids, str):
            object.__setattr__(self, "gpu_ids", tuple(i.strip() for i in self.gpu_ids.split(",") if i.strip()))
        object.__setattr__(self, "env", dict(self.env))
        self._check_ranges()
        self._check_extra_args()
        self._check_gpus()

    def _check_ranges(self) -> None:
        _require(self.replicas >= 1, "replicas", self.replicas, "must be >= 1")
        if self.port_base is not None:
            last = self.port_base + self.replicas - 1
            _require(1024 <= self.port_base and last <= 65535, "port_base", self.port_base,
                     f"must leave room for {self.replicas} ports in 1024..65535 (the last would be {last})")
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            _require(getattr(self, name) >= 1, name, getattr(self, name), "must be >= 1")
        _require(self.startup_timeout_s > 0, "startup_timeout_s", self.startup_timeout_s, "must be > 0")
        if self.monitor_interval_s is not None:
            _require(self.monitor_interval_s > 0, "monitor_interval_s", self.monitor_interval_s, "must be > 0 or None")
        if self.kv_cache_gib is not None:
            _require(self.kv_cache_gib > 0, "kv_cache_gib", self.kv_cache_gib, "must be > 0")
        if self.gpu_memory_utilization is not None:
            _require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization", self.gpu_memory_utilization,
                     "must be in (0, 1]")
            if self.kv_cache_gib is not None:
                raise ConfigError(f"set kv_cache_gib ({self.kv_cache_gib}) or gpu_memory_utilization "
                                  f"({self.gpu_memory_utilization}), not both: vLLM takes one KV cache size")
        backends = get_args(DistributedBackend)
        if self.distributed_executor_backend is not None and self.distributed_executor_backend not in backends:
            raise ConfigError(f"distributed_executor_backend must be one of {list(backends)} or None, got "
                              f"{self.distributed_executor_backend!r}")

    def _check_extra_args(self) -> None:
        for arg in self.extra_args:
            flag = arg.split("=", 1)[0]
            if flag in _MANAGED_FLAGS:
                raise ConfigError(f"extra_args sets {flag}, which the pool sets for every replica; use "
                                  f"{_MANAGED_FLAGS[flag]} instead (got extra_args={list(self.extra_args)})")
            for memory_flag, name in (("--kv-cache-memory-bytes", "kv_cache_gib"),
                                      ("--gpu-memory-utilization", "gpu_memory_utilization")):
                if flag == memory_flag and (self.kv_cache_gib is not None or self.gpu_memory_utilization is not None):
                    raise ConfigError(f"extra_args sets {flag} and kv_cache_gib or gpu_memory_utilization is set "
                                      f"too; use {name} alone")

    def _check_gpus(self) -> None:
        if self.gpus_per_replica is None:
            if self.gpu_ids is not None:
                raise ConfigError(f"gpu_ids ({list(self.gpu_ids)}) is only used with gpus_per_replica; set both")
            return
        _require(self.gpus_per_replica >= 1, "gpus_per_replica", self.gpus_per_replica, "must be >= 1 or None")
        if self.distributed_executor_backend == "ray":
            raise ConfigError(f"gpus_per_replica ({self.gpus_per_replica}) with distributed_executor_backend='ray': "
                              f"Ray places the workers on its cluster's GPUs; leave gpus_per_replica out")
        need = self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size
        if self.gpus_per_replica < need:
            raise ConfigError(
                f"each replica needs tensor_parallel_size x pipeline_parallel_size x data_parallel_size = "
                f"{self.tensor_parallel_size} x {self.pipeline_parallel_size} x {self.data_parallel_size} = {need} "
                f"GPUs, but gpus_per_replica is {self.gpus_per_replica}; set gpus_per_replica to {need}")
        if self.gpu_ids is None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
            ids = [i.strip() for i in visible.split(",") if i.strip()] if visible else \
                [str(i) for i in range(self.replicas * self.gpus_per_replica)]
            object.__setattr__(self, "gpu_ids", tuple(ids))
        if len(self.gpu_ids) < self.gpus_per_replica:
            raise ConfigError(f"gpus_per_replica is {self.gpus_per_replica} but only {len(self.gpu_ids)} device ids "
                              f"are there to hand out (gpu_ids={list(self.gpu_ids)})")
        if self.replicas * self.gpus_per_replica > len(self.gpu_ids):
            logger.warning("%d replicas x %d GPUs each > %d devices %s: replicas share GPUs (round robin); lower "
                           "gpu_memory_utilization so that they fit", self.replicas, self.gpus_per_replica,
                           len(self.gpu_ids), list(self.gpu_ids))

    # ------------------------------------------------------------------ derived
    @property
    def served_name(self) -> str:
        """The model name clients send (`served_model_name`, else `model`)."""
        return self.served_model_name or self.model

    def parallel_args(self) -> list[str]:
        """The vLLM arguments for the parallel and memory options that differ from vLLM's defaults."""
        args: list[str] = []
        for flag, value in (("--tensor-parallel-size", self.tensor_parallel_size),
                            ("--pipeline-parallel-size", self.pipeline_parallel_size),
                            ("--data-parallel-size", self.data_parallel_size)):
            if value != 1:
                args += [flag, str(value)]
        if self.distributed_executor_backend is not None:
            args += ["--distributed-executor-backend", self.distributed_executor_backend]
        if self.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        return args

    def device_assignment(self) -> list[tuple[str, ...]]:
        """Per replica, its `CUDA_VISIBLE_DEVICES` ids (round robin over `gpu_ids`); [] when
        `gpus_per_replica` is None."""
        if self.gpus_per_replica is None or not self.gpu_ids:
            return []
        g, ids = self.gpus_per_replica, self.gpu_ids
        return [tuple(ids[(i * g + k) % len(ids)] for k in range(g)) for i in range(self.replicas)]


def _require(ok: bool, name: str, value: object, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{name} {rule}, got {value!r}")
