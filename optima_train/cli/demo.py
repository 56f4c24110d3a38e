"""`optima demo`: play a few episodes and show the transcript, per-turn tokens and scores."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

DEFAULT_ENVS = ("synth-hop-ia", "synth-arith-debate")


def demo(
    env_ids: list[str] = typer.Option(list(DEFAULT_ENVS), "--env", help="Env id(s) to play."),
    episodes: int = typer.Option(2, help="Episodes per env."),
    seed: int = typer.Option(0, help="Seed of the first episode."),
) -> None:
    """Play episodes with a scripted oracle (shares its facts, then gives the gold answer)."""
    import optima_envs
    from optima_envs.test import play, share_evidence_then

    console = Console()
    for env_id in env_ids:
        env = optima_envs.make(env_id)
        for episode in range(episodes):
            env.reset(seed=seed + episode)
            instance = env.state.instance
            fmt = "\\boxed{{{}}}" if "boxed" in env.task.answer_format else "<A>{}</A>"
            policies = {a: share_evidence_then(instance.gold_text, fmt) for a in env.possible_agents}
            trace = play(env, policies, seed=seed + episode)
            console.rule(f"{env_id} episode {episode} (scripted oracle)")
            console.print(env.render(), markup=False, highlight=False)
            table = Table("turn", "speaker", "tokens", f"{env.possible_agents[0]} total", "dialogue total")
            for _, _, _, _, infos in trace[1:]:
                info = infos[env.possible_agents[0]]
                table.add_row(str(info["turn"]), info["speaker"], str(info["message_tokens"]),
                              str(info["agent_tokens"]), str(info["total_tokens"]))
            console.print(table)
