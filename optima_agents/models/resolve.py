"""`resolve_model`: turn what a user typed (`--model X`) into something `from_pretrained` accepts.

Every backend (transformers, vLLM, TRL) takes a folder or a hub id, so every entry point calls
this one function first; then "which model?" errors are the same everywhere and appear before
any slow import or load.

Order, and why: a registry name wins (short names are what users type, and a stray folder
named like one should not shadow it); then an existing local path (as transformers does, a
folder `org/name` beats the hub id `org/name`); then the `org/name` hub form; anything else is
an unknown name and gets one message listing what exists and how to get it.

Hub ids are passed through untouched for users who have the hub. When `HF_HUB_OFFLINE` is set
we check the hub cache ourselves, because the error transformers gives much later is long and
does not say what to do instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from optima_agents.models.cache import model_dir, verify_folder
from optima_agents.models.errors import ModelNotFoundError
from optima_agents.models.pull import pull_model
from optima_agents.models.registry import MODEL_REGISTRY, unknown_model_message

__all__ = ["resolve_model"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_TRUE = {"1", "true", "yes", "on"}


def resolve_model(name_or_path: str, *, home: Path | str | None = None, auto_pull: bool = True) -> str:
    """Return a local folder path or hub id for a registry name, a folder path or a hub id.

    Args:
        name_or_path: a registry name (`smollm2-135m`), a Hugging Face model folder, or `org/name`.
        home: the Optima home for registry models (default `$OPTIMA_HOME`, else the user cache).
        auto_pull: pull a registry model that is not cached yet (else raise).

    Returns:
        An absolute folder path (registry models and local folders) or the hub id unchanged.

    Raises:
        ModelNotFoundError: unknown name, a folder without config.json, a registry model not
            pulled with `auto_pull=False`, or a hub id that cannot be used offline.
        ModelPullError: the automatic pull failed.
    """
    text = str(name_or_path).strip()
    spec = MODEL_REGISTRY.get(text.lower())
    if spec is not None:
        if verify_folder(model_dir(spec.name, home), spec) is not None:
            return str(model_dir(spec.name, home))
        if not auto_pull:
            raise ModelNotFoundError(
                f"Model {spec.name!r} is not pulled yet (looked in {model_dir(spec.name, home)}). "
                f"Run `optima models pull {spec.name}`, or allow auto_pull."
            )
        return str(pull_model(spec.name, home=home))
    path = Path(text).expanduser()
    if path.exists():
        return _check_folder(path)
    if _HUB_ID.match(text):
        return _check_hub_id(text)
    if _looks_like_path(text):
        raise ModelNotFoundError(f"No such model folder: {text!r} (resolved to {path.absolute()}) does not exist.")
    raise ModelNotFoundError(unknown_model_message(text))


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", ".", "~")) or "/" in text or "\\" in text or text.endswith(".gguf")


def _check_folder(path: Path) -> str:
    """Accept a Hugging Face model folder; say exactly what is wrong with anything else."""
    path = path.resolve()
    if not path.is_dir():
        hint = " Pass the folder that contains it, or pull a registry model." if path.suffix == ".gguf" else ""
        raise ModelNotFoundError(f"{path} is a file, not a model folder.{hint}")
    if not (path / "config.json").is_file():
        present = sorted(p.name for p in path.iterdir())[:8]
        raise ModelNotFoundError(
            f"{path} is not a Hugging Face model folder: config.json is missing "
            f"(it contains {present or 'nothing'}). Point at the folder where `save_pretrained` wrote the model."
        )
    return str(path)


def _check_hub_id(repo_id: str) -> str:
    """Pass a hub id through, unless the hub is switched off and the id is not in its cache."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in _TRUE:
        return repo_id
    if _in_hub_cache(repo_id):
        return repo_id
    embedded = [s.name for s in MODEL_REGISTRY.values() if getattr(s, "hf_id", "").lower() == repo_id.lower()]
    alt = f" Optima has a copy of it as registry model {embedded[0]!r}." if embedded else ""
    raise ModelNotFoundError(
        f"{repo_id!r} looks like a Hugging Face hub id, but HF_HUB_OFFLINE is set and it is not in the "
        f"hub cache ({_hub_cache_dir() or 'default location'}), and there is no local folder of that name."
        f"{alt} Pass a local model folder, a registry name (`optima models list`), or unset HF_HUB_OFFLINE."
    )


def _hub_cache_dir() -> str | None:
    """The hub cache as the environment says now (huggingface_hub reads it only at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=_hub_cache_dir())
    return isinstance(found, str)
