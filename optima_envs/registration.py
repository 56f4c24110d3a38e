"""Env ids, specs, and `make`, in the manner of Gymnasium's registry.

An id is `name` or `name-vN`; the bare name means the latest version. A spec points at a task
factory by a "module:attr" string, so importing the registry imports no task.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from optima_envs.core.dialogue_env import DialogueEnv
from optima_envs.core.task import Task
from optima_envs.errors import ConfigError, DeprecatedEnvError, RegistrationError, UnknownEnvError

ENV_ID_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9-]*?)(?:-v(?P<version>\d+))?$")
ENV_KWARGS = tuple(p for p in inspect.signature(DialogueEnv.__init__).parameters if p not in ("self", "task", "env_id", "version"))


def parse_env_id(env_id: str) -> tuple[str, int | None]:
    """`"hotpotqa-ia-v2"` -> `("hotpotqa-ia", 2)`; `"hotpotqa-ia"` -> `("hotpotqa-ia", None)`."""
    match = ENV_ID_RE.fullmatch(env_id) if isinstance(env_id, str) else None
    if match is None:
        raise UnknownEnvError(f"malformed env id {env_id!r}: expected 'name' or 'name-vN' (lowercase, digits, '-')")
    version = match.group("version")
    return match.group("name"), int(version) if version is not None else None


def get_env_id(name: str, version: int | None) -> str:
    """The inverse of `parse_env_id`."""
    return name if version is None else f"{name}-v{version}"


@dataclass(frozen=True)
class EnvSpec:
    """A registered env: a task factory plus the env defaults it needs.

    `version` changes whenever scoring or data handling changes; `changes` says why (the
    version history).
    """

    name: str
    version: int
    entry_point: str
    description: str
    family: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    changes: Mapping[int, str] = field(default_factory=dict)
    heldout_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """`make()` kwargs of the questions a model is judged on (e.g. `{"split": "test"}`): what the
    leaderboard plays unless told otherwise, so a board never scores a checkpoint on the split
    it was trained on."""

    def __post_init__(self) -> None:
        parse_env_id(self.name)
        if ":" not in self.entry_point:
            raise RegistrationError(f"entry_point must be 'module:attr', got {self.entry_point!r}")

    @property
    def id(self) -> str:
        return get_env_id(self.name, self.version)

    def load_factory(self) -> Callable[..., Task]:
        module_name, attr = self.entry_point.split(":")
        return getattr(importlib.import_module(module_name), attr)


registry: dict[str, EnvSpec] = {}


def register(spec: EnvSpec) -> None:
    """Add a spec; registering the same name and version twice is an error."""
    if spec.id in registry:
        raise RegistrationError(f"env {spec.id!r} is already registered")
    registry[spec.id] = spec


def spec(env_id: str) -> EnvSpec:
    """Look up the spec for an id (bare name: latest version); clear errors for unknown ids."""
    name, version = parse_env_id(env_id)
    versions = sorted(s.version for s in registry.values() if s.name == name)
    if not versions:
        names = sorted({s.name for s in registry.values()})
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        shown = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")
        raise UnknownEnvError(f"no env named {name!r}.{hint} Registered: {shown}. See optima_envs.list_envs().")
    if version is None:
        return registry[get_env_id(name, versions[-1])]
    if version not in versions:
        latest = get_env_id(name, versions[-1])
        if version < versions[-1]:
            raise DeprecatedEnvError(f"env {env_id!r} is no longer available; use {latest!r} instead.")
        raise UnknownEnvError(f"env {name!r} has no version {version}; registered versions: {versions} (latest {latest!r}).")
    return registry[get_env_id(name, version)]


def make(env_id: str, **kwargs: Any) -> DialogueEnv:
    """Build a ready env.

    Args:
        env_id: a registered id, e.g. "hotpotqa-ia" (latest) or "hotpotqa-ia-v1".
        **kwargs: env options (num_agents, max_turns, tokenizer, max_message_chars,
            render_mode, agent_names, format_pool) and task options (e.g. data_dir, split,
            limit for datasets; hops, distractors for synth-hop-ia).

    Returns:
        A `DialogueEnv` (PettingZoo ParallelEnv); `env.metadata["version"]` is the spec version.

    Raises:
        UnknownEnvError: the id is not registered (the message lists close matches).
        ConfigError: an option is unknown to both the env and the task, or has a bad value.
    """
    env_spec = spec(env_id)
    merged = {**env_spec.kwargs, **kwargs}
    env_kwargs = {k: v for k, v in merged.items() if k in ENV_KWARGS}
    task_kwargs = {k: v for k, v in merged.items() if k not in ENV_KWARGS}
    factory = env_spec.load_factory()
    accepted = _keyword_names(factory)
    unknown = sorted(set(task_kwargs) - set(accepted))
    if unknown:
        raise ConfigError(
            f"{env_spec.id}: unknown option(s) {unknown}. Env options: {list(ENV_KWARGS)}; "
            f"task options: {accepted}"
        )
    task = factory(**task_kwargs)
    return DialogueEnv(task, env_id=env_spec.name, version=env_spec.version, **env_kwargs)


def list_envs() -> dict[str, str]:
    """Every registered id (latest versions, by name) with its one-line description."""
    latest: dict[str, EnvSpec] = {}
    for s in registry.values():
        if s.name not in latest or s.version > latest[s.name].version:
            latest[s.name] = s
    return {name: latest[name].description for name in sorted(latest)}


def pprint_registry(print_output: bool = True) -> str | None:
    """The registry as a table of id, family and description; returns the text if not printing."""
    rows = [f"{s.id:<24} {s.family:<7} {s.description}" for s in sorted(registry.values(), key=lambda s: s.id)]
    text = "\n".join(rows)
    if print_output:
        print(text)
        return None
    return text


def _keyword_names(factory: Callable[..., Any]) -> list[str]:
    params = inspect.signature(factory).parameters.values()
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
