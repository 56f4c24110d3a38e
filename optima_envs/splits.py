"""Evidence splits: pure functions that deal an instance's evidence to agents with a given RNG.

Each returns one tuple per agent. None of them touches global random state.
"""

from __future__ import annotations

import numpy as np

from optima_envs.core.types import Evidence, TaskInstance


def deal_supporting_alternately(instance: TaskInstance, num_agents: int,
                                rng: np.random.Generator) -> tuple[tuple[Evidence, ...], ...]:
    """Supporting evidence round-robin from a random first agent (so with at least as many
    supporting pieces as agents, each agent holds one and none holds all); each distractor to
    a random agent; then every agent's pile shuffled, so position says nothing about relevance."""
    piles: list[list[Evidence]] = [[] for _ in range(num_agents)]
    supporting = [e for e in instance.evidence if e.supporting]
    distractors = [e for e in instance.evidence if not e.supporting]
    start = int(rng.integers(num_agents))
    for offset, i in enumerate(rng.permutation(len(supporting))):
        piles[(start + offset) % num_agents].append(supporting[i])
    for piece in distractors:
        piles[int(rng.integers(num_agents))].append(piece)
    return tuple(tuple(pile[j] for j in rng.permutation(len(pile))) for pile in piles)


def deal_shuffled_alternately(instance: TaskInstance, num_agents: int,
                              rng: np.random.Generator) -> tuple[tuple[Evidence, ...], ...]:
    """All evidence shuffled, then dealt round-robin (TriviaQA snippets, CBT sentences)."""
    piles: list[list[Evidence]] = [[] for _ in range(num_agents)]
    for offset, i in enumerate(rng.permutation(len(instance.evidence))):
        piles[offset % num_agents].append(instance.evidence[i])
    return tuple(tuple(pile) for pile in piles)


def deal_contiguous_halves(instance: TaskInstance, num_agents: int,
                           rng: np.random.Generator) -> tuple[tuple[Evidence, ...], ...]:
    """Ordered evidence (a story) cut into contiguous parts, the parts given to agents in a
    random order, so each agent reads a coherent passage but not the whole."""
    evidence = instance.evidence
    bounds = np.linspace(0, len(evidence), num_agents + 1).round().astype(int)
    parts = [tuple(evidence[bounds[k]:bounds[k + 1]]) for k in range(num_agents)]
    return tuple(parts[int(k)] for k in rng.permutation(num_agents))


def no_evidence(instance: TaskInstance, num_agents: int,
                rng: np.random.Generator) -> tuple[tuple[Evidence, ...], ...]:
    """Debate: every agent sees the problem and nothing private."""
    return ((),) * num_agents
