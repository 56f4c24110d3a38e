"""Typed configs from YAML files and command-line overrides, for every trainer.

    cfg = load_config(ISFTConfig, "configs/isft/synth_hop.yaml", ["train.learning_rate=1e-4"])

- A config is a (nested) dataclass whose fields have types, defaults and `metadata["help"]`
  (and optionally `metadata["choices"]`). YAML mappings fill nested dataclasses.
- `include: other.yaml` (a path relative to the including file, or a list of them) loads a base
  file first; the including file overrides what differs (lm-evaluation-harness style).
- Overrides are `dotted.key=value`; the value is read as YAML (`true`, `[1, 2]`, `null`) and
  then converted to the field's type, so `1e-4` is a float for a float field.
- Every problem (unknown key, with a "did you mean", wrong type, value outside `choices`, a
  failed `__post_init__` check) is collected and raised as one `ConfigError` naming each field,
  the value received and the fix, before any work starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import (
    Any,
    Literal,
    Mapping,
    Sequence,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import yaml

from optima_envs.assignments import parse_assignment
from optima_envs.errors import ConfigError

__all__ = ["ConfigError", "apply_overrides", "config_to_dict", "dump_config", "from_dict", "load_config",
           "load_yaml", "parse_override"]

T = TypeVar("T")
_MISSING = object()


def load_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a YAML mapping, resolving `include:` (base files first, this file wins)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    if path.resolve() in _seen:
        raise ConfigError(f"config include cycle: {' -> '.join(str(p) for p in (*_seen, path.resolve()))}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping at the top, got {type(data).__name__}")
    includes = data.pop("include", None)
    merged: dict[str, Any] = {}
    for inc in [includes] if isinstance(includes, str) else (includes or []):
        merged = _deep_merge(merged, load_yaml(path.parent / inc, (*_seen, path.resolve())))
    return _deep_merge(merged, data)


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """`"train.learning_rate=1e-4"` -> `(["train", "learning_rate"], "1e-4" read as YAML)`."""
    key, value = parse_assignment(text, what="an override (section.field=value)", example="train.learning_rate=1e-4")
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Set each `dotted.key=value` in a nested mapping (creating sections as needed)."""
    out = _deep_merge({}, data)
    for text in overrides:
        keys, value = parse_override(text)
        node = out
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        node[keys[-1]] = value
    return out


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = (),
                extra: Mapping[str, Any] | None = None) -> T:
    """Build a config: defaults, then the YAML file, then `extra` (e.g. typer options), then overrides."""
    data = load_yaml(path) if path is not None else {}
    if extra:
        data = _deep_merge(data, extra)
    return from_dict(cls, apply_overrides(data, overrides))


def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """Build a (nested) dataclass from a mapping, checking every key and type; one error for all."""
    errors: list[str] = []
    result = _build(cls, data, "", errors)
    if errors:
        lines = "\n".join(f"  - {e}" for e in errors)
        raise ConfigError(f"invalid {cls.__name__} ({len(errors)} problem{'s' * (len(errors) > 1)}):\n{lines}")
    return result


def _build(cls: type, data: Any, prefix: str, errors: list[str]) -> Any:
    where = prefix.rstrip(".") or "the config"
    if not isinstance(data, Mapping):
        errors.append(f"{where}: expected a mapping of fields, got {data!r}")
        return _MISSING
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = get_type_hints(cls)
    start = len(errors)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else ""
            errors.append(f"unknown key '{prefix}{key}'{hint} (valid keys: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        before = len(errors)
        value = _convert(hints[name], data[name], f"{prefix}{name}", errors)
        choices = f.metadata.get("choices")
        if len(errors) == before and choices is not None and value not in choices:
            errors.append(f"{prefix}{name}: {value!r} is not one of {list(choices)}")
        if value is not _MISSING:
            kwargs[name] = value
    if len(errors) > start:
        return _MISSING
    try:
        return cls(**kwargs)
    except (ConfigError, ValueError, TypeError) as error:
        errors.append(f"{where}: {error}")
        return _MISSING


def _convert(tp: Any, value: Any, path: str, errors: list[str]) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        for candidate in inner:
            trial: list[str] = []
            converted = _convert(candidate, value, path, trial)
            if not trial:
                return converted
        errors.append(f"{path}: expected {_type_name(tp)}, got {value!r}")
        return _MISSING
    if origin is Literal:
        if value in args:
            return value
        errors.append(f"{path}: {value!r} is not one of {list(args)}")
        return _MISSING
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, f"{path}.", errors)
    if origin in (list, tuple, Sequence, typing.Sequence) or tp in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            value = [value] if not isinstance(value, (list, tuple)) else value
        item = args[0] if args else Any
        items = [_convert(item, v, f"{path}[{i}]", errors) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple or tp is tuple else list(items)
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            errors.append(f"{path}: expected a mapping, got {value!r}")
            return _MISSING
        return dict(value)
    return _scalar(tp, value, path, errors)


def _scalar(tp: Any, value: Any, path: str, errors: list[str]) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    elif tp is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
    else:
        return value
    errors.append(f"{path}: expected {_type_name(tp)}, got {value!r}")
    return _MISSING


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A config as plain YAML-safe data (tuples become lists, paths strings)."""
    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v) if f.init}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, Mapping):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, Path):
            return str(v)
        return v
    return plain(cfg)


def dump_config(cfg: Any) -> str:
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
