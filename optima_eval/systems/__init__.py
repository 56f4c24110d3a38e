"""Inference systems: ways of using a model on a task, compared on the leaderboard.

    from optima_eval.systems import make_system, list_systems
    system = make_system("sc", k=4)          # or make_system("sc:k=4")
    outcomes = system.run(SystemContext(env_id, env_kwargs, questions, policy))

Built in: `cot`, `sc`, `solo`, `mad`, `mas`, `autoform`, `mas-sc` (each module's docstring says what
it does and which choices it makes). A new system is one file: a dataclass subclass of
`System` whose fields are its settings, with `name` and `run(context)`, registered with
`register_system`, or from another package through the entry-point group `optima.systems`
(`name = "module:Class"`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from optima_envs.assignments import parse_assignment
from optima_envs.errors import ConfigError
from optima_envs.plugins import Registry
from optima_eval.systems.base import Outcome, Question, Sample, System, SystemContext
from optima_eval.systems.debate import MultiAgentDebate
from optima_eval.systems.dialogue import AutoForm, Dialogue, DialogueVote
from optima_eval.systems.single import ChainOfThought, NoTalk, SelfConsistency

__all__ = [
    "ENTRY_POINT_GROUP", "SYSTEMS", "Outcome", "Question", "Sample", "System", "SystemContext",
    "list_systems", "make_system", "parse_system", "register_system",
]

ENTRY_POINT_GROUP = "optima.systems"


def _as_system_class(name: str, cls: Any) -> type[System]:
    if not (isinstance(cls, type) and issubclass(cls, System) and dataclasses.is_dataclass(cls)):
        raise ConfigError(f"system {name!r} must be a dataclass subclass of System, got {cls!r}")
    if cls.name != name:
        raise ConfigError(f"system class {cls.__name__} is named {cls.name!r}, registered as {name!r}")
    return cls


SYSTEMS: Registry[type[System]] = Registry(
    "system", group=ENTRY_POINT_GROUP, convert=_as_system_class,
    how_to_add=f"register one with register_system(), or from another package through the entry-point group "
               f"{ENTRY_POINT_GROUP!r}")


def register_system(cls: type[System]) -> type[System]:
    """Add a system class under its `name` (usable as a decorator)."""
    name = getattr(cls, "name", None)
    if not name:
        raise ConfigError(f"register_system needs a dataclass subclass of System with a `name`, got {cls!r}")
    if SYSTEMS.registered().get(name) is cls:
        return cls
    return SYSTEMS.register(name, cls)


for _cls in (ChainOfThought, SelfConsistency, NoTalk, MultiAgentDebate, Dialogue, AutoForm, DialogueVote):
    register_system(_cls)


def list_systems() -> dict[str, str]:
    """Every usable system name with its one-line summary (installed plug-ins are imported)."""
    return {name: SYSTEMS.get(name).summary for name in sorted(SYSTEMS.names())}


def make_system(spec: str, **settings: Any) -> System:
    """A system from its name, or `name:key=value:key=value` (values read as YAML), plus keyword
    settings. Unknown names and settings fail with the accepted ones listed."""
    name, parsed = parse_system(spec)
    cls = SYSTEMS.get(name)
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
        key, value = parse_assignment(item, what=f"system {spec!r}: a setting (colon-separated)", example="sc:k=4")
        settings[key] = value
    return name.strip(), settings
