"""`optima rollout`: play episodes with a model through the batched engine, save them, summarise.

Episode `i` uses reset seed `--seed + i` and instance index `i` (modulo the dataset size), so the
same command plays the same instances. The episodes are appended to `--out` as one new part of
an episode buffer (`optima_train.buffers`). If the run stops early (a backend bug, Ctrl-C), the
episodes finished so far are still written, as a part whose metadata says `incomplete: true`.
The summary's mean score counts only scored episodes: infra failures and scoring errors are
reported separately, never as wrong answers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from optima_agents.policies.registry import backend_help
from optima_envs.errors import OptimaError
from optima_train.cli.errors import fail


def rollout(
    env_id: str = typer.Option(..., "--env", help="Env id, e.g. synth-hop-ia (see `optima envs`)."),
    model: str = typer.Option("smollm2-135m", "--model", help="Registry name, model folder, or hub id / served name."),
    backend: str = typer.Option("hf", "--backend", help=backend_help()),
    episodes: int = typer.Option(8, "--episodes", min=1, help="How many episodes to play."),
    out: Path = typer.Option(..., "--out", help="Episode buffer directory (a new part is appended)."),
    seed: int = typer.Option(0, "--seed", help="Reset seed of the first episode (episode i uses seed+i)."),
    split: str | None = typer.Option(None, "--split", help="Dataset split (task option)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Local dataset folder (task option)."),
    limit: int | None = typer.Option(None, "--limit", help="Use only the first N dataset rows (task option)."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p"),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1),
    num_agents: int | None = typer.Option(None, "--num-agents", help="Agents per dialogue (env default: 2)."),
    max_turns: int | None = typer.Option(None, "--max-turns", help="Turn limit (env default)."),
    base_url: list[str] = typer.Option([], "--base-url", help="OpenAI-compatible server URL (repeatable)."),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Rows per generate call (hf)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Model dtype (hf/vllm), e.g. bfloat16 or float32."),
    threads: int | None = typer.Option(None, "--threads", min=1, help="torch CPU threads while generating (hf)."),
    format_instruction: str | None = typer.Option(
        None, "--format-instruction", help="'sample' (one from the format pool per episode), an index, or text."),
    scheduling: str = typer.Option(
        "auto", "--scheduling", help="How turns reach the backend: lock-step (one batched call per step), continuous "
        "(each episode's next turn as soon as its reply is in; vllm, openai) or auto (continuous where supported)."),
    max_inflight: int | None = typer.Option(
        None, "--max-inflight", min=1, help="Most turn requests outstanding at once, one per live episode "
        "(default: every episode in lock step, 256 in continuous mode)."),
    show: int = typer.Option(0, "--show", min=0, help="Print the transcripts of the first N episodes."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Play episodes with a model through the batched engine and append them to an episode buffer."""
    console = Console(soft_wrap=True)
    try:
        if threads is not None and backend != "hf":
            raise ValueError(f"--threads is only for backend 'hf', not {backend!r}")
        records, stats, part = run_rollout(
            env_id=env_id, model=model, backend=backend, episodes=episodes, out=out, seed=seed,
            task_kwargs=_drop_none(split=split, data_dir=str(data_dir) if data_dir else None, limit=limit),
            env_kwargs=_drop_none(num_agents=num_agents, max_turns=max_turns),
            temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, base_urls=base_url,
            batch_size=batch_size, dtype=dtype, format_instruction=format_instruction, progress=progress,
            policy_kwargs=_drop_none(num_threads=threads), scheduling=scheduling, max_inflight=max_inflight,
        )
    except (OptimaError, ValueError) as error:
        fail(error)
    for record in records[:show]:
        print_transcript(console, record)
    console.print(summary_table(records, stats, title=f"{env_id} with {model} ({backend})"))
    if part is not None:
        console.print(f"Wrote {len(records)} episodes to {part}", highlight=False)


def run_rollout(*, env_id: str, model: str, backend: str, episodes: int, out: Path | None, seed: int = 0,
                task_kwargs: dict[str, Any] | None = None, env_kwargs: dict[str, Any] | None = None,
                temperature: float = 0.0, top_p: float = 1.0, max_new_tokens: int = 128,
                base_urls: Sequence[str] = (), batch_size: int | None = None, dtype: str | None = None,
                format_instruction: str | None = None, progress: bool = True,
                policy_kwargs: dict[str, Any] | None = None, scheduling: str = "auto",
                max_inflight: int | None = None) -> tuple[list, Any, Path | None]:
    """The command without the printing: returns (records, engine stats, written part or None)."""
    import optima_envs
    from optima_agents.policies import SamplingParams, make_policy
    from optima_agents.rollout import EpisodeSpec, RolloutEngine
    from optima_train.buffers import write_episodes

    _check_scheduling(scheduling, max_inflight, backend)  # fail fast, before the model
    env = optima_envs.make(env_id, **{**(task_kwargs or {}), **(env_kwargs or {})})  # fail fast, before the model
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)
    policy = make_policy(backend, model, sampling=sampling, dtype=dtype, batch_size=batch_size, base_urls=base_urls,
                         **(policy_kwargs or {}))
    options: dict[str, Any] = {}
    if format_instruction is not None:
        options["format_instruction"] = int(format_instruction) if format_instruction.isdigit() else format_instruction
    size = len(env.task.source)
    specs = [EpisodeSpec(seed=seed + i, index=i % size, options=options) for i in range(episodes)]
    engine = RolloutEngine(env, policy, progress=progress, scheduling=scheduling, max_inflight=max_inflight)
    metadata = {"command": "rollout", "argv": sys.argv[1:], "env": env_id, "model": model, "backend": backend}
    finished: list = []
    try:
        records = engine.run(specs, on_record=finished.append)
    except BaseException:
        if out is not None and finished:
            write_episodes(out, finished, metadata={**metadata, "incomplete": True})
        raise
    part = None
    if out is not None:
        part = write_episodes(out, records, metadata={
            **metadata, "wall_s": round(engine.last_stats.wall_s, 3),
            "tokens_per_s": round(engine.last_stats.tokens_per_s, 2),
        })
    return records, engine.last_stats, part


def mean_score(records: Sequence[Any]) -> float:
    """Mean score over the scored episodes (an infra failure or a scoring error is not a wrong answer)."""
    scored = [r.score for r in records if r.scored]
    return sum(scored) / len(scored) if scored else float("nan")


def mean_tokens(records: Sequence[Any]) -> float:
    """Mean tokens per episode, over every episode that ran."""
    return sum(r.total_tokens for r in records) / len(records) if records else float("nan")


def summary_table(records: Sequence[Any], stats: Any, *, title: str) -> Table:
    """Mean score (scored episodes only), tokens per episode, speed and failures, as a table."""
    table = Table(title=title, show_header=False)
    rows = [
        ("episodes", str(len(records))),
        ("mean score", f"{mean_score(records):.3f} (over {sum(r.scored for r in records)} scored)"),
        ("mean tokens / episode", f"{mean_tokens(records):.1f}"),
        ("mean turns / episode", f"{sum(r.num_turns for r in records) / max(len(records), 1):.1f}"),
        ("generated tokens / s", f"{stats.tokens_per_s:.1f}"),
        ("wall time", f"{stats.wall_s:.1f} s"),
        ("infra failures", str(sum(r.infra_failure for r in records))),
        ("scoring errors", str(sum(not r.infra_failure and not r.score_ok for r in records))),
        ("servers down at the end", ", ".join(stats.dead_urls) or "none"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    return table


def print_transcript(console: Console, record: Any) -> None:
    """One episode: each turn with its speaker and token cost, then the answer and score."""
    console.rule(f"{record.env_id} seed {record.seed} instance {record.instance_id}")
    console.print(f"[bold]Question:[/bold] {escape(record.question)}   [dim](gold: {escape(str(record.gold))})[/dim]")
    table = Table("turn", "speaker", "tokens", "message", show_lines=True)
    for t in record.turns:
        note = "" if t.finish_reason == "stop" else f" [dim]({t.finish_reason})[/dim]"
        table.add_row(str(t.turn), t.speaker, str(t.num_tokens), escape(t.text) + note)
    console.print(table)
    if record.infra_failure:
        console.print(f"[red]infra failure:[/red] {escape(record.error or '')}")
    else:
        score = "n/a" if record.score is None else f"{record.score:.2f}"
        per_agent = ", ".join(f"{a} {n}" for a, n in record.agent_tokens.items())
        console.print(f"answer {escape(repr(record.final_answer))}  score {score}  end {record.end_reason}  "
                      f"tokens {record.total_tokens} ({per_agent})", highlight=False)


def _check_scheduling(scheduling: str, max_inflight: int | None, backend: str) -> None:
    """--scheduling and --max-inflight, and whether the backend can run continuous, before any model loads.

    Raises:
        ConfigError: an unknown scheduling, a max_inflight below 1, or "continuous" for a backend
            whose policy class declares no `submit` (a backend built by a plain function is
            checked when the engine starts).
    """
    from optima_agents.policies import backend_spec, capabilities_of
    from optima_agents.rollout.scheduling import SCHEDULINGS, check_max_inflight
    from optima_envs.errors import ConfigError

    if scheduling not in SCHEDULINGS:
        raise ConfigError(f"--scheduling must be one of {list(SCHEDULINGS)}, got {scheduling!r}")
    check_max_inflight(max_inflight, field="--max-inflight")
    if scheduling != "continuous":
        return
    factory = backend_spec(backend).resolve()
    if isinstance(factory, type) and not capabilities_of(factory).submit:
        raise ConfigError(f"--scheduling continuous needs a backend that takes requests one at a time (vllm, openai); "
                          f"{backend!r} ({factory.__name__}) batches per call: use --scheduling auto or lock-step")


def _drop_none(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}
