"""`optima demo`: the untrained pair and the trained pair on the same held-out games, side by side.

What `bash scripts/demo.sh` runs. The trained pair is a model Optima trained and ships as a LoRA
adapter (`smollm2-135m-referential-listener` by default, `--trained` picks another, see `optima
models list`); it is merged into the embedded base model on first use. Both pairs play the
same held-out `referential-game` games greedily (the task and its options come from the
adapter's provenance, so they are the games it was trained for), through the batched rollout
engine on transformers: each game's two transcripts side by side with per-turn tokens, the
scores, and a closing line that sets the two against each other here and quotes the published
held-out figures the adapter records.

`--oracle` plays the same games with a scripted oracle instead (it shares what it knows, then
gives the gold answer): what a perfect, cheap dialogue looks like, with no model at all.
"""

from __future__ import annotations

from typing import Any, Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from optima_train.cli.rollout import mean_score, mean_tokens

TRAINED = "smollm2-135m-referential-listener"


def demo(
    trained: str = typer.Option(TRAINED, "--trained", help="A registered trained model (an adapter model)."),
    model: str | None = typer.Option(None, "--model", help="The untrained model (default: the trained model's base)."),
    episodes: int = typer.Option(6, "--episodes", min=1, help="Held-out games, the same for both pairs."),
    first_index: int = typer.Option(0, "--first-index", min=0, help="Index of the first held-out game."),
    dtype: str = typer.Option("auto", "--dtype",
                              help="auto (bf16 where the CPU runs it natively, else float32), bfloat16 or float32."),
    threads: int | None = typer.Option(None, "--threads", min=1,
                                       help="torch CPU threads while generating (1 is faster on a busy CPU)."),
    oracle: bool = typer.Option(False, "--oracle", help="Play the games with a scripted oracle instead of models."),
) -> None:
    """Play the same held-out games with the untrained and the trained pair; show both and compare."""
    from optima_agents.models.registry import AdapterSpec, get_model_spec
    from optima_eval.heldout import HeldOut
    from optima_train.cli.errors import fail, reported

    console = Console(soft_wrap=True)
    with reported():
        spec = get_model_spec(trained)
    if not isinstance(spec, AdapterSpec):
        fail(f"--trained {trained!r} is a base model, not a trained one; `optima models list` shows the trained models")
    provenance = spec.provenance()
    task = provenance["task"]
    held = HeldOut.registered(task["env_id"], {**task["env_kwargs"], "max_turns": task["max_turns"]},
                              count=episodes, first_index=first_index)
    if oracle:
        records = _play(held, _oracle_policy(held), console, "scripted oracle")
        _show(console, [("scripted oracle", records)])
        return
    pairs = []
    for name in (model or spec.base, trained):
        pairs.append((name, _play(held, _policy(name, task["max_new_tokens"], dtype, threads, console), console, name)))
    _show(console, pairs)
    console.print(closing_line(pairs[1][1], pairs[0][1], provenance), highlight=False)


def _policy(name: str, max_new_tokens: int, dtype: str, threads: int | None, console: Console) -> Any:
    from optima_agents.policies import HFPolicy, SamplingParams

    console.print(f"Loading {name} (pulled and merged on first use, about a minute)...", highlight=False)
    return HFPolicy(name, sampling=SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens), dtype=dtype,
                    num_threads=threads)


def _play(held: Any, policy: Any, console: Console, label: str) -> list[Any]:
    import optima_envs
    from optima_agents.rollout import RolloutEngine

    console.rule(f"[bold]{held.env_id}[/bold]: {held.count} held-out games with {escape(label)}, all turns batched")
    engine = RolloutEngine(optima_envs.make(held.env_id, **held.env_kwargs), policy, progress=True)
    return engine.run(held.specs())


def _show(console: Console, pairs: Sequence[tuple[str, list[Any]]]) -> None:
    """Each game once, with every pair's transcript in its own column, then one summary row per pair."""
    for i, first in enumerate(pairs[0][1]):
        console.rule(f"game {i + 1}: instance {first.instance_id}")
        console.print(f"[bold]{escape(first.question)}[/bold]   [dim](target: {escape(str(first.gold))})[/dim]")
        table = Table(*(escape(name) for name, _ in pairs), show_lines=True, expand=True)
        table.add_row(*(_transcript(records[i]) for _, records in pairs))
        console.print(table)
    summary = Table("pair", "games", "score", "tokens / game", "answered", title="on these games")
    for name, records in pairs:
        score, tokens = mean_score(records), mean_tokens(records)
        answered = sum(r.final_answer is not None for r in records)
        summary.add_row(escape(name), str(len(records)), f"{score:.2f}", f"{tokens:.0f}", f"{answered}/{len(records)}")
    console.print(summary)


def _transcript(record: Any) -> str:
    lines = [f"[bold]{t.speaker}[/bold] [dim]({t.num_tokens} tok)[/dim]: {escape(t.text)}" for t in record.turns]
    if record.infra_failure:
        lines.append(f"[red]infra failure:[/red] {escape(record.error or '')}")
    else:
        score = "n/a" if record.score is None else f"{record.score:.0f}"
        lines.append(f"pick {escape(repr(record.final_answer))}  score {score}  {record.total_tokens} tokens")
    return "\n".join(lines)


def closing_line(trained: Sequence[Any], untrained: Sequence[Any], provenance: dict[str, Any]) -> str:
    """Both pairs on these games, then the published held-out figures the adapter records."""
    here = (f"trained: {mean_score(trained):.2f} at {mean_tokens(trained):.0f} tokens per game; "
            f"untrained: {mean_score(untrained):.2f} at {mean_tokens(untrained):.0f} ({len(trained)} games here)")
    result = provenance.get("heldout")
    if not result:
        return here
    base = provenance.get("untrained", {})
    return (f"{here}. On {result['episodes']} held-out games ({provenance.get('result_file', 'provenance.json')}): "
            f"trained {result['score']:.3f} [{result['score_ci'][0]:.3f}, {result['score_ci'][1]:.3f}] at "
            f"{result['tokens']:.0f} tokens, untrained {base.get('score', float('nan')):.3f} at "
            f"{base.get('tokens', float('nan')):.0f}; a random pick scores {provenance.get('chance', float('nan')):.2f}.")


def _oracle_policy(held: Any) -> Any:
    """A scripted oracle: states what it knows, then gives the gold answer (looked up by question)."""
    import optima_envs
    from optima_agents.policies import ScriptedPolicy
    from optima_envs.test import share_evidence_then

    gold = {q.instance.question: q.instance.gold_text for q in held.questions()}
    env = optima_envs.make(held.env_id, **held.env_kwargs)
    fmt = "\\boxed{{{}}}" if "boxed" in env.task.answer_format else "<A>{}</A>"
    return ScriptedPolicy(lambda obs: share_evidence_then(gold[obs["question"]], fmt)(obs), name="oracle")
