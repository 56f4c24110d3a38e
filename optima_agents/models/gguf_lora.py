"""A PEFT LoRA adapter folder -> a GGUF LoRA adapter file, which llama.cpp applies over a base GGUF.

llama.cpp loads such a file at run time (`llama_adapter_lora_init`, `llama_set_adapters_lora`)
and adds `scale * B @ A` to each adapted weight inside its graph, with `scale = alpha / rank` as
in PEFT. Its converter (`convert_lora_to_gguf.py`) is, like its model converter, not installed by
any package we depend on (see `gguf_export`), so this writes what that converter writes for a
Llama model:

- metadata `general.type = "adapter"`, `general.architecture = "llama"`, `adapter.type = "lora"`,
  `adapter.lora.alpha` (the adapter's `lora_alpha`);
- per adapted linear layer, `<base GGUF name>.lora_a` (PEFT's `lora_A`, rank x in) and
  `.lora_b` (PEFT's `lora_B`, out x rank); llama.cpp pairs them with the base tensor by name
  and checks the shapes. The `q_proj` / `k_proj` B rows are permuted like the base weights
  (`permute_qk`), since B's rows are the projection's output rows.

Only plain LoRA is written: an adapter with rsLoRA or DoRA scaling, biases, or modules saved
whole is refused, since llama.cpp applies none of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Mapping

import numpy as np

from optima_agents.models.errors import ModelPullError
from optima_agents.models.gguf_export import permute_qk, write_gguf

__all__ = ["LoraType", "export_lora_gguf", "lora_tensors"]

LoraType = Literal["f32", "f16"]
_PEFT_PREFIX = "base_model.model."
_SUFFIXES = {".lora_A.weight": "lora_a", ".lora_B.weight": "lora_b"}


def export_lora_gguf(adapter_dir: Path, out: Path, *, base_config: Mapping[str, Any],
                     dtype: LoraType = "f16") -> Path:
    """Write the PEFT adapter in `adapter_dir` as a GGUF LoRA file `out` (atomically, `write_gguf`).

    Args:
        adapter_dir: a PEFT LoRA folder (`adapter_config.json`, `adapter_model.safetensors`).
        out: the file to write.
        base_config: the base model's `config.json` (its heads, for the q/k permutation, and
            its layer count, for the tensor names).
        dtype: storage type of the factors.

    Raises:
        ModelPullError: not a plain LoRA adapter of a Llama model (the message says what).
    """
    import gguf

    if dtype not in ("f32", "f16"):
        raise ValueError(f"a GGUF LoRA is written as f32 or f16, got {dtype!r}")
    config = _adapter_config(adapter_dir)
    tensors = lora_tensors(adapter_dir, base_config)

    def fill(writer: Any) -> None:
        writer.add_string(gguf.Keys.General.TYPE, gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(config["lora_alpha"]))
        for name, data in tensors.items():
            writer.add_tensor(name, data.astype(np.float16 if dtype == "f16" else np.float32))

    return write_gguf(out, fill)


def lora_tensors(adapter_dir: Path, base_config: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every LoRA factor of the adapter as float32 numpy under its GGUF name
    (`blk.N.attn_q.weight.lora_a`, ...), q/k B factors permuted.

    Raises:
        ModelPullError: a tensor that is not a LoRA factor of a Llama linear layer.
    """
    import gguf
    from safetensors.torch import load_file

    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        raise ModelPullError(f"{adapter_dir} has no adapter_model.safetensors: pass a PEFT LoRA adapter folder")
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, int(base_config["num_hidden_layers"]))
    n_head, n_head_kv = int(base_config["num_attention_heads"]), int(base_config["num_key_value_heads"])
    out: dict[str, np.ndarray] = {}
    for key, tensor in load_file(weights).items():
        suffix = next((s for s in _SUFFIXES if key.endswith(s)), None)
        if suffix is None or not key.startswith(_PEFT_PREFIX):
            raise ModelPullError(f"{weights.name}: {key!r} is not a LoRA factor (lora_A / lora_B) of a linear "
                                 "layer; llama.cpp applies only those")
        module = key[len(_PEFT_PREFIX):-len(suffix)]
        base_name = names.get_name(f"{module}.weight", try_suffixes=(".weight",))
        if base_name is None:
            raise ModelPullError(f"{weights.name}: {module!r} has no GGUF name for a Llama model")
        data = tensor.float().numpy()
        if _SUFFIXES[suffix] == "lora_b" and module.endswith("self_attn.q_proj"):
            data = permute_qk(data, n_head)
        elif _SUFFIXES[suffix] == "lora_b" and module.endswith("self_attn.k_proj"):
            data = permute_qk(data, n_head, n_head_kv)
        out[f"{base_name}.{_SUFFIXES[suffix]}"] = np.ascontiguousarray(data)
    return out


def _adapter_config(adapter_dir: Path) -> dict[str, Any]:
    path = adapter_dir / "adapter_config.json"
    if not path.is_file():
        raise ModelPullError(f"{adapter_dir} has no adapter_config.json: pass a PEFT LoRA adapter folder")
    config = json.loads(path.read_text(encoding="utf-8"))
    unsupported = {"peft_type": config.get("peft_type") not in (None, "LORA"),
                   "use_rslora": bool(config.get("use_rslora")), "use_dora": bool(config.get("use_dora")),
                   "bias": config.get("bias", "none") != "none", "modules_to_save": bool(config.get("modules_to_save")),
                   "rank_pattern": bool(config.get("rank_pattern")), "alpha_pattern": bool(config.get("alpha_pattern"))}
    refused = sorted(k for k, v in unsupported.items() if v)
    if refused:
        raise ModelPullError(f"{adapter_dir}: llama.cpp applies plain LoRA only, and this adapter sets {refused}; "
                             "merge it into the base (optima_agents.models.convert.merge_adapter) and export that")
    return config
