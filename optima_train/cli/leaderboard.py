"""`optima leaderboard`: the field's baselines and any model or checkpoint, score against tokens.

    optima leaderboard --tasks synth-hop-ia --systems cot,sc,mad,autoform,mas --model smollm2-135m
    optima leaderboard --tasks synth-hop-ia --systems sc,mas-sc --scaling 1,2,4,8
    optima leaderboard --tasks hotpotqa-ia --systems mas --model base=smollm2-135m \\
        --model synth-isft=runs/isft/synth_hop/iter_000/training/checkpoint     # transfer
    optima leaderboard --tasks gsm8k-debate --systems cot --backend openai --base-url http://127.0.0.1:8000/v1 \\
        --model served-name --set gsm8k-debate.split=test
    optima leaderboard --tasks referential-game --systems mas --model trained=runs/.../checkpoint --diagnostics
    optima leaderboard --tasks synth-hop-ia --systems none --external verifiers_run.json   # another stack's run

Every cell is cached under `--out`; an identical second call computes nothing, a killed call
resumes. Writes a markdown table and a PNG per task, one table across tasks and a JSON index.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

import typer
from rich.console import Console
from rich.markup import escape

from optima_agents.policies.registry import backend_help
from optima_envs.assignments import parse_assignment
from optima_envs.errors import ConfigError, OptimaError
from optima_eval.heldout import HELDOUT_SEED
from optima_train.cli.errors import fail


#: Environment variables that change which data a cell plays, so the command that made it names them.
DATA_ENV = ("OPTIMA_DATA_DIR",)


def made_by(argv: list[str], environ: Mapping[str, str]) -> str:
    """The command a board row records: the call's arguments, after the data variables it ran
    with, naming no folder of this machine (`command_line`), so a reader can run it again."""
    from optima_eval.portable_paths import command_line

    args = argv[1:] if argv[:1] == ["leaderboard"] else argv
    return command_line(["optima", "leaderboard", *args], {name: environ.get(name, "") for name in DATA_ENV})


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _task_sets(items: list[str], tasks: list[str]) -> dict[str, dict[str, Any]]:
    """`--set TASK.option=value` as per-task kwargs; a `$OPTIMA_DATA_DIR/...` value (as recorded
    commands write data folders) is read under this machine's data folder."""
    from optima_eval.portable_paths import expand

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, parsed = parse_assignment(item, what="--set", example="gsm8k-debate.split=test")
        task, dot, option = key.rpartition(".")
        if not dot or not task or not option:
            raise ConfigError(f"--set takes TASK.option=value (e.g. gsm8k-debate.split=test), got {item!r}")
        out.setdefault(task, {})[option] = expand(parsed) if isinstance(parsed, str) else parsed
    return out


def leaderboard(
    tasks: str = typer.Option(..., "--tasks", help="Comma-separated env ids."),
    systems: str = typer.Option("cot,sc,mad,autoform,mas", "--systems",
                                help="Comma-separated systems; settings after colons: sc:k=4:temperature=0.5; "
                                "none: run no system (with --external: only put those cells on the board)."),
    model: list[str] = typer.Option(["smollm2-135m"], "--model", help="label=model or model (repeatable)."),
    backend: str = typer.Option("hf", "--backend", help=backend_help()),
    base_url: list[str] = typer.Option([], "--base-url", help="OpenAI-compatible server URL (repeatable)."),
    dtype: str = typer.Option("auto", "--dtype", help="Model dtype (hf/vllm); auto: bf16 where the hardware "
                              "runs it natively, else float32."),
    questions: int = typer.Option(200, "--questions", min=1, help="Held-out questions per task."),
    seed: int = typer.Option(HELDOUT_SEED, "--seed", help="Reset seed of question 0 (question i: seed+i)."),
    first_index: int = typer.Option(0, "--first-index", min=0, help="Index of the first held-out instance."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1, help="Longest reply, in tokens."),
    max_turns: int | None = typer.Option(None, "--max-turns", min=1, help="Dialogue turn limit (task default)."),
    scaling: str = typer.Option("", "--scaling", help="ks for systems with k (sc, mas-sc), e.g. 1,2,4,8."),
    task_set: list[str] = typer.Option([], "--set", help="Env option per task: TASK.option=value (repeatable)."),
    out: Path = typer.Option(Path("benchmarks/results/leaderboard"), "--out", help="Cells and reports folder."),
    chunk: int = typer.Option(50, "--chunk", min=1, help="Questions per resumable chunk."),
    plan: bool = typer.Option(False, "--plan", help="List the cells (cached or to compute) and exit."),
    rescore: bool = typer.Option(False, "--rescore", help="Run no model: score the cached cells' stored answers "
                                 "again with the current metrics (after a metric fix); skip cells not on disk."),
    ablate: str = typer.Option("", "--ablate", help="Message ablations of every mas/autoform cell: swap, remove "
                               "(comma-separated); each is its own cached cell."),
    diagnostics: bool = typer.Option(False, "--diagnostics", help="Whether a score came from talking: both "
                                     "ablations, and the solo system (no-talk ceiling) on tasks with private "
                                     "information; the tables gain no-talk, comm gain and partner-only."),
    external: list[Path] = typer.Option([], "--external", help="A cell made by another stack, as a JSON file "
                                        "(format: docs/extending.md); validated, then put on the board (repeatable)."),
    progress: bool = typer.Option(False, "--progress/--no-progress"),
) -> None:
    """Compare systems x tasks x models: score against tokens per question, cached per cell."""
    from optima_eval.leaderboard import LeaderboardConfig, plan_cells, run_leaderboard, write_reports

    console = Console(soft_wrap=True)
    err = Console(stderr=True, soft_wrap=True)
    task_list = _csv(tasks)
    run_systems = systems.strip().lower() != "none"
    try:
        if not run_systems and not external:
            raise ConfigError("--systems none runs nothing: give --external cell files to put on the board")
        if not run_systems:
            imported = _import(external, out, _task_sets(task_set, task_list))
            paths = write_reports(imported, out, command=made_by(sys.argv[1:], os.environ))
            console.print(f"[bold]cells[/]: {len(imported)} imported; reports in {out} ({len(paths)} files)")
            return
        config = LeaderboardConfig(
            tasks=task_list, systems=_csv(systems), models=model, backend=backend, base_urls=base_url, dtype=dtype,
            questions=questions, seed=seed, first_index=first_index, max_new_tokens=max_new_tokens,
            max_turns=max_turns, env_kwargs=_task_sets(task_set, task_list),
            scaling=[int(k) for k in _csv(scaling)], output_dir=str(out), chunk=chunk, progress=progress,
            rescore=rescore, ablations=_csv(ablate), diagnostics=diagnostics)
        if backend == "auto":  # resolved once per model before any cell, so the cells name what ran
            config.model_specs()
            for name, choice in config.backend_choices.items():
                err.print(f"backend auto for {escape(name)}: {escape(choice.describe())}", highlight=False)
        if plan:
            for cell in plan_cells(config):
                state = "cached" if cell.path(out).exists() else "to compute"
                ablation = f" | ablation {cell.ablation}" if cell.ablation else ""
                console.print(f"{cell.heldout.env_id} | {cell.system.name} {cell.system.settings()} | "
                              f"{cell.model.label} ({cell.model.backend} {cell.model.dtype}){ablation} | {state}",
                              highlight=False)
            return
        imported = _import(external, out, config.env_kwargs)  # a bad file is refused before any model runs
        run = run_leaderboard(config, log=lambda line: err.print(escape(line), highlight=False))
    except (OptimaError, ValueError) as error:
        fail(error)
    if rescore:  # the rows keep the commands that computed them
        paths = write_reports([], out, every_task=True)
        console.print(f"[bold]cells[/]: {len(run.rescored)} of {len(run.cached)} cached re-scored with a changed "
                      f"score, {len(run.skipped)} not on disk; reports in {out} ({len(paths)} files)")
        return
    paths = write_reports([*run.results, *imported], out, command=made_by(sys.argv[1:], os.environ))
    console.print(f"[bold]cells[/]: {len(run.computed)} computed, {len(run.derived)} derived (scaling), "
                  f"{len(run.cached)} cached, {len(imported)} imported; reports in {out} ({len(paths)} files)")


def _import(files: list[Path], out: Path, kwargs: Mapping[str, Mapping[str, Any]]) -> list:
    """The external cell files, validated and stored under the board folder."""
    from optima_eval.leaderboard.external import import_external

    return [import_external(path, out, location_kwargs=kwargs) for path in files]
