"""Hand-built trees for the MCTS tests: no env, no model."""

from __future__ import annotations

from typing import Sequence

from optima_agents.mcts.tree import Tree

SPEAKERS = ("alice", "bob")


def add_path(tree: Tree, texts: Sequence[str], reward: float | None = None, *, parent: int = 0,
             iteration: int = 0, components: dict[str, float] | None = None) -> list[int]:
    """Walk/extend the tree along `texts` from `parent` (reusing children with the same text);
    the last node is terminal. With a reward, back it up. Returns the new path's node ids."""
    ids = []
    node_id = parent
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        existing = [c for c in tree.children(node_id) if c.text == text]
        if existing:
            node_id = existing[0].node_id
        else:
            depth = tree.node(node_id).depth
            node_id = tree.add_child(
                node_id, speaker=SPEAKERS[depth % 2], text=text, token_ids=tuple(range(len(text.split()))),
                terminal=last, end_reason="agreed" if last else None, next_speaker=SPEAKERS[(depth + 1) % 2],
                iteration=iteration,
            ).node_id
        ids.append(node_id)
    if reward is not None:
        tree.backup(node_id, reward, components, iteration=iteration, expanded_id=parent)
    return ids
