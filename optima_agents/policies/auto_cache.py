"""Where `--backend auto` keeps its decisions: one JSON file in the Optima home, one entry per
(machine, model, options, package versions, probe settings).

    <home>/backend_choice.json   {"format": 1, "choices": {<key>: {"identity": ..., "choice": ...}}}

A decision is a measurement of one machine, so the key holds what changes the ranking: the CPU
model and the instruction sets the backends' kernels pick from (AVX2, AVX-512, AVX512-BF16, AMX),
the core count, any CUDA device, the package versions of every backend, the model's files and the
options it runs with. The model is named by its resolved folder and its files' names, sizes and
modification times (the file is per machine, so a path is a fine name, and reading the weights
to hash them would cost more than the lookup saves); a new checkpoint in the same folder gets a
new key. A different key probes again; the old entries stay.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from pathlib import Path
from typing import Any, Mapping

__all__ = ["CACHE_NAME", "CPU_FLAGS", "choice_key", "machine_fingerprint", "model_identity", "package_versions",
           "read_choice", "write_choice"]

CACHE_NAME = "backend_choice.json"
_FORMAT = 1

#: The CPU features whose presence changes which kernels the backends run (x86, then Arm).
CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_bf16", "amx_int8", "asimd", "sve", "sve2")

#: The modules whose versions change a backend's speed or numerics.
VERSIONED_MODULES = ("torch", "transformers", "vllm", "llama_cpp", "optima_agents")

logger = logging.getLogger("optima_agents.policies")


def machine_fingerprint() -> dict[str, Any]:
    """CPU model, the `CPU_FLAGS` it has, cores (all, and those this process may use), CUDA devices."""
    model, flags = _cpu_info()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model, "cpu_flags": [f for f in CPU_FLAGS if f in flags], "cores": os.cpu_count(),
            "usable_cores": usable, "cuda": _cuda_devices()}


def _cpu_info() -> tuple[str, set[str]]:
    """The CPU's model name and feature flags, from /proc/cpuinfo where there is one."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return model, flags
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "model name" and value.strip():
            model = value.strip()
        elif name in ("flags", "features") and not flags:
            flags = set(value.split())
    return model, flags


def _cuda_devices() -> list[str]:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def package_versions() -> dict[str, str | None]:
    """The installed version of each module of `VERSIONED_MODULES` (None: not installed)."""
    from importlib import metadata

    owners = metadata.packages_distributions()
    out: dict[str, str | None] = {}
    for module in VERSIONED_MODULES:
        dists = owners.get(module, [])
        out[module] = None
        for dist in dists:
            try:
                out[module] = f"{dist}=={metadata.version(dist)}"
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def model_identity(model: str, model_path: str | Path) -> dict[str, Any]:
    """The resolved folder and its weight and config files (name, size, modification time); a
    model that is not a local folder (a hub id) by its name."""
    folder = Path(model_path)
    if not folder.is_dir():
        return {"model": str(model)}
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".json") and p.is_file())
    return {"folder": str(folder.resolve()),
            "files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]}


def choice_key(identity: Mapping[str, Any]) -> str:
    """16 hex digits of the identity's canonical JSON's sha256."""
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _cache_path(home: str | Path | None) -> Path:
    from optima_agents.models.cache import optima_home

    return optima_home(home) / CACHE_NAME


def _read_all(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        logger.warning("backend auto: ignoring the unreadable choice cache %s (%s); probing again", path, error)
        return {}
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("choices"), dict):
        logger.warning("backend auto: ignoring the choice cache %s (not format %d); probing again", path, _FORMAT)
        return {}
    return data["choices"]


def read_choice(key: str, *, home: str | Path | None = None) -> dict[str, Any] | None:
    """The cached entry `{"identity": ..., "choice": ...}` for `key`, or None."""
    entry = _read_all(_cache_path(home)).get(key)
    return entry if isinstance(entry, dict) and "choice" in entry else None


def write_choice(key: str, identity: Mapping[str, Any], choice: Mapping[str, Any], *,
                 home: str | Path | None = None) -> Path:
    """Store one decision under `key`, keeping the others; returns the cache file.

    The read-modify-write holds a file lock, so two processes probing different models at once
    both keep their entries.
    """
    from filelock import FileLock

    from optima_envs.atomic_files import atomic_write_json

    path = _cache_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_suffix(".lock")), timeout=60):
        choices = _read_all(path)
        choices[key] = {"identity": dict(identity), "choice": dict(choice)}
        atomic_write_json(path, {"format": _FORMAT, "choices": choices})
    return path
