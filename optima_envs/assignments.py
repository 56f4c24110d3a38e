"""`key=value` text from command lines and specs, with the value read as YAML: `4` an int,
`true` a bool, `[a, b]` a list, `null` None. A value that is not valid YAML (`a: b: c`) is kept
as the text given, so a path or a sentence never fails on its punctuation."""

from __future__ import annotations

from typing import Any

from optima_envs.errors import ConfigError

__all__ = ["parse_assignment", "parse_value"]


def parse_value(text: str) -> Any:
    """The YAML value of `text`; the text itself where it is not YAML; "" for blank text."""
    import yaml

    if not text.strip():
        return ""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_assignment(text: str, *, what: str, example: str) -> tuple[str, Any]:
    """`"k=4"` -> `("k", 4)`.

    Raises:
        ConfigError: no `=`, or nothing before it; the message names `what` was being set and
            shows `example`.
    """
    key, sep, raw = str(text).partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{what} takes key=value (e.g. {example}), got {text!r}")
    return key.strip(), parse_value(raw)
