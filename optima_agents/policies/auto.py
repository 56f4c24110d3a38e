"""`--backend auto`: the fastest local backend that passes parity on this machine.

    choice = resolve_backend("smollm2-135m", dtype="auto")
    choice.backend, choice.runs_in, choice.backend_kwargs    # "llamacpp", "q8_0", {"weights": "q8_0"}
    policy = make_policy("auto", "smollm2-135m")             # the same choice, built

The first call for a (machine, model, options, package versions) probes every installed local
candidate (`auto_probe`: hf and vllm in the requested dtype, llamacpp in each GGUF weight type):
parity against transformers float32 on the parity prompts, then tokens per second of one timed
batch. The fastest that passed wins (`auto_choice.choose_fastest`), and the decision is stored
in the Optima home (`auto_cache`); later calls read it without loading anything. Both log on the
`optima_agents.policies` logger: the choice at INFO (with every candidate's figures), candidates
that are out at WARNING, and a cached choice at INFO, saying it was not probed again.

Why a measurement rather than a rule: which backend is fastest depends on the machine (bf16 is
fast only with AVX512-BF16 or AMX; llama.cpp's quantized kernels on the instruction sets it was
built for; vLLM on a GPU), on the model and on the installed versions, and parity can fail on
one machine and pass on another (a kernel bug on one instruction set). The probe costs a model
load per candidate, so it runs once per key.

What runs is always a concrete backend: results name it and its weight type, never "auto"
(`make_policy("auto")` returns the chosen backend's policy, whose `identity()` says what it is).
Every new set of weights is a new key: in a training loop, where each iteration writes new
weights, name the backend instead.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from optima_agents.policies.auto_cache import (choice_key, machine_fingerprint, model_identity, package_versions,
                                               read_choice, write_choice)
from optima_agents.policies.auto_choice import BackendChoice, choose_fastest
from optima_agents.policies.auto_probe import ProbeSettings, Prober, installed_candidates
from optima_agents.policies.base import SamplingParams
from optima_envs.errors import ConfigError

__all__ = ["AUTO_BACKEND", "auto_policy", "resolve_backend"]

AUTO_BACKEND = "auto"

logger = logging.getLogger("optima_agents.policies")


def resolve_backend(model: str, *, dtype: str = "auto", batch_size: int | None = None, device: str | None = None,
                    home: str | None = None, settings: ProbeSettings = ProbeSettings(), refresh: bool = False,
                    probe: Prober | None = None) -> BackendChoice:
    """The backend `auto` means for `model` here: the cached decision, or a new probe.

    Args:
        model: a registry name, a model folder or a hub id.
        dtype: the dtype hf and vllm run in ("auto": bf16 where the hardware runs it natively).
        batch_size, device: the common options the chosen policy will get (part of the key).
        home: the Optima home holding the models and the choice cache.
        settings: the probe's sizes and parity tolerance (part of the key).
        refresh: probe again even when a decision is cached (and replace it).
        probe: the prober (default `auto_probe.probe_candidates`; tests pass scripted ones).

    Returns:
        A `BackendChoice`: `source` says whether it was probed now or read from the cache.

    Raises:
        NoBackendPassedError: no candidate loads, passes parity and generates (the message names
            each one's failure).
        ModelNotFoundError: the model cannot be found.
    """
    from optima_agents.models import resolve_model
    from optima_agents.models.dtypes import resolve_dtype, resolve_dtype_here

    dtype = resolve_dtype(dtype, device) if device else resolve_dtype_here(dtype)
    model_path = str(resolve_model(model, home=home))
    candidates = installed_candidates(model_path, dtype)
    options = {k: v for k, v in {"dtype": dtype, "batch_size": batch_size, "device": device}.items() if v is not None}
    identity = {"machine": machine_fingerprint(), "model": model_identity(model, model_path), "options": options,
                "versions": package_versions(), "probe": settings.to_dict(),
                "candidates": [c.label for c in candidates]}
    key = choice_key(identity)
    cached = None if refresh else read_choice(key, home=home)
    if cached is not None:
        choice = BackendChoice.from_dict(cached["choice"], source="cached")
        logger.info("backend auto for %s: %s; not probed again (key %s)", model, choice.describe(), key)
        return choice
    logger.info("backend auto for %s: probing %d candidate(s) on this machine: %s", model, len(candidates),
                ", ".join(c.label for c in candidates) or "none installed")
    if probe is None:
        from optima_agents.policies.auto_probe import probe_candidates as probe
    results = probe(candidates, model_path, settings, options)
    for result in results:
        (logger.info if result.passed else logger.warning)("backend auto probe: %s", result.summary())
    chosen = choose_fastest(results)
    choice = BackendChoice(chosen, tuple(results), "probed", key, time.strftime("%Y-%m-%dT%H:%M:%S"))
    path = write_choice(key, identity, choice.to_dict(), home=home)
    logger.info("backend auto for %s: %s; stored in %s (key %s)", model, choice.describe(), path, key)
    return choice


def auto_policy(model: str = "smollm2-135m", *, sampling: SamplingParams = SamplingParams(), dtype: str | None = None,
                batch_size: int | None = None, device: str | None = None, **kwargs: Any) -> Any:
    """The policy of the backend `resolve_backend` chooses (the `auto` backend's factory).

    Raises:
        ConfigError: backend-specific options (`backend_kwargs`) are given: they belong to one
            backend, and `auto` may choose another.
        NoBackendPassedError: see `resolve_backend`.
    """
    from optima_agents.policies import make_policy

    if kwargs:
        raise ConfigError(f"backend 'auto' takes no backend-specific options, got {sorted(kwargs)}: they belong to "
                          "one backend and auto may choose another. Name that backend instead of auto")
    choice = resolve_backend(model, dtype=dtype or "auto", batch_size=batch_size, device=device)
    dtype = choice.runs_in if choice.chosen.candidate.weights is None else dtype
    return make_policy(choice.backend, model, sampling=sampling, dtype=dtype, batch_size=batch_size, device=device,
                       **choice.backend_kwargs)
