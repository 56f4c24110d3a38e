"""Named plug-in registries that other packages extend through Python entry points.

    BACKENDS = Registry("backend", group="optima.backends", convert=as_backend_spec,
                        how_to_add="register one with register_backend(), or ...")
    BACKENDS.register("hf", spec)     # built-ins register in code
    BACKENDS.get("echo")              # a registered item, else the installed entry point of that name
    BACKENDS.names()                  # registered names, then installed entry points (none imported)

A third-party package adds to a registry with no change to this project, in its own
pyproject.toml (the registry's `convert` says what the object may be):

    [project.entry-points."optima.backends"]
    echo = "my_package.policy:EchoPolicy"

Entry points are read from the installed distributions' metadata when a name is looked up, and
one is imported only when its name is used, so a broken or heavy plug-in costs nothing until
then. A name registered in code wins over an entry point of the same name. This module sits at
the bottom of the package stack so every layer's registry can use it.
"""

from __future__ import annotations

import difflib
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable, Generic, TypeVar

from optima_envs.errors import ConfigError, PluginError

__all__ = ["Convert", "Registry", "installed_entry_points", "load_entry_point"]

T = TypeVar("T")

Convert = Callable[[str, Any], T]
"""Turns (name, the object registered or loaded for it) into the registry's item; raises
`ConfigError` when the object is not something the registry takes."""


def installed_entry_points(group: str) -> dict[str, EntryPoint]:
    """The entry points of `group` in the installed distributions, by name (nothing is imported)."""
    return {point.name: point for point in entry_points(group=group)}


def load_entry_point(point: EntryPoint, kind: str) -> Any:
    """Import one entry point's object.

    Raises:
        PluginError: the import failed; the message names the entry point and its distribution.
    """
    try:
        return point.load()
    except Exception as error:  # noqa: BLE001  (a plug-in can fail in any way; say which one did)
        raise PluginError(f"{kind} {point.name!r} ({_where(point)}) failed to load: "
                          f"{type(error).__name__}: {error}") from error


def _where(point: EntryPoint) -> str:
    dist = point.dist.name if point.dist is not None else "an unknown distribution"
    return f"entry point {point.name} = {point.value!r} in group {point.group!r}, from {dist}"


class Registry(Generic[T]):
    """Names mapped to items, filled in code (`register`) and from an entry-point group.

    Args:
        kind: what an item is, for messages ("backend", "training algorithm").
        group: the entry-point group other packages add to (e.g. "optima.backends").
        convert: checks and converts what is registered or loaded (see `Convert`).
        how_to_add: the end of the unknown-name message: how a new item is registered.
    """

    def __init__(self, kind: str, *, group: str, convert: Convert[T], how_to_add: str):
        self.kind = kind
        self.group = group
        self.how_to_add = how_to_add
        self._convert = convert
        self._items: dict[str, T] = {}

    def register(self, name: str, item: Any, *, replace: bool = False) -> T:
        """Add `item` under `name` (converted by the registry's `convert`) and return it.

        Raises:
            ConfigError: a bad name, a name already taken (unless `replace`), or an item the
                registry does not take.
        """
        if not isinstance(name, str) or not name or name != name.strip() or ":" in name:
            raise ConfigError(f"a {self.kind} name is a non-empty string without spaces at its ends or colons, "
                              f"got {name!r}")
        if name in self._items and not replace:
            raise ConfigError(f"a {self.kind} named {name!r} is already registered; pick another name "
                              "(or pass replace=True to change it on purpose)")
        value = self._convert(name, item)
        self._items[name] = value
        return value

    def unregister(self, name: str) -> None:
        """Remove `name` if it was registered or loaded (an installed entry point stays installed)."""
        self._items.pop(name, None)

    def registered(self) -> dict[str, T]:
        """The items registered in code or loaded so far, by name (no entry point is imported)."""
        return dict(self._items)

    def names(self) -> list[str]:
        """Every usable name: those registered in code (in order), then installed entry points."""
        installed = sorted(n for n in installed_entry_points(self.group) if n not in self._items)
        return [*self._items, *installed]

    def __contains__(self, name: object) -> bool:
        return name in self._items or (isinstance(name, str) and name in installed_entry_points(self.group))

    def get(self, name: str) -> T:
        """The item named `name`: a registered one, else the installed entry point of that name,
        imported and converted now (and kept, so it is imported once).

        Raises:
            ConfigError: no such name; the message lists the usable names and how to add one.
            PluginError: the entry point exists but fails to import or is not a valid item.
        """
        if name in self._items:
            return self._items[name]
        point = installed_entry_points(self.group).get(name) if isinstance(name, str) else None
        if point is None:
            raise self.unknown(name)
        loaded = load_entry_point(point, self.kind)
        try:
            return self.register(name, loaded)
        except PluginError:
            raise
        except ConfigError as error:
            raise PluginError(f"{self.kind} {name!r} ({_where(point)}): {error}") from None

    def unknown(self, name: object) -> ConfigError:
        """The error for a name that is neither registered nor installed."""
        names = self.names()
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return ConfigError(f"unknown {self.kind} {name!r}; choose one of {names}{hint} ({self.how_to_add})")
