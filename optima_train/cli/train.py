"""`optima train <algorithm>`: the registered training algorithms (`isft`, `idpo`, `isft-dpo`, and
any installed through the entry-point group `optima.algorithms`; see `optima_train.algorithms`).

    optima train isft --config configs/isft/synth_hop.yaml --set train.learning_rate=1e-4
    optima train isft --config configs/isft/synth_hop.yaml --output-dir runs/a --iterations 3
    optima train isft --help-config        # every config field with its type, default and help

Every algorithm gets the same command, built from its `AlgorithmSpec`: `--config`, `--set`,
`--output-dir`, its run-length shortcut (`--iterations`, or `--cycles` for isft-dpo),
`--progress/--no-progress`, `--print-config`, `--help-config` and `--plan`. The same command resumes an
interrupted run (from the last finished step). Config problems and missing data or models are
reported in one message, before any model loads, with exit code 2; `--print-config` checks the
env id and its data the same way before printing.

    optima train isft --config configs/gpu/isft/hotpotqa.yaml --plan --gpu-type a100-80gb

`--plan` checks the config and prints its launch plan (processes, GPUs per role, memory per GPU,
tokens and GPU-hours per iteration; `optima_train.plan`) without loading a model or data;
it exits with 2 when the plan lists problems (a phase that does not fit its GPUs).
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
from optima_train.cli.errors import REFUSED, fail


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
def _plan(config_cls: type, config: Path | None, overrides: list[str], extra: dict[str, Any], command: str,
          gpu_type: str, model_size: str | None, prompt_tokens: int) -> None:
    """Parse the config and print its launch plan; exit 2 on a config error or a listed problem."""
    from optima_train.config.io import load_config
    from optima_train.plan import GPUS, build_report

    if gpu_type not in GPUS:
        fail(f"--gpu-type {gpu_type!r} is not one of {sorted(GPUS)}")
    if prompt_tokens < 1:
        fail(f"--prompt-tokens must be >= 1, got {prompt_tokens}")
    try:
        cfg = load_config(config_cls, config, overrides, extra=extra)
        report = build_report(cfg, command=command, gpu=GPUS[gpu_type], model_size=model_size,
                              prompt_tokens=prompt_tokens)
    except ConfigError as error:
        fail(error)
    print(report.text(), end="")
    if report.problems:
        raise typer.Exit(code=REFUSED)


def _train(config_cls: type, trainer_cls: type, config: Path | None, overrides: list[str],
           extra: dict[str, Any], print_config: bool, help_config: bool) -> None:
    """Parse, check resources, train; a bad config or a missing resource is refused (exit 2)
    before any model loads (`optima_train.cli.errors`)."""
    from optima_train.config.io import dump_config, load_config

    if help_config:
        Console(soft_wrap=True).print(escape(config_help(config_cls)), highlight=False)
        return
    try:
        cfg = load_config(config_cls, config, overrides, extra=extra)
    except ConfigError as error:
        fail(error)
    trainer = trainer_cls(cfg)
    if print_config:  # only a config whose env and data exist is worth printing
        try:
            trainer.check_data()
        except OptimaError as error:
            fail(error)
        print(dump_config(cfg), end="")
        return
    try:  # missing data or models: refused before any model loads
        trainer.check_resources()
    except OptimaError as error:
        fail(error)
    try:
        rows = trainer.train()
    except OptimaError as error:
        fail(error)
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
        plan: bool = typer.Option(False, "--plan", help="Check the config and print its launch plan (processes, "
                                  "GPUs, memory per GPU, tokens and GPU-hours per iteration); loads nothing."),
        gpu_type: str = typer.Option("a100-80gb", "--gpu-type", help="With --plan: the GPU (a100-80gb, a100-40gb, "
                                     "h100-80gb, h200-141gb)."),
        model_size: str | None = typer.Option(None, "--model-size", help="With --plan: size the model as this known "
                                              "model, model folder, or parameter count (8.03e9, 8B)."),
        prompt_tokens: int = typer.Option(1000, "--prompt-tokens", help="With --plan: assumed prompt tokens per "
                                          "agent (system prompt and evidence)."),
    ) -> None:
        try:
            config_cls, trainer_cls = spec.load()
        except (ConfigError, ImportError) as error:
            fail(f"algorithm {spec.name!r} cannot be loaded: {error}")
        extra = _run_extra(output_dir, progress, **{section: {key: count}})
        if plan:
            shown = " ".join([f"optima train {spec.name}", *([f"--config {config}"] if config else []),
                              *(f"--set {o}" for o in overrides)])
            _plan(config_cls, config, overrides, extra, shown, gpu_type, model_size, prompt_tokens)
            return
        _train(config_cls, trainer_cls, config, overrides, extra, print_config, help_config)

    command.__doc__ = spec.summary
    return command


def _broken_command(name: str, error: Exception) -> Callable[..., None]:
    """A command for an installed algorithm that fails to load: it says why, and the others work."""
    def command() -> None:
        fail(str(error))

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
