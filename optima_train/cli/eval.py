"""`optima eval`: evaluate any model or checkpoint on a task's held-out split.

    optima eval --model runs/isft/iter_001/training/checkpoint --env synth-hop-ia --episodes 200
    optima eval --model smollm2-135m --env synth-hop-ia --format-instruction concise
    optima eval --model runs/.../checkpoint --env referential-game --diagnostics   # did the gain come from talking?

Greedy dialogues; writes a JSON with the mean score and mean tokens per dialogue, each with a
95% bootstrap interval (see `optima_eval.evaluation`), plus the per-episode buffer beside it.
With `--diagnostics` it also plays the same questions with each agent answering alone (the
no-talk ceiling) and with the partners' messages swapped for another question's or removed
(`comm_gain`, paired 95% interval), and splits the score by where each answer lies
(`optima_eval.leaderboard.diagnostics`). Exits 1, after writing both, when no episode could be scored (every one an infra failure or a
scoring error): a run that measured nothing must not look like a success.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from optima_agents.policies.registry import backend_help
from optima_envs.assignments import parse_assignment
from optima_envs.errors import ConfigError, OptimaError
from optima_eval.heldout import HELDOUT_SEED
from optima_train.cli.errors import FAILED, fail, reported


def evaluate(
    model: str = typer.Option(..., "--model", help="Registry name, model folder (e.g. a checkpoint) or hub id."),
    env_id: str = typer.Option(..., "--env", help="Env id (see `optima envs`)."),
    episodes: int = typer.Option(200, "--episodes", min=1, help="Held-out dialogues."),
    split: str | None = typer.Option("validation", "--split", help="Task split option ('' to leave it unset)."),
    env_kwarg: list[str] = typer.Option([], "--env-kwarg", help="Extra env option key=value (repeatable)."),
    first_index: int = typer.Option(0, "--first-index", min=0, help="Index of the first held-out instance."),
    seed: int = typer.Option(HELDOUT_SEED, "--seed", help="Reset seed of episode 0 (episode i: seed+i); the "
                                                         "default matches `optima train isft`'s evaluations."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1),
    max_turns: int | None = typer.Option(None, "--max-turns", help="Turn limit (task default: 10)."),
    backend: str = typer.Option("hf", "--backend", help=backend_help()),
    base_url: list[str] = typer.Option([], "--base-url", help="OpenAI-compatible server URL (repeatable)."),
    dtype: str = typer.Option("auto", "--dtype", help="Model dtype (hf/vllm); auto: bf16 where the hardware runs it "
                              "natively, else float32."),
    format_instruction: str | None = typer.Option(
        None, "--format-instruction", help="'concise' (CONCISE_INSTRUCTION), a format-pool index, or text."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Result JSON (default runs/eval/<env>-<split>-<model>.json)."),
    diagnostics: bool = typer.Option(False, "--diagnostics", help="Also measure whether the score came from "
                                     "talking: no-talk ceiling, message ablations (comm gain), score by answer place."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Evaluate a model greedily on held-out dialogues: score and tokens with 95% intervals."""
    from optima_agents.policies import SamplingParams
    from optima_envs.atomic_files import atomic_write_json
    from optima_envs.prompts.format_pool import CONCISE_INSTRUCTION
    from optima_eval.evaluation import build_policy
    from optima_eval.evaluation import evaluate as run_eval
    from optima_eval.portable_paths import portable_json
    from optima_train.buffers import write_episodes

    env_kwargs: dict[str, Any] = {}
    if split:
        env_kwargs["split"] = split
    for item in env_kwarg:
        with reported():
            key, value = parse_assignment(item, what="--env-kwarg", example="split=validation")
        env_kwargs[key] = value
    if max_turns is not None:
        env_kwargs["max_turns"] = max_turns
    options: dict[str, Any] = {}
    if format_instruction is not None:
        options["format_instruction"] = (CONCISE_INSTRUCTION if format_instruction == "concise"
                                         else int(format_instruction) if format_instruction.isdigit() else format_instruction)
    try:
        import optima_envs

        optima_envs.make(env_id, **env_kwargs).reset(seed=0, options={"index": first_index})  # fail fast
        from optima_agents.models.dtypes import resolve_dtype_here

        kwargs = {"base_urls": list(base_url)} if base_url else {}
        run_dtype = resolve_dtype_here(dtype)
        choice = None
        if backend == "auto":  # resolved here, so the result names the backend and weights that ran
            from optima_agents.policies.auto import resolve_backend

            if base_url:
                raise ConfigError("--base-url is for a server backend (openai); backend 'auto' chooses a local one")
            choice = resolve_backend(model, dtype=run_dtype)
            Console(stderr=True, soft_wrap=True).print(f"backend auto: {choice.describe()}", highlight=False)
            kwargs = choice.backend_kwargs
        policy = build_policy(choice.backend if choice else backend, model,
                              SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, seed=None),
                              dtype=run_dtype, backend_kwargs=kwargs)
        result, records = run_eval(policy, env_id, env_kwargs=env_kwargs, episodes=episodes, first_index=first_index,
                                   seed=seed, options=options, progress=progress, model_name=model)
        found = None
        if diagnostics:
            from optima_eval.leaderboard.diagnostics import diagnose

            found = diagnose(env_id, env_kwargs, policy, records, seed=seed, first_index=first_index,
                             max_new_tokens=max_new_tokens, format_instruction=options.get("format_instruction"),
                             progress=progress)
    except (OptimaError, ValueError) as error:
        fail(error)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.strip("/").replace("/", "_"))[-80:]
    output = output or Path("runs") / "eval" / f"{env_id}-{split or 'default'}-{slug}.json"
    data = {**result.to_dict(), "options": options, "first_index": first_index, "seed": seed,
            **_ran_on(policy.identity(), backend)}
    if choice is not None:
        data["backend_choice"] = choice.to_dict()
    if found is not None:
        data["diagnostics"] = found
    atomic_write_json(output, portable_json(data))  # a result names no folder of this machine
    write_episodes(output.with_suffix(""), records, metadata={"command": "eval", "model": model})
    table = Table(title=f"{env_id} ({split or 'default'}) with {model}", show_header=False)
    table.add_row("backend", f"{data['backend']} ({data['dtype']})")
    table.add_row("episodes", str(result.episodes))
    table.add_row("score (95% CI)", f"{result.score}  (n={result.score.n})")
    table.add_row("tokens / dialogue (95% CI)", f"{result.tokens.mean:.1f} [{result.tokens.low:.1f}, {result.tokens.high:.1f}]")
    table.add_row("excluded", ", ".join(f"{k} {v}" for k, v in result.excluded.items()))
    if found is not None:
        for name, value in _diagnostic_rows(found):
            table.add_row(name, value)
    table.add_row("written to", str(output))
    Console(soft_wrap=True).print(table)
    if result.score.n == 0:
        fail(_nothing_scored(records), code=FAILED)


def _ran_on(identity: dict[str, Any], backend: str) -> dict[str, Any]:
    """What a result records about where it ran: the backend, and the dtype or, for llama.cpp,
    the GGUF weight type (`dtype` in the policy's identity), as the policy reports them."""
    return {"backend": identity.get("backend", backend), "dtype": identity.get("dtype")}


def _diagnostic_rows(found: dict[str, Any]) -> list[tuple[str, str]]:
    """The diagnostics as table rows."""
    from optima_eval.evaluation import Interval

    rows = [("no-talk ceiling (solo)", str(Interval(**found["no_talk"])))]
    for mode, gain in found["comm_gain"].items():
        rows.append((f"comm gain, {mode} [95% CI]", f"{Interval(**gain)}  (ablated score "
                     f"{Interval(**found['score_ablated'][mode]).mean:.3f})"))
    for place, part in (found["places"] or {}).items():
        if part["n"]:
            rows.append((f"score where the answer is {place}", f"{Interval(**part)}  (n={part['n']})"))
    told = found.get("told")
    if told:
        rows.append(("partner told what was needed (partner-only questions)", str(Interval(**told["told"]))))
        for part in ("told", "not_told"):
            if told[f"score_{part}"]["n"]:
                rows.append((f"score when {part.replace('_', ' ')}",
                             f"{Interval(**told[f'score_{part}'])}  (n={told[f'score_{part}']['n']})"))
    return rows


def _nothing_scored(records: list[Any]) -> str:
    """Why an evaluation has no score: how many episodes failed how, and the first error."""
    infra = [r for r in records if r.infra_failure]
    scoring = [r for r in records if not r.infra_failure and not r.scored]
    first = (infra or scoring or [None])[0]
    why = "" if first is None else f"; the first: {first.error if first.infra_failure else first.score_error}"
    return (f"no episode was scored ({len(infra)} of {len(records)} were infra failures, {len(scoring)} had "
            f"scoring errors){why}. Check that the model or server answers (e.g. optima rollout --show 1), "
            f"then run again")
