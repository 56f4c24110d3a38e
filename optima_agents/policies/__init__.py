"""Policies: map a batch of turn requests to a batch of actions (`base.Policy`).

Backends: `HFPolicy` (transformers), `VLLMPolicy` (vLLM in-process), `LlamaCppPolicy` (llama.cpp
in-process), `OpenAIPolicy` (any OpenAI-compatible server) and `ScriptedPolicy` (a plain function, for tests). The model
backends are imported on first use, so `import optima_agents.policies` stays light. The backend
names `make_policy` takes come from a registry (`registry.py`) that other packages extend through
the entry-point group `optima.backends`.
"""

from __future__ import annotations

import importlib
from typing import Any, Sequence

from optima_agents.policies.base import (
    Action,
    FinishReason,
    Policy,
    PolicyCapabilities,
    SamplingParams,
    SubmittingPolicy,
    TurnRequest,
    capabilities_of,
)
from optima_agents.policies.registry import (
    BACKENDS,
    BackendSpec,
    BackendUnavailableError,
    backend_names,
    backend_spec,
    register_backend,
)
from optima_agents.policies.scripted import ScriptedPolicy
from optima_envs.errors import ConfigError

__all__ = [
    "Action",
    "BackendSpec",
    "BackendUnavailableError",
    "FinishReason",
    "HFPolicy",
    "LlamaCppPolicy",
    "OpenAIPolicy",
    "Policy",
    "PolicyCapabilities",
    "SamplingParams",
    "ScriptedPolicy",
    "SubmittingPolicy",
    "TurnRequest",
    "VLLMPolicy",
    "backend_names",
    "backend_spec",
    "capabilities_of",
    "make_policy",
    "register_backend",
]

_LAZY = {
    "HFPolicy": "optima_agents.policies.hf",
    "VLLMPolicy": "optima_agents.policies.vllm",
    "LlamaCppPolicy": "optima_agents.policies.llamacpp",
    "OpenAIPolicy": "optima_agents.policies.openai_compat",
}


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
        backend: a registered backend (`backend_names()`: "hf", "vllm", "openai", "llamacpp", "auto"
            (the fastest local one that passes parity here, `auto.resolve_backend`), then any
            installed through the entry-point group `optima.backends`).
        model: a registry name, a local model folder or a hub id (for "openai": the served name).
        sampling: the sampling settings.
        dtype, batch_size, device, base_urls: the common options; each backend takes those its
            `BackendSpec.options` lists ("hf" and "auto": dtype, batch_size, device; "vllm": dtype; "llamacpp":
            batch_size; "openai": base_urls, at least one) and the others are not passed on. None: the
            backend's default.
        **kwargs: passed on to the backend's factory (e.g. vLLM engine options).

    Raises:
        ConfigError: an unknown backend, or options that do not fit it.
        BackendUnavailableError: the backend's module or package is missing (says what to install).
        PluginError: an installed backend fails to load.
    """
    spec = backend_spec(backend)
    takes_urls = "base_urls" in spec.options
    if takes_urls and not base_urls:
        raise ConfigError(f"backend {backend!r} needs at least one --base-url (e.g. http://127.0.0.1:8000/v1)")
    if base_urls and not takes_urls:
        with_urls = [name for name, other in BACKENDS.registered().items() if "base_urls" in other.options]
        raise ConfigError(f"--base-url is only for backend {' or '.join(map(repr, with_urls))}, not {backend!r}")
    common = {"dtype": dtype, "batch_size": batch_size, "device": device,
              "base_urls": list(base_urls) if base_urls else None}
    options = {k: v for k, v in common.items() if v is not None and k in spec.options}
    return spec.resolve()(model, sampling=sampling, **options, **kwargs)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
