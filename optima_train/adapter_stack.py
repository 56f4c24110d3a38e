"""A trained checkpoint served as one LoRA adapter on an engine that keeps the starting weights.

Every LoRA training step saves its adapter inside the merged checkpoint (`<checkpoint>/adapter`,
PEFT's layout), and PEFT records the weights it was trained on (`base_model_name_or_path`), so a
checkpoint's lineage can be walked back to the weights a running engine holds (`adapter_chain`).

Merging adds `s_i * B_i @ A_i` to each target weight (`s_i` = alpha / r, or alpha / sqrt(r) with
rsLoRA). A chain of adapters, each trained on the previous merge, therefore equals one adapter of
rank `sum(r_i)`: the `A_i` stacked by rows, the `s_i * B_i` side by side, scale 1 (alpha = rank).
`stack_adapters` writes that adapter; vLLM serves it with one `LoRARequest`, and its outputs
match the merged checkpoint's up to float rounding (the merge itself rounds once per step).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

ADAPTER_DIR = "adapter"
_CONFIG = "adapter_config.json"
_WEIGHTS = "adapter_model.safetensors"
_MAX_DEPTH = 10_000

__all__ = ["ADAPTER_DIR", "adapter_chain", "adapter_scaling", "stack_adapters", "stack_lora_tensors"]


def adapter_chain(model: str | Path, engine_model: str | Path) -> list[Path] | str:
    """The adapter folders that turn `engine_model`'s weights into `model`'s, oldest first ([] when
    they are the same weights), or the reason there is no such chain."""
    target = Path(engine_model).resolve()
    current, chain = Path(model), []
    for _ in range(_MAX_DEPTH):
        if current.resolve() == target:
            return chain[::-1]
        adapter = current / ADAPTER_DIR
        if not (adapter / _CONFIG).is_file():
            return f"{current} has no LoRA adapter saved with it (full fine-tuning, or a model from elsewhere)"
        parent = json.loads((adapter / _CONFIG).read_text(encoding="utf-8")).get("base_model_name_or_path")
        if not parent:
            return f"{adapter / _CONFIG} does not name the weights it was trained on (base_model_name_or_path)"
        chain.append(adapter)
        current = Path(parent)
    return f"{model}: adapter lineage deeper than {_MAX_DEPTH} steps (a cycle?)"


def adapter_scaling(config: Mapping[str, Any]) -> float:
    """The factor PEFT multiplies `B @ A` by for this adapter config."""
    r, alpha = int(config["r"]), float(config["lora_alpha"])
    return alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r


def stack_lora_tensors(adapters: Sequence[tuple[Mapping[str, Any], float]]) -> dict[str, Any]:
    """One scale-1 adapter's tensors equal to the sum of `(tensors, scaling)` adapters.

    Raises:
        ValueError: the adapters do not adapt the same modules, or a tensor is not a LoRA A or B.
    """
    import torch

    if not adapters:
        raise ValueError("no adapters to stack")
    keys = set(adapters[0][0])
    for tensors, _ in adapters[1:]:
        if set(tensors) != keys:
            raise ValueError(f"the adapters adapt different modules: {sorted(keys ^ set(tensors))[:4]} ...")
    out: dict[str, Any] = {}
    for key in sorted(keys):
        if ".lora_A." in key:
            out[key] = torch.cat([t[key] for t, _ in adapters], dim=0).contiguous()
        elif ".lora_B." in key:
            out[key] = torch.cat([t[key] * scale for t, scale in adapters], dim=1).contiguous()
        else:
            raise ValueError(f"{key} is neither a LoRA A nor a LoRA B matrix (biases, DoRA magnitudes and saved "
                             "modules cannot be stacked)")
    return out


def stack_adapters(adapters: Sequence[Path], out: Path, *, base: str | Path) -> int:
    """Write to `out` one adapter equal to `adapters` applied in turn on `base`; returns its rank.

    Raises:
        ValueError: an adapter uses a feature a stack cannot express (DoRA, trained biases, saved
            modules) or they adapt different modules.
    """
    from safetensors.torch import load_file, save_file

    configs = [json.loads((a / _CONFIG).read_text(encoding="utf-8")) for a in adapters]
    for path, config in zip(adapters, configs):
        unsupported = [name for name, bad in (("use_dora", config.get("use_dora")),
                                              ("bias", config.get("bias", "none") != "none"),
                                              ("modules_to_save", config.get("modules_to_save")),
                                              ("rank_pattern", config.get("rank_pattern")),
                                              ("alpha_pattern", config.get("alpha_pattern"))) if bad]
        if unsupported:
            raise ValueError(f"{path} sets {', '.join(unsupported)}: such adapters cannot be stacked")
    tensors = stack_lora_tensors([(load_file(str(a / _WEIGHTS)), adapter_scaling(c))
                                  for a, c in zip(adapters, configs)])
    rank = sum(int(c["r"]) for c in configs)
    config = {**configs[-1], "r": rank, "lora_alpha": rank, "use_rslora": False, "lora_dropout": 0.0,
              "base_model_name_or_path": str(base),
              "target_modules": sorted({m for c in configs for m in _as_list(c["target_modules"])})}
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / _WEIGHTS))
    (out / _CONFIG).write_text(json.dumps(config, indent=2), encoding="utf-8")
    return rank


def _as_list(targets: Any) -> list[str]:
    return [targets] if isinstance(targets, str) else list(targets)


WEIGHT_SWAPS = ("auto", "adapter", "restart")
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed `max_lora_rank` values


def engine_lora_options(setting: str, *, backend: str, lora_rank: int | None, training_steps: int,
                        device: str) -> tuple[dict[str, Any], str]:
    """The engine options that let a generation backend serve a run's adapters, and a sentence
    saying which way trained weights will reach it (logged once per run).

    `setting` is `model.weight_swap`: "adapter" serves adapters where possible, "restart" always
    merges and starts a new engine, "auto" serves adapters on GPUs only: on a CPU, vLLM's LoRA
    path costs far more generation time per iteration than an engine restart saves
    (`benchmarks/results/weight_swap.json`: 3.6 tokens/s through a rank-32 adapter against 52.6 on
    a plain engine, and an 80 s restart, on 2 AVX2 cores). The rank planned for is the LoRA rank times the
    run's training steps (every step adds one adapter to the stack)."""
    if setting not in WEIGHT_SWAPS:
        raise ValueError(f"model.weight_swap must be one of {list(WEIGHT_SWAPS)}, got {setting!r}")
    if setting == "restart":
        return {}, "trained weights: merged, new engine each iteration (model.weight_swap=restart)"
    if backend != "vllm":
        return {}, f"trained weights: loaded anew each iteration (the {backend} backend does not serve adapters)"
    if lora_rank is None:
        return {}, "trained weights: merged, new engine each iteration (full fine-tuning makes no adapters)"
    if setting == "auto" and device == "cpu":
        return {}, ("trained weights: merged, new engine each iteration (model.weight_swap=auto on a CPU; "
                    "adapter serves them on the running engine)")
    need = lora_rank * max(1, training_steps)
    rank = next((r for r in VLLM_LORA_RANKS if r >= need), None)
    if rank is None:
        return {}, (f"trained weights: merged, new engine each iteration ({training_steps} steps x LoRA rank "
                    f"{lora_rank} = {need} exceeds vLLM's largest adapter rank {VLLM_LORA_RANKS[-1]})")
    options: dict[str, Any] = {"enable_lora": True, "max_lora_rank": rank, "max_loras": 1}
    if device != "cpu":
        options["enable_sleep_mode"] = True  # the engine sleeps through training steps instead of closing
    return options, f"trained weights: served as stacked LoRA adapters on one engine (max rank {rank}); no restarts"
