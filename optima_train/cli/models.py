"""`optima models ...`: pull registry models and list what is cached.

A typer sub-application; the main CLI mounts it with `app.add_typer(models_app, name="models")`.
An unknown name is refused (exit 2), a failed download or check fails (exit 1): `optima_train.cli.errors`.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.table import Table

from optima_agents.models.cache import list_models, models_root
from optima_agents.models.pull import pull_model
from optima_agents.models.registry import MODEL_REGISTRY
from optima_envs.errors import OptimaError
from optima_train.cli.errors import reported

__all__ = ["models_app"]

models_app = typer.Typer(
    name="models",
    help="Pull the models Optima can fetch without the Hugging Face hub, and list cached ones.",
    no_args_is_help=True,
)


@models_app.command("pull")
def pull_cmd(
    name: str = typer.Argument(..., help="Registry name, e.g. smollm2-135m (see `optima models list`)."),
    force: bool = typer.Option(False, "--force", help="Download and convert again even if a verified copy exists."),
) -> None:
    """Download, convert and verify a registry model into $OPTIMA_HOME/models/NAME."""
    with reported(OptimaError):
        path = pull_model(name, force=force, progress=True)
    print(path)  # stdout carries only the path, so `$(optima models pull X)` works in scripts


@models_app.command("list")
def list_cmd() -> None:
    """Show cached models (size, verified, path) and registry models not pulled yet."""
    cached = list_models()
    table = Table(title=f"Models in {models_root()}")
    for column in ("name", "size", "verified", "path"):
        table.add_column(column, overflow="fold")
    for model in cached:
        table.add_row(
            model.name,
            f"{model.size / 1e6:.0f} MB",
            "yes" if model.verified else "[red]no[/red] (pull again)",
            str(model.path),
        )
    console = Console(file=sys.stdout)
    console.print(table)
    have = {m.name for m in cached if m.verified}
    missing = [f"{s.name} ({s.description})" for s in MODEL_REGISTRY.values() if s.name not in have]
    if missing:
        console.print("Not pulled yet (`optima models pull NAME`): " + "; ".join(missing), highlight=False)
