"""Paths as results record them: in a form that names no folder of the machine that made them.

A recorded path under the data folder reads `$OPTIMA_DATA_DIR/...`, a pulled model's folder
reads as its registry name, a path inside the project checkout is relative to the project root,
one under the home folder starts with `~`; any other path stays as it was given, and so does a
relative one. `expand` reads the data form back, so a recorded command runs again elsewhere.

    portable("/data/sets/hotpotqa/rpt")          # "$OPTIMA_DATA_DIR/hotpotqa/rpt" with OPTIMA_DATA_DIR=/data/sets
    portable("/home/me/optima/runs/isft/ckpt")   # "runs/isft/ckpt" in the checkout /home/me/optima
    command_line(["optima", "leaderboard", "--model", "t=/home/me/optima/runs/ckpt"])
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from optima_envs.data.common import DATA_DIR_ENV
from optima_envs.errors import ConfigError

__all__ = ["DATA_VAR", "Roots", "command_line", "expand", "portable", "portable_command", "portable_json",
           "portable_text"]

DATA_VAR = "$" + DATA_DIR_ENV
"""How a recorded path names the data folder."""

# An absolute path inside free text: starts at a slash that follows no path or word character
# (so neither the tail of a relative path nor a URL's `//host`), ends at a space, quote or bracket.
_ABSOLUTE = re.compile(r"(?<![\w.$~:/-])/[^\s'\"`,;()\[\]{}<>|]+")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Roots:
    """The folders a path is written relative to; None: that form is not used."""

    data: Path | None
    models: Path | None
    project: Path | None
    home: Path | None

    @classmethod
    def here(cls, data: str | Path | None = None) -> "Roots":
        """This machine's roots: `data` (default `$OPTIMA_DATA_DIR`), the model cache, this
        project's checkout (when the package runs from one) and the home folder."""
        from optima_agents.models.cache import models_root

        data = data if data is not None else os.environ.get(DATA_DIR_ENV, "").strip() or None
        return cls(data=_absolute(data) if data else None, models=_absolute(models_root()),
                   project=_project_root(), home=_absolute(Path.home()))


def _project_root() -> Path | None:
    """The checkout this package runs from, if it runs from one (not from an installed wheel)."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def _absolute(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.normpath(os.path.abspath(os.path.expanduser(os.fspath(path)))))


def _relative(path: Path, root: Path | None) -> Path | None:
    """`path` relative to `root`, also when either is reached through a symbolic link."""
    if root is None:
        return None
    for p in dict.fromkeys((path, path.resolve())):
        for r in dict.fromkeys((root, root.resolve())):
            if p.is_relative_to(r):
                return p.relative_to(r)
    return None


def portable(path: str | os.PathLike[str], roots: Roots | None = None) -> str:
    """`path` as a result records it (see the module doc)."""
    text = os.fspath(path)
    if not os.path.isabs(text):
        return text
    roots = roots or Roots.here()
    absolute = _absolute(text)
    below = _relative(absolute, roots.data)
    if below is not None:
        return DATA_VAR if below == Path(".") else f"{DATA_VAR}/{below.as_posix()}"
    below = _relative(absolute, roots.models)
    if below is not None and len(below.parts) == 1:
        return below.as_posix()  # a pulled model's folder: its name resolves to it anywhere
    for root, prefix in ((roots.project, ""), (roots.home, "~/")):
        below = _relative(absolute, root)
        if below is not None:
            return (prefix.rstrip("/") or ".") if below == Path(".") else prefix + below.as_posix()
    return text


def portable_text(text: str, roots: Roots | None = None) -> str:
    """`text` with every absolute path in it written by `portable` (a trailing full stop stays text)."""
    roots = roots or Roots.here()

    def one(match: re.Match[str]) -> str:
        path = match.group(0)
        stem = path.rstrip(".")
        return portable(stem, roots) + path[len(stem):]

    return _ABSOLUTE.sub(one, text)


def portable_json(data: Any, roots: Roots | None = None) -> Any:
    """`data` (JSON-like) with every string's absolute paths written by `portable`."""
    roots = roots or Roots.here()
    if isinstance(data, str):
        return portable_text(data, roots)
    if isinstance(data, Mapping):
        return {key: portable_json(value, roots) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [portable_json(value, roots) for value in data]
    return data


def expand(text: str) -> str:
    """A recorded path as this machine reads it: `$OPTIMA_DATA_DIR/...` under the data folder
    named by that variable, `~` under the home folder; anything else unchanged."""
    if text != DATA_VAR and not text.startswith(DATA_VAR + "/"):
        return os.path.expanduser(text) if text.startswith("~") else text
    root = os.environ.get(DATA_DIR_ENV, "").strip()
    if not root:
        raise ConfigError(f"{text!r} is under {DATA_VAR}, which is not set here: set {DATA_DIR_ENV} to the folder "
                          "that holds one sub-folder per dataset (gsm8k/, hotpotqa/, ...)")
    return os.path.expanduser(root) + text[len(DATA_VAR):]


def command_line(words: Sequence[str], environ: Mapping[str, str] | None = None,
                 roots: Roots | None = None) -> str:
    """A shell command that runs `words` again on another machine: each word's paths portable,
    after the variables of `environ` it ran with. A variable whose value is a folder of this
    machine is written `NAME=$NAME`: it says the command needs it, as the reader's machine sets it."""
    roots = roots or Roots.here()
    env = [_assignment(name, value, roots) for name, value in (environ or {}).items() if value]
    return " ".join([*env, *(shlex.quote(portable_text(w, roots)) for w in words)])


def _assignment(name: str, value: str, roots: Roots) -> str:
    shown = portable(value, dataclasses.replace(roots, data=None))  # the data folder is the variable itself
    return f"{name}=${name}" if os.path.isabs(shown) else f"{name}={shlex.quote(shown)}"


def portable_command(command: str, roots: Roots | None = None) -> str:
    """A recorded command line with its paths portable (as `command_line` writes it); a command
    without a path to change is returned as it was, quoting included."""
    roots = roots or Roots.here()
    if portable_text(command, roots) == command:
        return command
    words = shlex.split(command)
    environ = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        environ[name] = value
    return command_line(words, environ, roots)
