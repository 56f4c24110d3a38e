"""The `optima` command line."""

from __future__ import annotations

import typer

from optima_train.cli import demo as demo_cmd
from optima_train.cli import envs as envs_cmd
from optima_train.cli import eval as eval_cmd
from optima_train.cli import leaderboard as leaderboard_cmd
from optima_train.cli import models as models_cmd
from optima_train.cli import rollout as rollout_cmd
from optima_train.cli import serve as serve_cmd
from optima_train.cli import train as train_cmd

app = typer.Typer(help="Optima: train LLM multi-agent systems to be accurate and cheap in tokens.",
                  no_args_is_help=True, add_completion=False)
app.command("demo")(demo_cmd.demo)
app.command("envs")(envs_cmd.envs)
app.command("rollout")(rollout_cmd.rollout)
app.add_typer(models_cmd.models_app, name="models", help="Pull and list the embedded models.")
app.add_typer(train_cmd.app, name="train")
app.command("eval")(eval_cmd.evaluate)
app.command("leaderboard")(leaderboard_cmd.leaderboard)
app.command("serve")(serve_cmd.serve)


def main() -> None:
    app()
