"""What `--plan` reads besides the workload: the model's size and the accelerate topology.

Nothing here loads a model or data: a model's size comes from a local folder's config.json (and its
safetensors headers), else from `plan.KNOWN_MODELS`, else from `--model-size`; the topology comes from
the train section's accelerate config file (and its DeepSpeed JSON) and `launch_args`, parsed by
accelerate's own argument parser. `optima_train.plan.report` turns these and the workload
(`optima_train.plan.workload`) into the printed plan.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from optima_envs.errors import ConfigError
from optima_train.plan.arithmetic import KNOWN_MODELS, ModelArch

__all__ = ["Launch", "ModelSize", "read_launch", "resolve_size"]


@dataclass(frozen=True)
class ModelSize:
    """A model's parameter count, its shape when known, and where both came from."""

    name: str
    parameters: int
    arch: ModelArch | None
    source: str


_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def _adapter_base(name: str) -> str | None:
    """The base of a registered trained model shipped as an adapter (its size is the base's)."""
    from optima_agents.models.registry import MODEL_REGISTRY, AdapterSpec

    spec = MODEL_REGISTRY.get(name.strip().lower())
    return spec.base if isinstance(spec, AdapterSpec) else None


def resolve_size(name: str, override: str | None = None, *, what: str = "model.name") -> ModelSize:
    """The size of model `name` (a local folder, or a known model), or of `override` (`--model-size`:
    a known model, a folder, or a parameter count such as 8.03e9 or 8B).

    Raises:
        ConfigError: neither names a folder with a config.json nor a known model, and `override` is
            not a count; the message lists the known models and says how to pass a count.
    """
    target = override or name
    if override is not None and (m := _COUNT.match(override)):
        count = int(float(m.group(1)) * _SCALE[m.group(2).lower()])
        if count < 1:
            raise ConfigError(f"--model-size {override!r} must be a positive parameter count")
        return ModelSize(name, count, None, f"--model-size {override}")
    folder = Path(target).expanduser()
    if (folder / "config.json").is_file():
        arch = arch_from_config(json.loads((folder / "config.json").read_text(encoding="utf-8")), str(folder))
        counted = safetensors_parameters(folder)
        how = "safetensors headers" if counted else "config.json"
        return ModelSize(name, counted or arch.parameters(), arch, f"{how} in {folder}")
    adapter = _adapter_base(target)
    if adapter is not None:
        base = resolve_size(adapter, what=what)
        return ModelSize(name, base.parameters, base.arch, f"a LoRA adapter over {adapter}: {base.source}")
    arch = KNOWN_MODELS.get(target.strip().lower())
    if arch is not None:
        return ModelSize(name, arch.parameters(), arch, "known-model table, optima_train.plan.KNOWN_MODELS")
    known = ", ".join(sorted(a.name for a in KNOWN_MODELS.values()))
    where = f"--model-size {override!r}" if override else f"{what}={name!r}"
    raise ConfigError(f"{where}: not a local folder with a config.json (yet) and not a known model ({known}). "
                      "Pass its size with --model-size: a known model name, a model folder, or a parameter count "
                      "such as 8.03e9 or 8B (a count alone gives no KV-cache or LoRA figures)")


def arch_from_config(config: Mapping[str, Any], name: str) -> ModelArch:
    """A `ModelArch` from a Llama-style config.json.

    Raises:
        ConfigError: a field the plan needs is missing.
    """
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return ModelArch(name=name, vocab_size=int(config["vocab_size"]), hidden_size=hidden,
                         intermediate_size=int(config["intermediate_size"]),
                         num_layers=int(config["num_hidden_layers"]), num_heads=heads,
                         num_kv_heads=int(config.get("num_key_value_heads") or heads),
                         head_dim=int(config.get("head_dim") or hidden // heads),
                         tie_embeddings=bool(config.get("tie_word_embeddings", False)))
    except KeyError as error:
        raise ConfigError(f"{name}/config.json has no {error.args[0]!r}; the plan reads Llama-style configs "
                          "(pass --model-size COUNT to size another architecture)") from None


def safetensors_parameters(folder: Path) -> int | None:
    """The parameter count stored in `folder`'s safetensors headers (no weights read), or None."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


# ---------------------------------------------------------------------- topology
@dataclass(frozen=True)
class Launch:
    """How a training step runs: processes, machines, and the DDP / DeepSpeed settings."""

    launcher: str          # inline | accelerate
    kind: str              # inline | ddp | deepspeed | cpu
    processes: int
    machines: int
    zero_stage: int
    config_file: str | None
    multinode_launcher: str | None = None
    hostfile: str | None = None
    problem: str | None = None

    @property
    def gpus_per_machine(self) -> int:
        return self.processes // self.machines


def read_launch(train: Any, *, device: str = "auto") -> Launch:
    """The topology of `train` (a `TRLTrainSection`): its accelerate config file, then `launch_args`;
    `device` is `model.device` (cpu: the processes train on the CPU, gloo).

    Raises:
        ConfigError: the config file (or its DeepSpeed JSON) is missing or unreadable, or it asks for
            a distributed type the plan does not model.
    """
    if train.launcher == "inline":
        return Launch("inline", "inline", 1, 1, 0, None)
    data: dict[str, Any] = {}
    if train.accelerate_config:
        data = _read_mapping(Path(train.accelerate_config), "train.accelerate_config")
    from accelerate.commands.launch import launch_command_parser

    try:
        args = launch_command_parser().parse_args([*train.launch_args, "-m", "plan"])
    except SystemExit:
        raise ConfigError(f"train.launch_args={train.launch_args!r} are not valid `accelerate launch` arguments") \
            from None
    kind = {"NO": "inline", "MULTI_GPU": "ddp", "MULTI_CPU": "cpu", "DEEPSPEED": "deepspeed"}.get(
        str(data.get("distributed_type", "NO")).upper())
    if kind is None:
        raise ConfigError(f"{train.accelerate_config}: distributed_type={data.get('distributed_type')!r}; the plan "
                          "models NO, MULTI_GPU, MULTI_CPU and DEEPSPEED")
    forced_cpu = bool(args.cpu or data.get("use_cpu"))
    if forced_cpu or device == "cpu":
        kind = "cpu"
    processes = int(args.num_processes or data.get("num_processes") or 1)
    machines = int(args.num_machines or data.get("num_machines") or 1)
    if processes % machines:
        raise ConfigError(f"{train.accelerate_config}: num_processes={processes} is not a multiple of "
                          f"num_machines={machines}")
    ds = data.get("deepspeed_config") or {}
    stage = int(ds.get("zero_stage", 0) or 0)
    if ds.get("deepspeed_config_file"):
        ds_json = _read_mapping(Path(ds["deepspeed_config_file"]), "deepspeed_config_file")
        stage = int((ds_json.get("zero_optimization") or {}).get("stage", 0))
    if kind == "inline" and processes > 1:
        kind = "ddp"
    problem = None
    if forced_cpu and processes > 1 and not args.mpirun_hostfile:
        # accelerate's --cpu path runs one process unless mpirun starts them; torchrun (its
        # --multi_gpu path) starts them, and model.device=cpu makes each rank use the CPU and gloo.
        problem = (f"--cpu / use_cpu with num_processes={processes} starts a single process (accelerate runs several "
                   "CPU processes only through mpirun); for several CPU processes use launch_args [--multi_gpu, "
                   f"--num_processes, '{processes}'] with model.device=cpu")
    return Launch("accelerate", kind, processes, machines, stage if kind == "deepspeed" else 0,
                  train.accelerate_config, ds.get("deepspeed_multinode_launcher"), ds.get("deepspeed_hostfile"), problem)


def _read_mapping(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{what}: {str(path)!r} does not exist (paths are relative to the directory the command "
                          "runs in, the project root)")
    try:
        data = (json.loads if path.suffix == ".json" else yaml.safe_load)(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{what}: {str(path)!r} cannot be read: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: {str(path)!r} must hold a mapping")
    return data
