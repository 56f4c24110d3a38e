"""The base of every method's `train` section: the TRL fields every trainer passes on, how a
step is launched, and which trackers it reports to.

    class DPOTrainSection(TRLTrainSection):
        TRL_CONFIG = "DPOConfig"
        learning_rate: float = redefault(TRLTrainSection, "learning_rate", 5e-6, "Peak learning rate (LoRA).")
        beta: float = field(default=0.1, metadata=help_meta("DPO beta."))

A method's `train` section extends `TRLTrainSection` with its own fields and, where its defaults
differ, `redefault`s the shared ones; the shared checks (and the check of `train.extra` against
the method's TRL config class) run in the base's `__post_init__`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from optima_envs.errors import ConfigError
from optima_train.config.fields import help_meta

__all__ = ["LAUNCH_FIELDS", "TRLTrainSection", "launch_keys", "report_targets"]


#: The `TRLTrainSection` fields that say how a step is launched, not what it trains.
LAUNCH_FIELDS = ("launcher", "accelerate_config", "launch_args")


def launch_keys(*sections: str) -> tuple[str, ...]:
    """The dotted launch keys of the named train sections (e.g. `launch_keys("sft", "dpo")`), for a
    config's `RESUMABLE`: a run started inline may resume under `accelerate launch` and back."""
    return tuple(f"{section}.{name}" for section in sections for name in LAUNCH_FIELDS)


#: The Python module each tracker named in `train.report_to` needs, where it differs from the name.
_TRACKER_MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio", "mlflow": "mlflow",
                    "comet_ml": "comet_ml", "clearml": "clearml", "neptune": "neptune", "dvclive": "dvclive"}


def report_targets(names: list[str]) -> list[str]:
    """`train.report_to` as TRL takes it: `auto` becomes tensorboard where it is installed; a named
    tracker that is not installed fails here, at parse time, not after a generation phase."""
    import importlib.util

    if isinstance(names, str) or not all(isinstance(name, str) for name in names):
        raise ConfigError(f"train.report_to must be a list of tracker names, e.g. [tensorboard], got {names!r}")
    targets: list[str] = []
    for name in names:
        if name == "none":
            continue
        if name == "auto":
            if importlib.util.find_spec("tensorboard") is not None:
                targets.append("tensorboard")
            continue
        module = _TRACKER_MODULES.get(name)
        if module is None:
            raise ConfigError(f"train.report_to names {name!r}, which is not a tracker this config knows; use "
                              f"auto, none or any of {sorted(_TRACKER_MODULES)}")
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"train.report_to names {name!r}, but it is not installed: pip install {module}")
        targets.append(name)
    return list(dict.fromkeys(targets))


@dataclass
class TRLTrainSection:
    """The `train` fields every method passes to its TRL config (`trl_glue.training_args` reads
    them). A subclass names its TRL config class (`TRL_CONFIG`, which `extra` is checked
    against), the TRL fields it sets itself (`OWNED`), and adds its own fields."""

    TRL_CONFIG: ClassVar[str] = "SFTConfig"
    METHOD: ClassVar[str] = "iSFT"
    OWNED: ClassVar[tuple[str, ...]] = ("output_dir", "seed")
    OWNED_NOTE: ClassVar[str] = ""
    AT_LEAST_ONE: ClassVar[tuple[str, ...]] = ("per_device_train_batch_size", "gradient_accumulation_steps",
                                               "max_length", "logging_steps")

    init: str = field(default="previous", metadata=help_meta(
        "Each iteration trains from the previous iteration's weights, or from the starting model.",
        choices=["previous", "base"]))
    learning_rate: float = field(default=2e-4, metadata=help_meta("Peak learning rate (LoRA default; ~1e-5 for full)."))
    num_train_epochs: float = field(default=1.0, metadata=help_meta("Epochs over the iteration's training data."))
    max_steps: int = field(default=-1, metadata=help_meta("If > 0: optimizer steps per iteration (overrides epochs)."))
    per_device_train_batch_size: int = field(default=4, metadata=help_meta("Examples per step per device."))
    gradient_accumulation_steps: int = field(default=1, metadata=help_meta("Steps accumulated per optimizer step."))
    max_length: int = field(default=1024, metadata=help_meta(
        "Tokens kept per example (longer ones are truncated, the start kept)."))
    lr_scheduler_type: str = field(default="cosine", metadata=help_meta("transformers scheduler name."))
    warmup_steps: float = field(default=0.0, metadata=help_meta(
        "Warmup steps (a float < 1: a fraction of all steps)."))
    weight_decay: float = field(default=0.0, metadata=help_meta("AdamW weight decay."))
    bf16: bool | Literal["auto"] = field(default="auto", metadata=help_meta(
        "bf16 autocast; auto: on where the device runs bf16 natively (GPUs, CPUs with AMX or AVX512-BF16), off on "
        "other CPUs, where it is emulated and slower than float32."))
    gradient_checkpointing: bool = field(default=False, metadata=help_meta("Trade compute for memory."))
    frozen_base_dtype: Literal["auto", "float32", "bfloat16"] = field(default="auto", metadata=help_meta(
        "dtype the frozen base of a LoRA run is loaded in: bfloat16 saves autocast's cast of every weight in every "
        "pass (the products are the same bf16 ones; the embedding and norms stay float32, so the residual stream "
        "does too) and the adapter is merged into the float32 weights after; auto: bfloat16 when LoRA trains under "
        "bf16, else float32.",
        choices=["auto", "float32", "bfloat16"]))
    logging_steps: int = field(default=5, metadata=help_meta("Log the losses every this many steps."))
    report_to: list[str] = field(default_factory=lambda: ["auto"], metadata=help_meta(
        "Experiment trackers TRL logs each training step to (its `report_to`): auto is tensorboard where it is "
        "installed (event files in <iteration>/trainer/runs), else none; or name them, e.g. [tensorboard, wandb] "
        "or [trackio]; [] or [none]: no tracker."))
    # launch (how, not what: a run may resume under another launcher, see `launch_keys`)
    launcher: str = field(default="inline", metadata=help_meta(
        "Where each training step runs: in this process (inline), or under `accelerate launch` in a subprocess "
        "(accelerate: several processes, GPUs or nodes, DDP or DeepSpeed; see optima_train.trl_glue).",
        choices=["inline", "accelerate"]))
    accelerate_config: str | None = field(default=None, metadata=help_meta(
        "accelerate config file for launcher=accelerate (e.g. configs/gpu/accelerate/1x8_zero3.yaml; None: "
        "accelerate's own default config)."))
    launch_args: list[str] = field(default_factory=list, metadata=help_meta(
        "More `accelerate launch` arguments for launcher=accelerate, after the config file (e.g. "
        "[--num_processes, '2', --cpu])."))
    extra: dict[str, Any] = field(default_factory=dict, metadata=help_meta(
        "Any other field of the method's TRL config (trl.SFTConfig for iSFT, trl.DPOConfig for iDPO), passed "
        "through; checked at parse time."))

    def __post_init__(self) -> None:
        if self.learning_rate <= 0:
            raise ConfigError(f"train.learning_rate must be > 0, got {self.learning_rate}")
        if self.max_steps <= 0 and self.num_train_epochs <= 0:
            raise ConfigError(f"train.num_train_epochs must be > 0 when train.max_steps <= 0 "
                              f"(got num_train_epochs={self.num_train_epochs}, max_steps={self.max_steps})")
        for name in self.AT_LEAST_ONE:
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.launcher == "inline" and (self.accelerate_config or self.launch_args):
            raise ConfigError(f"train.accelerate_config={self.accelerate_config!r} and train.launch_args="
                              f"{self.launch_args!r} apply to launcher=accelerate, but train.launcher='inline'; set "
                              "train.launcher=accelerate or remove them")
        report_targets(self.report_to)
        if self.extra:
            self._check_extra()

    def _arguments_class(self) -> tuple[type, str]:
        """The arguments dataclass `train.extra` is passed to, and its name for messages."""
        import trl

        return getattr(trl, self.TRL_CONFIG), f"trl.{self.TRL_CONFIG}"

    def _check_extra(self) -> None:
        arguments, label = self._arguments_class()
        known = {f.name for f in dataclasses.fields(arguments)}
        owned = {f.name for f in dataclasses.fields(self)} | set(self.OWNED)
        unknown = sorted(set(self.extra) - known)
        clash = sorted(set(self.extra) & owned)
        if unknown:
            raise ConfigError(f"train.extra has keys that are not {label} fields: {unknown}")
        if clash:
            raise ConfigError(f"train.extra sets {clash}, which the {self.METHOD} config owns; set them directly"
                              f"{self.OWNED_NOTE}")
