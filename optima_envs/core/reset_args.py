"""The checks on `DialogueEnv.reset(seed=..., options=...)`: a wrong seed or option value fails with
a message that lists what is accepted, instead of failing deep inside numpy or `dict()`. An unknown
option key is ignored, as Gymnasium and PettingZoo envs do (PettingZoo's own API test passes one),
with one warning per env so that a typo is still seen."""

from __future__ import annotations

import difflib
import warnings
import weakref
from typing import Any, Mapping

import numpy as np

from optima_envs.core.text import first_unencodable
from optima_envs.core.types import TaskInstance
from optima_envs.errors import ConfigError

__all__ = ["RESET_OPTIONS", "ResetOptionWarning", "check_options", "check_seed"]

#: Every key `reset(options=...)` understands, with what it does.
RESET_OPTIONS: Mapping[str, str] = {
    "format_instruction": "a format instruction: a string, an index into the format pool, or 'sample'",
    "index": "the instance index, an int in [0, len(source))",
    "instance": "a TaskInstance to play instead of one from the source",
    "ablation": "alter the agents' views of each other's messages: {'mode': 'remove'} or {'mode': 'swap', "
                "'messages': [{'turn': t, 'text': ...}]} (optima_envs.core.ablation)",
}


class ResetOptionWarning(UserWarning):
    """Emitted when `reset(options=...)` has a key no env understands; its own class so that callers
    who pass such keys on purpose can filter it."""


#: The unknown keys each env has already warned about, so that a reset loop warns once, not every episode.
_WARNED: weakref.WeakKeyDictionary[Any, set[Any]] = weakref.WeakKeyDictionary()


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_seed(seed: Any) -> None:
    """Raises ConfigError unless `seed` is None or a non-negative int (numpy ints too, not bool)."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"reset(seed=...) must be a non-negative int or None, got {type(seed).__name__} "
                          f"{_short(seed)}")


def check_options(options: Any, owner: Any = None) -> dict[str, Any]:
    """`options` as a plain dict of the accepted keys after checking its type and values.

    An unknown key is dropped with a `ResetOptionWarning` (with a close match when there is one and
    the accepted keys), once per key for each `owner` (the env), every time when there is none.

    Raises:
        ConfigError: not a mapping, an `instance` that is not a TaskInstance, or a
            `format_instruction` UTF-8 cannot encode.
    """
    accepted = sorted(RESET_OPTIONS)
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"reset(options=...) must be a dict of reset options or None, got {type(options).__name__} "
                          f"{_short(options)}; accepted keys: {accepted}, e.g. options={{'index': 3}}")
    _warn_unknown([key for key in options if key not in RESET_OPTIONS], accepted, owner)
    instance = options.get("instance")
    if instance is not None and not isinstance(instance, TaskInstance):
        raise ConfigError(f"options['instance'] must be a TaskInstance, got {type(instance).__name__} "
                          f"{_short(instance)}")
    instruction = options.get("format_instruction")
    if isinstance(instruction, str) and (at := first_unencodable(instruction)) is not None:
        raise ConfigError(f"options['format_instruction'] holds text UTF-8 cannot encode (a lone surrogate at "
                          f"position {at}: {_short(instruction[max(0, at - 10):at + 10])}); pass valid text")
    return {key: value for key, value in options.items() if key in RESET_OPTIONS}


def _warn_unknown(keys: list[Any], accepted: list[str], owner: Any) -> None:
    warned = _WARNED.setdefault(owner, set()) if owner is not None else set()
    new = [key for key in keys if key not in warned]
    if not new:
        return
    warned.update(new)
    named = []
    for key in new:
        close = difflib.get_close_matches(str(key), accepted, n=1)
        named.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    plural = "s" if len(new) > 1 else ""
    warnings.warn(f"reset(options=...) ignores unknown key{plural} {', '.join(named)}; accepted keys: {accepted}",
                  ResetOptionWarning, stacklevel=4)
