"""The metadata every config field carries, and a base section's field with another default.

    learning_rate: float = field(default=2e-4, metadata=help_meta("Peak learning rate."))
    learning_rate: float = redefault(TRLTrainSection, "learning_rate", 5e-6, "Peak learning rate (LoRA).")

`help` is what `--help-config` prints for the field; `choices`, where given, is checked when a
config is loaded (`optima_train.config.io`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

__all__ = ["help_meta", "redefault"]


def help_meta(text: str, **more: Any) -> dict[str, Any]:
    """A config field's metadata: its help text, plus e.g. `choices`."""
    return {"help": text, **more}


def redefault(base: type, name: str, default: Any, help: str | None = None) -> Any:
    """Field `name` of the dataclass `base` with another default (and optionally another help
    text), for a subclass whose method needs a different value."""
    original = {f.name: f for f in dataclasses.fields(base)}[name]
    metadata = {**original.metadata, **({"help": help} if help is not None else {})}
    return field(default=default, metadata=metadata)
