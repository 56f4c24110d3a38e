"""Inference systems: ways of using a model on a task, compared on the leaderboard.

    from optima_agents.systems import make_system, list_systems
    system = make_system("sc", k=4)          # or make_system("sc:k=4")
    outcomes = system.run(SystemContext(env_id, env_kwargs, questions, policy))

Built in: `cot`, `sc`, `mad`, `mas`, `autoform`, `mas-sc` (each module's docstring says what
it does and which choices it makes). A new system is one file: a dataclass subclass of
`System` whose fields are its settings, with `name` and `run(context)`, registered with
`register_system`, or from another package through the entry-point group `optima.systems`
(`name = "module:Class"`).
"""

from __future__ import annotations

import dataclasses
from importlib.metadata import entry_points
from typing import Any

import yaml

from optima_agents.systems.base import Outcome, Question, Sample, System, SystemContext, heldout_questions
from optima_agents.systems.debate import MultiAgentDebate
from optima_agents.systems.dialogue import AutoForm, Dialogue, DialogueVote
from optima_agents.systems.single import ChainOfThought, SelfConsistency
from optima_envs.errors import ConfigError

__all__ = [
    "ENTRY_POINT_GROUP", "Outcome", "Question", "Sample", "System", "SystemContext", "heldout_questions",
    "list_systems", "make_system", "parse_system", "register_system",
]

ENTRY_POINT_GROUP = "optima.systems"

_SYSTEMS: dict[str, type[System]] = {}


def register_system(cls: type[System]) -> type[System]:
    """Add a system class under its `name` (usable as a decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, System) and dataclasses.is_dataclass(cls)):
        raise ConfigError(f"register_system needs a dataclass subclass of System, got {cls!r}")
    if not cls.name:
        raise ConfigError(f"{cls.__name__} has no `name`")
    if cls.name in _SYSTEMS and _SYSTEMS[cls.name] is not cls:
        raise ConfigError(f"a system named {cls.name!r} is already registered ({_SYSTEMS[cls.name].__name__})")
    _SYSTEMS[cls.name] = cls
    return cls


for _cls in (ChainOfThought, SelfConsistency, MultiAgentDebate, Dialogue, AutoForm, DialogueVote):
    register_system(_cls)


def _load_entry_points() -> None:
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in _SYSTEMS:
            register_system(point.load())


def list_systems() -> dict[str, str]:
    """Every registered system name with its one-line summary."""
    _load_entry_points()
    return {name: cls.summary for name, cls in sorted(_SYSTEMS.items())}


def make_system(spec: str, **settings: Any) -> System:
    """A system from its name, or `name:key=value:key=value` (values read as YAML), plus keyword
    settings. Unknown names and settings fail with the accepted ones listed."""
    name, parsed = parse_system(spec)
    _load_entry_points()
    if name not in _SYSTEMS:
        raise ConfigError(f"unknown system {name!r}; registered: {sorted(_SYSTEMS)}")
    cls = _SYSTEMS[name]
    merged = {**parsed, **settings}
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ConfigError(f"system {name!r} has no setting(s) {unknown}; its settings: {sorted(known)}")
    try:
        return cls(**merged)
    except TypeError as error:
        raise ConfigError(f"system {name!r}: {error}") from None


def parse_system(spec: str) -> tuple[str, dict[str, Any]]:
    """`"sc:k=4:temperature=0.5"` -> `("sc", {"k": 4, "temperature": 0.5})`. Colons, not commas,
    separate the settings, so a comma-separated list of systems stays unambiguous."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"a system is named by a non-empty string such as 'cot' or 'sc:k=4', got {spec!r}")
    name, _, rest = spec.strip().partition(":")
    settings: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(":"))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"system {spec!r}: settings are key=value pairs separated by colons, got {item!r}")
        settings[key.strip()] = yaml.safe_load(value)
    return name.strip(), settings
