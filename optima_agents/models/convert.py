"""GGUF -> plain Hugging Face folder, and the smoke test that proves the result works.

Why convert at all: transformers can read a GGUF directly, but that takes about 18 s (it
dequantizes every tensor) and the model comes back marked as quantized, which TRL, PEFT,
`save_pretrained` and vLLM refuse or mishandle. So we dequantize once, rebuild a fresh model
from the same config *without* `quantization_config`, load the state dict into it and save a
normal safetensors folder (float32: the dequantized weights exactly, about 0.5 GB; callers pick
bf16 at load time). The result reloads in well under a second.

Heavy imports (torch, transformers) stay inside the functions, so importing
`optima_agents.models` stays cheap.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optima_agents.models.errors import ModelPullError

__all__ = ["convert_gguf_to_hf", "merge_adapter", "smoke_test"]

_INSTALL_HINT = "pip install 'transformers>=5.16.1,<5.20' gguf accelerate safetensors"


def _import_transformers() -> Any:
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF files)
        import transformers
    except ImportError as exc:
        raise ModelPullError(
            f"Converting a GGUF model needs transformers and gguf ({exc}). Install them: {_INSTALL_HINT}"
        ) from exc
    return transformers


@contextlib.contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Turn transformers' tqdm bars off for the block when `enabled` is False, then restore."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    if not enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on and not enabled:
            hf_logging.enable_progress_bar()


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path, *, progress: bool = True) -> None:
    """Write a float32 safetensors model, its tokenizer and chat template from a GGUF file.

    Raises:
        ModelPullError: transformers/gguf/accelerate are missing, or the GGUF cannot be read.
    """
    transformers = _import_transformers()
    auto_model, auto_tok = transformers.AutoModelForCausalLM, transformers.AutoTokenizer
    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        with _progress_bars(progress):
            tokenizer = auto_tok.from_pretrained(folder, gguf_file=name)
            quantized = auto_model.from_pretrained(folder, gguf_file=name)
    except (ImportError, ValueError) as exc:  # transformers raises ValueError for a missing accelerate
        raise ModelPullError(f"Could not load {gguf_path} with transformers: {exc}\nFix: {_INSTALL_HINT}") from exc

    config = copy.deepcopy(quantized.config)
    for attr in ("quantization_config", "_model_name_or_path"):  # quantized marker; GGUF title
        if hasattr(config, attr):
            delattr(config, attr)
    model = auto_model.from_config(config)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    if missing or unexpected:
        raise ModelPullError(f"GGUF weights do not fit the rebuilt model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config = quantized.generation_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelPullError(f"{gguf_path.name} carries no chat template; refusing to save a model without one")


def merge_adapter(base_dir: Path, adapter_dir: Path, out_dir: Path) -> None:
    """Write the base model with a PEFT LoRA adapter merged into it, as a plain float32 folder
    with the base's tokenizer and chat template (what every backend loads).

    Raises:
        ModelPullError: the adapter does not fit the base (other modules, other shapes).
    """
    transformers = _import_transformers()
    from peft import PeftModel

    with _progress_bars(False):
        tokenizer = transformers.AutoTokenizer.from_pretrained(base_dir)
        model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype="float32")
    try:
        merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    except (ValueError, RuntimeError, KeyError) as exc:  # PEFT's errors for a module or shape that does not fit
        raise ModelPullError(f"The adapter in {adapter_dir} does not fit the base model {base_dir}: {exc}") from exc
    merged.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def smoke_test(folder: Path, prompt: str, expect: str, *, max_new_tokens: int = 24) -> dict[str, Any]:
    """Reload `folder` from disk and answer `prompt` greedily through the chat template.

    Returns:
        `{"prompt", "output", "max_new_tokens", "load_seconds", "generate_seconds"}`.

    Raises:
        ModelPullError: the answer is empty or does not contain `expect` (case-insensitive),
            which means the conversion produced a broken model.
    """
    transformers = _import_transformers()
    import torch

    start = time.perf_counter()
    with _progress_bars(False):
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    load_seconds = time.perf_counter() - start
    messages = [{"role": "user", "content": prompt}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    generate_seconds = time.perf_counter() - start
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    if not text or expect.lower() not in text.lower():
        raise ModelPullError(
            f"The converted model failed its smoke test: asked {prompt!r}, expected an answer "
            f"containing {expect!r}, got {text!r}. The conversion is broken; nothing was installed."
        )
    return {
        "prompt": prompt,
        "output": text,
        "max_new_tokens": max_new_tokens,
        "load_seconds": round(load_seconds, 3),
        "generate_seconds": round(generate_seconds, 3),
    }
