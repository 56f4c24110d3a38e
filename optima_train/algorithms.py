"""The training algorithms by name: what `optima train <name>` runs.

Built in (registered here, in code): `isft`, `idpo`, `isft-dpo` and `grpo`. Each is an `AlgorithmSpec`:
a typed config dataclass and the trainer class that runs it; `optima train` makes one command
per registered algorithm, with the same options for all, so a new algorithm needs no CLI code.
Another package adds one through the entry-point group `optima.algorithms`, naming an
`AlgorithmSpec`:

    [project.entry-points."optima.algorithms"]
    my-rl = "my_package.algorithm:ALGORITHM"

    ALGORITHM = AlgorithmSpec("my-rl", config="my_package.config:MyConfig",
                              trainer="my_package.trainer:MyTrainer", summary="...")

The trainer follows `Trainer`: built from the parsed config, it checks the env and its data
(`check_data`, for `--print-config`), then every resource (`check_resources`), before `train()`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, is_dataclass
from typing import Any, Protocol, runtime_checkable

from optima_envs.errors import ConfigError
from optima_envs.plugins import Registry

__all__ = ["ALGORITHMS", "ENTRY_POINT_GROUP", "AlgorithmSpec", "Trainer", "algorithm", "algorithm_names",
           "register_algorithm"]

ENTRY_POINT_GROUP = "optima.algorithms"


@runtime_checkable
class Trainer(Protocol):
    """What `optima train` needs of a trainer class: `cls(config)`, then these methods.

    `check_data` and `check_resources` raise `ConfigError` (or another `OptimaError`) naming what
    is missing; `train` runs or resumes the run and returns one summary row per iteration.
    """

    def check_data(self) -> None: ...

    def check_resources(self) -> None: ...

    def train(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class AlgorithmSpec:
    """One training algorithm.

    Args:
        name: the command name (`optima train <name>`).
        config: the config dataclass, or "module:attr" naming it (imported when the command runs).
        trainer: the trainer class (`Trainer`), or "module:attr" naming it.
        summary: the command's one-line help.
        count_option: the command-line shortcut for the run length and the config field it sets
            (e.g. `("--iterations", "run.iterations")`).
        config_dir: where its shipped YAML configs are, for `--config`'s help (None: not shown).
    """

    name: str
    config: type | str
    trainer: type | str
    summary: str = ""
    count_option: tuple[str, str] = ("--iterations", "run.iterations")
    config_dir: str | None = None

    def __post_init__(self) -> None:
        for what in ("config", "trainer"):
            value = getattr(self, what)
            if isinstance(value, str) and ":" not in value:
                raise ConfigError(f"algorithm {self.name!r}: {what} {value!r} must be 'module:attr' or a class")
        flag, target = self.count_option
        if not flag.startswith("--") or target.count(".") != 1:
            raise ConfigError(f"algorithm {self.name!r}: count_option {self.count_option!r} must be "
                              "('--flag', 'section.field')")

    def load(self) -> tuple[type, type]:
        """(config class, trainer class), importing them when named by "module:attr".

        Raises:
            ConfigError: the config is not a dataclass, or the trainer lacks `Trainer`'s methods.
        """
        config, trainer = _resolve(self.config), _resolve(self.trainer)
        if not (isinstance(config, type) and is_dataclass(config)):
            raise ConfigError(f"algorithm {self.name!r}: its config must be a dataclass, got {config!r}")
        if not (isinstance(trainer, type) and issubclass(trainer, Trainer)):
            raise ConfigError(f"algorithm {self.name!r}: its trainer must be a class with check_data(), "
                              f"check_resources() and train() (the Trainer protocol), got {trainer!r}")
        return config, trainer


def _resolve(target: type | str) -> Any:
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _as_spec(name: str, item: Any) -> AlgorithmSpec:
    if not isinstance(item, AlgorithmSpec):
        raise ConfigError(f"a training algorithm is registered as an AlgorithmSpec; {name!r} got {item!r}")
    if item.name != name:
        raise ConfigError(f"the AlgorithmSpec registered as {name!r} is named {item.name!r}; use one name")
    return item


ALGORITHMS: Registry[AlgorithmSpec] = Registry(
    "training algorithm", group=ENTRY_POINT_GROUP, convert=_as_spec,
    how_to_add="a new algorithm registers with optima_train.algorithms.register_algorithm(), or from another "
               f"package through the entry-point group {ENTRY_POINT_GROUP!r}")

for _spec in (
    AlgorithmSpec("isft", "optima_train.isft:ISFTConfig", "optima_train.isft:ISFTTrainer",
                  summary="Iterative SFT: sample, rank by the Optima reward, keep the best, fine-tune; repeat.",
                  config_dir="configs/isft/"),
    AlgorithmSpec("idpo", "optima_train.idpo:IDPOConfig", "optima_train.idpo:IDPOTrainer",
                  summary="Iterative DPO: MCTS over dialogue turns, best/worst sibling pairs, DPO + NLL; repeat.",
                  config_dir="configs/idpo/"),
    AlgorithmSpec("isft-dpo", "optima_train.isft_dpo:ISFTDPOConfig", "optima_train.isft_dpo:ISFTDPOTrainer",
                  summary="iSFT-DPO: alternate an iSFT stage and an iDPO stage for some cycles.",
                  count_option=("--cycles", "cycles.count"), config_dir="configs/isft_dpo/"),
    AlgorithmSpec("grpo", "optima_train.grpo:GRPOConfig", "optima_train.grpo:GRPOTrainer",
                  summary="Multi-agent GRPO: G dialogues per question, group-normalised Optima reward, clipped "
                          "policy gradient on each agent's own tokens; repeat.",
                  config_dir="configs/grpo/"),
):
    ALGORITHMS.register(_spec.name, _spec)


def register_algorithm(spec: AlgorithmSpec, *, replace: bool = False) -> AlgorithmSpec:
    """Add an algorithm in code (another package can use the entry-point group instead)."""
    return ALGORITHMS.register(spec.name, spec, replace=replace)


def algorithm(name: str) -> AlgorithmSpec:
    """The algorithm named `name` (a built-in, or an installed entry point, imported now).

    Raises:
        ConfigError: no such algorithm (the message lists the registered ones and how to add one).
        PluginError: an installed entry point of that name fails to load.
    """
    return ALGORITHMS.get(name)


def algorithm_names() -> list[str]:
    """Every algorithm name: the built-ins, then installed entry points (none imported)."""
    return ALGORITHMS.names()
