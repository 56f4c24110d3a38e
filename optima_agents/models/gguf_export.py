"""Hugging Face Llama folder -> GGUF file (F32, F16, BF16 or Q8_0), for the llama.cpp backend.

llama.cpp reads only GGUF. Its own converter (`convert_hf_to_gguf.py`) is not installed by any
package we depend on: llama-cpp-python keeps it in its source tree but its wheel ships only the
`llama_cpp` package, and the `gguf` package has the writer and the quantizers but no model
converter. So this module does the part of that converter a Llama model needs:

- **Metadata from a template GGUF of the same model**: the hyper-parameters, the tokenizer (vocab,
  merges, token types, special ids, pre-tokenizer name) and the chat template are copied from the
  registry's own GGUF file (the one the Hugging Face folder was converted from). Rebuilding the
  tokenizer metadata from `tokenizer.json` is where hand-written converters go wrong (llama.cpp
  picks its pre-tokenizer regex from a name the converter has to guess); copying it cannot. The
  folder's `config.json` must agree with the template on every shape, or export refuses.
- **Tensors from the folder**: renamed to GGUF names by the `gguf` package's own Llama name map,
  with `q_proj` and `k_proj` rows permuted the way llama.cpp's converter does (llama.cpp's rope
  pairs dimensions (2i, 2i+1); Hugging Face Llama pairs (i, i + d/2)). 1-D tensors (norms) stay
  float32 in every type, as llama.cpp's converter writes them; 2-D tensors become the type asked
  for, quantized to Q8_0 or rounded to BF16 by `gguf.quants` (the numpy twin of ggml's reference
  quantizer, the one `convert_hf_to_gguf.py --outtype q8_0` / `bf16` uses). BF16 is the type whose
  products ggml runs with AVX512-BF16 instructions on a CPU built for them.

A trained model (a LoRA adapter merged into the base, `convert.merge_adapter`) exports the same
way, against its base's template.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

import numpy as np

from optima_agents.models.errors import ModelPullError

__all__ = ["CONVERTED_TYPES", "ConvertedType", "check_config_fits", "export_gguf", "permute_qk", "write_gguf"]

ConvertedType = Literal["f32", "f16", "bf16", "q8_0"]
#: The weight types `export_gguf` writes.
CONVERTED_TYPES: tuple[ConvertedType, ...] = ("f32", "f16", "bf16", "q8_0")

# general.file_type values (llama.cpp's `enum llama_ftype`) for the types written here.
_FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}
# Written by the writer itself, or describing the file rather than the model: never copied.
_NOT_COPIED = ("GGUF.", "general.file_type", "general.quantization_version")


def permute_qk(weights: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """Reorder the rows of a Hugging Face `q_proj` / `k_proj` weight into llama.cpp's rope layout.

    The same as `LlamaModel.permute` in llama.cpp's `convert_hf_to_gguf.py`; transformers'
    `LlamaTensorProcessor._reverse_permute_weights` undoes it when it reads a GGUF.

    Args:
        weights: `(n_head * head_dim, in_features)` rows of one projection.
        n_head: attention heads; for `k_proj` pass `n_head_kv` too (grouped-query attention).
        n_head_kv: key/value heads, used instead of `n_head` when they differ.
    """
    heads = n_head_kv if n_head_kv is not None and n_head_kv != n_head else n_head
    if weights.shape[0] % (2 * heads):
        raise ValueError(f"a q/k projection with {weights.shape[0]} rows cannot split into {heads} heads of "
                         "(2 x rotary half) rows; is num_key_value_heads right in config.json?")
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def check_config_fits(config: Mapping[str, Any], template: Mapping[str, Any]) -> None:
    """Refuse a folder whose `config.json` does not describe the template GGUF's model.

    Args:
        config: the folder's `config.json`.
        template: the template's metadata (`{key: value}`, as `GGUFReader` fields' contents).

    Raises:
        ModelPullError: another architecture, or a shape, vocabulary or rope/norm constant that
            differs (the message names both values).
    """
    arch = template.get("general.architecture")
    if arch != "llama" or config.get("model_type") != "llama":
        raise ModelPullError(f"GGUF export handles Llama models only: the folder is {config.get('model_type')!r}, "
                             f"the template GGUF is {arch!r}. Convert it with llama.cpp's convert_hf_to_gguf.py.")
    rope = config.get("rope_parameters") or {}
    pairs = {
        "hidden_size / llama.embedding_length": (config.get("hidden_size"), template.get("llama.embedding_length")),
        "num_hidden_layers / llama.block_count": (config.get("num_hidden_layers"), template.get("llama.block_count")),
        "intermediate_size / llama.feed_forward_length": (config.get("intermediate_size"),
                                                          template.get("llama.feed_forward_length")),
        "num_attention_heads / llama.attention.head_count": (config.get("num_attention_heads"),
                                                             template.get("llama.attention.head_count")),
        "num_key_value_heads / llama.attention.head_count_kv": (config.get("num_key_value_heads"),
                                                                template.get("llama.attention.head_count_kv")),
        "vocab_size / tokenizer.ggml.tokens": (config.get("vocab_size"),
                                               len(template.get("tokenizer.ggml.tokens", ()))),
        "rope_theta / llama.rope.freq_base": (config.get("rope_theta", rope.get("rope_theta")),
                                              template.get("llama.rope.freq_base")),
        "rms_norm_eps / llama.attention.layer_norm_rms_epsilon": (
            config.get("rms_norm_eps"), template.get("llama.attention.layer_norm_rms_epsilon")),
    }
    for what, (ours, theirs) in pairs.items():
        same = ours == theirs if not isinstance(theirs, float) else ours is not None and math.isclose(
            float(ours), theirs, rel_tol=1e-6)
        if not same:
            raise ModelPullError(f"the folder's config.json does not fit the template GGUF: {what} is {ours!r} in "
                                 f"the folder and {theirs!r} in the template. Export a model of the template's "
                                 "architecture, or convert it with llama.cpp's convert_hf_to_gguf.py.")


def export_gguf(folder: Path, out: Path, weight_type: ConvertedType, *, template: Path) -> Path:
    """Write the model in `folder` as a GGUF file of `weight_type`, with `template`'s metadata.

    The file is written beside `out` under a temporary name and renamed into place, so a killed
    export never leaves a truncated file under the real name.

    Args:
        folder: a Hugging Face Llama folder (config.json, *.safetensors).
        out: the GGUF file to write.
        weight_type: "f32", "f16", "bf16" or "q8_0" for the 2-D weights (norms stay float32).
        template: a GGUF file of the same architecture and tokenizer (see the module doc).

    Returns:
        `out`.

    Raises:
        ValueError: an unknown weight type.
        ModelPullError: the folder does not fit the template, or a tensor has no GGUF name.
    """
    import json

    import gguf

    if weight_type not in CONVERTED_TYPES:
        raise ValueError(f"GGUF export writes weight types {CONVERTED_TYPES}, got {weight_type!r}")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    reader = gguf.GGUFReader(template)
    meta = {key: field.contents() for key, field in reader.fields.items()}
    check_config_fits(config, meta)
    tensors = _gguf_tensors(folder, config, int(meta["llama.block_count"]))
    expected = {t.name for t in reader.tensors}
    missing = sorted(expected - set(tensors))
    if missing:
        raise ModelPullError(f"{folder} lacks tensors the template GGUF has: {missing[:5]}")

    def fill(writer: Any) -> None:
        for key, field in reader.fields.items():
            if key.startswith(_NOT_COPIED) or key == "general.architecture":
                continue
            kind = field.types[0]
            sub = field.types[1] if kind == gguf.GGUFValueType.ARRAY and len(field.types) > 1 else None
            writer.add_key_value(key, meta[key], kind, sub_type=sub)
        writer.add_file_type(_FILE_TYPE[weight_type])
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        for name, data in tensors.items():
            _add_tensor(writer, name, data, weight_type)

    return write_gguf(out, fill)


def write_gguf(out: Path, fill: Callable[[Any], None]) -> Path:
    """Write a Llama GGUF file whose metadata and tensors `fill(writer)` adds to a `GGUFWriter`.

    The file is written beside `out` under a temporary name and renamed into place, so a killed
    export never leaves a truncated file under the real name. Returns `out`.
    """
    import gguf

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    writer = gguf.GGUFWriter(tmp, arch="llama")
    try:
        fill(writer)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _gguf_tensors(folder: Path, config: Mapping[str, Any], n_blocks: int) -> dict[str, np.ndarray]:
    """Every tensor of the folder as float32 numpy, under its GGUF name, q/k permuted."""
    import gguf
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelPullError(f"{folder} has no *.safetensors weights to export")
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_blocks)
    n_head, n_head_kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    tied = bool(config.get("tie_word_embeddings", False))
    out: dict[str, np.ndarray] = {}
    for file in files:
        for hf_name, tensor in load_file(file).items():
            if hf_name == "lm_head.weight" and tied:
                continue  # llama.cpp reuses token_embd when output.weight is absent
            name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if name is None:
                raise ModelPullError(f"{file.name}: tensor {hf_name!r} has no GGUF name for a Llama model")
            data = tensor.float().numpy()
            if hf_name.endswith("self_attn.q_proj.weight"):
                data = permute_qk(data, n_head)
            elif hf_name.endswith("self_attn.k_proj.weight"):
                data = permute_qk(data, n_head, n_head_kv)
            out[name] = np.ascontiguousarray(data)
    return out


def _add_tensor(writer: Any, name: str, data: np.ndarray, weight_type: ConvertedType) -> None:
    import gguf

    if data.ndim < 2 or weight_type == "f32":
        writer.add_tensor(name, data.astype(np.float32))
    elif weight_type == "f16":
        writer.add_tensor(name, data.astype(np.float16))
    else:
        qtype = gguf.GGMLQuantizationType.BF16 if weight_type == "bf16" else gguf.GGMLQuantizationType.Q8_0
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
