"""`optima train <algorithm>`: the registered training algorithms (`isft`, `idpo`, `isft-dpo`, and
any installed through the entry-point group `optima.algorithms`; see `optima_train.algorithms`).

    optima train isft --config configs/isft/synth_hop.yaml --set train.learning_rate=1e-4
    optima train isft --config configs/isft/synth_hop.yaml --output-dir runs/a --iterations 3
    optima train isft --help-config        # every config field with its type, default and help

Every algorithm gets the same command, built from its `AlgorithmSpec`: `--config`, `--set`,
`--output-dir`, its run-length shortcut (`--iterations`, or `--cycles` for isft-dpo),
`--progress/--no-progress`, `--print-config` and `--help-config`. The same command resumes an
interrupted run (from the last finished step). Config problems and missing data or models are
reported in one message, before any model loads, with exit code 2; `--print-config` checks the
env id and its data the same way before printing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, get_type_hints

import typer
from rich.console import Console
from rich.markup import escape

from optima_envs.errors import ConfigError, OptimaError
from optima_train.algorithms import AlgorithmSpec, algorithm, algorithm_names


def _fail(message: str, code: int = 2) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(code=code)


def config_help(cls: type) -> str:
    """Every field of a (nested) config dataclass: dotted name, type, default, help."""
    lines: list[str] = []

    def walk(c: type, prefix: str) -> None:
        hints = get_type_hints(c)
        for f in dataclasses.fields(c):
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp):
                lines.append(f"\n[{prefix}{f.name}]")
                walk(tp, f"{prefix}{f.name}.")
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            name = str(tp).replace("typing.", "") if not isinstance(tp, type) else tp.__name__
            choices = f.metadata.get("choices")
            extra = f" (one of {choices})" if choices else ""
            lines.append(f"  {prefix}{f.name}: {name} = {default!r}{extra}\n      {f.metadata.get('help', '')}")

    walk(cls, "")
    return "\n".join(lines).strip()


# ---------------------------------------------------------------------- shared steps
def _train(config_cls: type, trainer_cls: type, config: Path | None, overrides: list[str],
           extra: dict[str, Any], print_config: bool, help_config: bool) -> None:
    """Parse, check resources, train. Exit codes: 2 for a bad config or a missing resource, 1 for a
    failure during training."""
    from optima_train.config_io import dump_config, load_config

    if help_config:
        Console(soft_wrap=True).print(escape(config_help(config_cls)), highlight=False)
        return
    try:
        cfg = load_config(config_cls, config, overrides, extra=extra)
    except ConfigError as error:
        _fail(str(error))
    trainer = trainer_cls(cfg)
    if print_config:  # only a config whose env and data exist is worth printing
        try:
            trainer.check_data()
        except (ConfigError, OptimaError) as error:
            _fail(str(error))
        print(dump_config(cfg), end="")
        return
    try:  # missing data or models: exit 2, before any model loads
        trainer.check_resources()
    except (ConfigError, OptimaError) as error:
        _fail(str(error))
    try:
        rows = trainer.train()
    except (ConfigError, OptimaError) as error:
        _fail(str(error), code=1)
    Console(soft_wrap=True).print(f"[bold]done[/]: {len(rows)} iteration(s) in {cfg.run.output_dir} "
                                  f"(summary.json, tensorboard/)")


def _run_extra(output_dir: str | None, progress: bool | None, **more: Any) -> dict[str, Any]:
    run = {k: v for k, v in {"output_dir": output_dir, "progress": progress}.items() if v is not None}
    out: dict[str, Any] = {"run": run} if run else {}
    for section, values in more.items():
        values = {k: v for k, v in values.items() if v is not None}
        if values:
            out.setdefault(section, {}).update(values)
    return out


# ---------------------------------------------------------------------- commands
def algorithm_command(spec: AlgorithmSpec) -> Callable[..., None]:
    """The `optima train <spec.name>` command: the same options for every algorithm."""
    flag, target = spec.count_option
    section, key = target.split(".")
    where = f" (see {spec.config_dir})" if spec.config_dir else ""

    def command(
        config: Path | None = typer.Option(None, "--config", "-c", help=f"YAML config{where}."),
        overrides: list[str] = typer.Option([], "--set", "-s",
                                            help="Override a field: section.field=value (repeatable)."),
        output_dir: str | None = typer.Option(None, "--output-dir", help="Shortcut for --set run.output_dir=DIR."),
        count: int | None = typer.Option(None, flag, help=f"Shortcut for --set {target}=N."),
        progress: bool | None = typer.Option(None, "--progress/--no-progress", help="Progress bars (run.progress)."),
        print_config: bool = typer.Option(False, "--print-config", help="Print the resolved config and exit."),
        help_config: bool = typer.Option(False, "--help-config", help="List every config field and exit."),
    ) -> None:
        try:
            config_cls, trainer_cls = spec.load()
        except (ConfigError, ImportError) as error:
            _fail(f"algorithm {spec.name!r} cannot be loaded: {error}")
        extra = _run_extra(output_dir, progress, **{section: {key: count}})
        _train(config_cls, trainer_cls, config, overrides, extra, print_config, help_config)

    command.__doc__ = spec.summary
    return command


def _broken_command(name: str, error: Exception) -> Callable[..., None]:
    """A command for an installed algorithm that fails to load: it says why, and the others work."""
    def command() -> None:
        _fail(str(error))

    command.__doc__ = f"(cannot be loaded: {error})"
    return command


def build_app() -> typer.Typer:
    """A `train` command group with one command per registered algorithm (read now)."""
    group = typer.Typer(help="Train agents with a registered algorithm: iSFT, iDPO (MCTS + DPO), iSFT-DPO, or one "
                             "installed through the entry-point group optima.algorithms.",
                        no_args_is_help=True, add_completion=False)
    for name in algorithm_names():
        try:
            command = algorithm_command(algorithm(name))
        except ConfigError as error:
            group.command(name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})(
                _broken_command(name, error))
            continue
        group.command(name)(command)
    return group


app = build_app()
