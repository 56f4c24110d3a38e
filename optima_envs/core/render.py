"""Readable transcripts for terminals (ANSI colour) and logs (plain text)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optima_envs.core.dialogue_env import DialogueEnv
    from optima_envs.core.state import DialogueState

_COLORS = ("\033[36m", "\033[35m", "\033[33m", "\033[32m", "\033[34m", "\033[31m")
_BOLD, _DIM, _RESET = "\033[1m", "\033[2m", "\033[0m"


def render_transcript(env: "DialogueEnv", state: "DialogueState", *, color: bool) -> str:
    def paint(text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if color else text

    instance = state.instance
    lines = [paint(f"{env.env_id} | instance {instance.instance_id} | turn {state.turn}/{env.max_turns}", _BOLD),
             f"Q: {instance.question}"]
    for i, agent in enumerate(env.possible_agents):
        evidence = "; ".join(e.render() for e in state.evidence[i]) or "(none)"
        lines.append(paint(f"  {agent} ({state.roles[i].name}) knows: {_clip(evidence, 160)}", _DIM))
    for message in state.messages:
        code = _COLORS[env.possible_agents.index(message.speaker) % len(_COLORS)]
        flag = " [truncated]" if message.truncated else ""
        head = paint(f"[{message.speaker}]", code)
        lines.append(f"{head} ({message.num_tokens} tok){flag} {message.text}")
    if state.ended:
        outcome = state.outcome
        score = "failed: " + str(outcome["score_error"]) if not outcome["score_ok"] else f"{outcome['score']:.2f}"
        lines.append(paint(
            f"-- end: {state.end_reason} | answer {outcome['answer']!r} | gold {outcome['gold']!r} "
            f"| score {score} | tokens {state.total_tokens}", _BOLD))
    return "\n".join(lines)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
