"""The `optima` command line."""

from __future__ import annotations

import typer

from optima_agents.models.cli import models_app
from optima_train.cli import demo as demo_cmd
from optima_train.cli import envs as envs_cmd

app = typer.Typer(help="Optima: train LLM multi-agent systems to be accurate and cheap in tokens.",
                  no_args_is_help=True, add_completion=False)
app.command("demo")(demo_cmd.demo)
app.command("envs")(envs_cmd.envs)
app.add_typer(models_app, name="models", help="Pull and list the embedded models.")


def main() -> None:
    app()
