"""Scripted players for testing envs (never for product claims: those use real models)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np


def share_evidence_then(answer: str | None, fmt: str = "<A>{}</A>"):
    """A policy that states its evidence on its first turn and then gives `answer` (or talks on
    if None). With the gold answer it is an oracle: both agents agree on the second round."""

    def policy(observation: Mapping[str, Any]) -> str:
        mine = [m for m in observation["transcript"] if m["speaker"] == observation["agent"]]
        if not mine:
            facts = " ".join(observation["evidence"]) or "I have no facts."
            return f"I know: {facts}"
        return fmt.format(answer) if answer is not None else "I have nothing more to add."

    return policy


def random_messages(seed: int, count: int, max_chars: int = 40) -> list[str]:
    """Arbitrary Unicode messages from a private RNG, for replay and fuzz tests."""
    rng = np.random.default_rng(seed)
    alphabet = list("abc <A>/ 12\u00e9\u4e2d\U0001F600\n") + ["<A>x</A>", "\\boxed{3}"]
    return ["".join(rng.choice(alphabet, size=int(rng.integers(0, max_chars)))) for _ in range(count)]


def play(env, policies: Mapping[str, Any], *, seed: int | None = None,
         options: Mapping[str, Any] | None = None) -> list[tuple]:
    """Run one episode with one policy per agent; returns every (obs, rewards, term, trunc, infos)."""
    observations, infos = env.reset(seed=seed, options=options)
    trace: list[tuple] = [(observations, infos)]
    while env.agents:
        speaker = env.current_speaker
        result = env.step({speaker: policies[speaker](observations[speaker])})
        observations = result[0]
        trace.append(result)
    return trace


def scripted(messages: Sequence[str]):
    """A policy for any agent that says `messages` in order, one per call (shared across agents)."""
    queue = list(messages)

    def policy(observation: Mapping[str, Any]) -> str:
        return queue.pop(0) if queue else ""

    return policy
