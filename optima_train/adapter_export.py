"""A trained checkpoint as one small LoRA adapter on its base model, to ship or share.

Training merges each iteration's LoRA into the checkpoint, so iteration k's weights are the base
plus k low-rank updates, and only the merged folder (0.5 GB for the 135M model) describes them.
`export_adapter` takes the difference between the trained and the base weights of every adapted
linear layer and factors it with a truncated SVD into one PEFT LoRA adapter of rank `rank`
(`lora_alpha = rank`, so the update is exactly `B @ A`): three rank-16 updates fit a rank-48
adapter exactly, and a lower rank keeps the directions that carry the most of the update. The
report says how much of each layer's update the adapter keeps, so the rank is chosen by
measurement; evaluate the exported adapter before shipping it.

Any other tensor that differs between the two folders is refused: an adapter cannot carry it.
When the run's per-iteration adapters are at hand and the exact adapter is wanted at any size,
`optima_train.adapter_stack.stack_adapters` stacks them instead; this works from the merged
weights alone and can trade rank for size.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optima_envs.errors import ConfigError

__all__ = ["AdapterExport", "export_adapter", "low_rank_factors"]

#: Adapted modules: the linear layers the training's LoRA targets (`lora.target_modules: all-linear`).
LINEAR_SUFFIXES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass(frozen=True)
class AdapterExport:
    """What was written and how much of the trained update it keeps."""

    folder: Path
    rank: int
    modules: int
    bytes: int
    kept_energy_min: float
    kept_energy_median: float
    relative_error_max: float

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "rank": self.rank, "modules": self.modules, "bytes": self.bytes,
                "kept_energy_min": self.kept_energy_min, "kept_energy_median": self.kept_energy_median,
                "relative_error_max": self.relative_error_max}


def low_rank_factors(delta: Any, rank: int) -> tuple[Any, Any, float]:
    """(A, B, kept): `B @ A` is the best rank-`rank` approximation of `delta` (out x in) in the
    Frobenius norm; `kept` is the share of its squared norm that the approximation keeps (1.0
    when `delta`'s rank is at most `rank`). The singular values are split evenly between A and B
    so neither factor is large where the other is small (both are stored in half precision)."""
    import torch

    if rank < 1:
        raise ConfigError(f"rank must be >= 1, got {rank}")
    u, s, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    r = min(rank, s.numel())
    root = s[:r].sqrt()
    total = float((s.double() ** 2).sum())
    kept = 1.0 if total == 0.0 else min(1.0, float((s[:r].double() ** 2).sum()) / total)
    return (root[:, None] * vh[:r]).float(), (u[:, :r] * root).float(), kept


def export_adapter(trained: str | Path, base: str | Path, out: str | Path, *, rank: int = 32,
                   dtype: str = "bfloat16", base_name: str | None = None) -> AdapterExport:
    """Write `out/adapter_config.json` and `out/adapter_model.safetensors`: the update from the
    model folder `base` to the model folder `trained` as one rank-`rank` LoRA adapter.

    Raises:
        ConfigError: a bad rank or dtype, or the two folders differ outside the adapted layers
            (shapes or other tensors), which no adapter can carry.
    """
    import torch
    from peft import LoraConfig
    from safetensors.torch import load_file, save_file

    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if dtype not in dtypes:
        raise ConfigError(f"dtype must be one of {sorted(dtypes)}, got {dtype!r}")
    tuned_state, base_state = _weights(Path(trained), load_file), _weights(Path(base), load_file)
    if tuned_state.keys() != base_state.keys():
        raise ConfigError(f"{trained} and {base} hold different tensors "
                          f"({sorted(tuned_state.keys() ^ base_state.keys())[:4]}): not the same architecture")
    tensors: dict[str, Any] = {}
    kept: list[float] = []
    errors: list[float] = []
    targets: set[str] = set()
    for key in sorted(tuned_state):
        after, before = tuned_state[key], base_state[key]
        if after.shape != before.shape:
            raise ConfigError(f"{key} has shape {tuple(after.shape)} in {trained} but {tuple(before.shape)} in {base}")
        module = key.removesuffix(".weight")
        if not (key.endswith(".weight") and module.endswith(LINEAR_SUFFIXES)):
            if not torch.equal(after, before):
                raise ConfigError(f"{key} differs between {trained} and {base}, and it is not an adapted linear "
                                  "layer: a LoRA adapter cannot carry it (was the model fully fine-tuned?)")
            continue
        delta = after.float() - before.float()
        a, b, share = low_rank_factors(delta, rank)
        a, b = a.to(dtypes[dtype]), b.to(dtypes[dtype])
        norm = float(delta.norm())
        errors.append(0.0 if norm == 0.0 else float((delta - b.float() @ a.float()).norm()) / norm)
        kept.append(share)
        targets.add(module.rsplit(".", 1)[-1])
        tensors[f"base_model.model.{module}.lora_A.weight"] = a.contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = b.contiguous()
    if not tensors:
        raise ConfigError(f"no adapted linear layer ({', '.join(LINEAR_SUFFIXES)}) found in {trained}")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / ADAPTER_WEIGHTS))
    config = LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                        target_modules=sorted(targets), base_model_name_or_path=base_name or str(base))
    config.save_pretrained(str(folder))
    return AdapterExport(folder, rank, len(kept), (folder / ADAPTER_WEIGHTS).stat().st_size,
                         round(min(kept), 6), round(statistics.median(kept), 6), round(max(errors), 6))


def _weights(folder: Path, load_file: Any) -> dict[str, Any]:
    """Every tensor of a model folder's safetensors files (a sharded folder is read whole)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{folder} has no .safetensors weights: give a model folder that `save_pretrained` wrote")
    state: dict[str, Any] = {}
    for path in files:
        state.update(load_file(str(path)))
    return state

