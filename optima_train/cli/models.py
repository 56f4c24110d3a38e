"""`optima models ...`: pull registry models, list what is cached, export a trained checkpoint as an adapter.

A typer sub-application; the main CLI mounts it with `app.add_typer(models_app, name="models")`.
An unknown name is refused (exit 2), a failed download or check fails (exit 1): `optima_train.cli.errors`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from optima_agents.models.cache import list_models, models_root
from optima_agents.models.pull import pull_model
from optima_agents.models.registry import MODEL_REGISTRY
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
    with reported():
        path = pull_model(name, force=force, progress=True)
    print(path)  # stdout carries only the path, so `$(optima models pull X)` works in scripts


@models_app.command("export")
def export_cmd(
    checkpoint: Path = typer.Argument(..., help="A trained model folder (e.g. runs/.../iter_002/training/checkpoint)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for adapter_config.json and adapter_model.safetensors."),
    base: str = typer.Option("smollm2-135m", "--base", help="The base model it was trained from (registry name or folder)."),
    rank: int = typer.Option(32, "--rank", min=1, help="LoRA rank of the adapter (three rank-16 iterations fit 48 exactly)."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="Storage dtype of the factors: bfloat16, float16 or float32."),
) -> None:
    """Write a trained checkpoint as one LoRA adapter over its base, to ship or share (see
    optima_train.adapter_export: a truncated SVD of the update; the table says how much it keeps)."""
    from optima_agents.models import resolve_model
    from optima_train.adapter_export import export_adapter

    with reported():
        result = export_adapter(checkpoint, resolve_model(base), out, rank=rank, dtype=dtype, base_name=base)
    table = Table(title=f"{checkpoint} as a rank-{rank} adapter over {base}", show_header=False)
    table.add_row("written to", str(result.folder))
    table.add_row("adapted layers", str(result.modules))
    table.add_row("size", f"{result.bytes / 1e6:.1f} MB ({dtype})")
    table.add_row("update kept (min / median)", f"{result.kept_energy_min:.1%} / {result.kept_energy_median:.1%}")
    table.add_row("largest relative error", f"{result.relative_error_max:.3f}")
    Console(file=sys.stdout, soft_wrap=True).print(table)


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
