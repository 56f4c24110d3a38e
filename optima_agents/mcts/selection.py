"""Which node a search iteration expands: pure functions of a tree, a config and an RNG.

The rule (paper section 3.3; reference `MonteCarloTreeDeploy.search`): the candidates are the
nodes that can still be expanded (not terminal, not yet expanded) whose text is not within
`skip_similarity` of a node already expanded; the `top_k` of them by value are weighed by a
softmax over their values and one is drawn. Texts are compared by normalised Levenshtein
distance (rapidfuzz): the edit distance divided by the length of the longer text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from rapidfuzz.distance import Levenshtein

from optima_agents.mcts.mcts_config import MCTSConfig
from optima_agents.mcts.tree import Node, Tree


def edit_ratio(a: str, b: str) -> float:
    """Levenshtein distance over the length of the longer text: 0 for equal texts, 1 for disjoint."""
    return Levenshtein.normalized_distance(a, b)


def find_similar(text: str, others: Iterable[Node], threshold: float) -> Node | None:
    """The first node of `others` whose text is strictly within `threshold` of `text`, or None.

    A threshold of 0 never matches (it turns the check off).
    """
    if threshold <= 0:
        return None
    for other in others:
        # score_cutoff lets rapidfuzz stop early once the distance exceeds the threshold
        if Levenshtein.normalized_distance(text, other.text, score_cutoff=threshold) < threshold:
            return other
    return None


@dataclass(frozen=True)
class Selection:
    """What one selection step saw and chose.

    `node_id` is None when no node could be expanded. `skipped` maps each node passed over for
    resembling an expanded node to that node's id. `top` and `probabilities` are the ranked
    candidates the draw was made from.
    """

    node_id: int | None
    candidates: tuple[int, ...] = ()
    top: tuple[int, ...] = ()
    probabilities: tuple[float, ...] = ()
    skipped: dict[int, int] = field(default_factory=dict)


def can_expand(node: Node, max_depth: int | None = None) -> bool:
    """A node can be expanded once, if the dialogue did not end there, it is below `max_depth`,
    and a scored rollout passed through it (nodes left by dropped rollouts have no value)."""
    return (not node.terminal and not node.expanded and (node.visits > 0 or node.is_root)
            and (max_depth is None or node.depth < max_depth))


def candidates(tree: Tree, config: MCTSConfig) -> tuple[list[Node], dict[int, int]]:
    """The nodes selection may draw from, and the skipped ones (node id -> resembled expanded id).

    The root has no text, so it is never compared (nor compared with).
    """
    expanded = [n for n in tree if n.expanded and not n.is_root]
    out: list[Node] = []
    skipped: dict[int, int] = {}
    for node in tree:
        if not can_expand(node, config.max_depth):
            continue
        twin = None if node.is_root else find_similar(node.text, expanded, config.skip_similarity)
        if twin is None:
            out.append(node)
        else:
            skipped[node.node_id] = twin.node_id
    return out, skipped


def rank(nodes: Iterable[Node], k: int) -> list[Node]:
    """The `k` highest-valued nodes, ties broken by the older node (smaller id)."""
    return sorted(nodes, key=lambda n: (-n.value, n.node_id))[:k]


def softmax(values: Iterable[float], temperature: float = 1.0) -> np.ndarray:
    """Softmax of `values / temperature`, computed stably (the maximum is subtracted first)."""
    x = np.asarray(list(values), dtype=np.float64) / temperature
    if x.size == 0:
        return x
    e = np.exp(x - x.max())
    return e / e.sum()


def select(tree: Tree, config: MCTSConfig, rng: np.random.Generator) -> Selection:
    """Draw the node to expand next (see the module docstring). Consumes one draw from `rng`
    when there is at least one candidate, none otherwise."""
    pool, skipped = candidates(tree, config)
    if not pool:
        return Selection(node_id=None, skipped=skipped)
    top = rank(pool, config.top_k)
    probabilities = softmax([n.value for n in top], config.selection_temperature)
    index = int(rng.choice(len(top), p=probabilities))
    return Selection(
        node_id=top[index].node_id, candidates=tuple(n.node_id for n in pool), top=tuple(n.node_id for n in top),
        probabilities=tuple(float(p) for p in probabilities), skipped=skipped,
    )
