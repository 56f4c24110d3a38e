"""A search tree over dialogue turns: pure data, no env, no model.

The root is the task (the env right after `reset`); every other node is one utterance: who
said it, its text and token ids, and the env snapshot right after it. A node's value is the
mean reward of the rollouts that passed through it (each reward component is averaged too).
Every leaf is terminal: the dialogue ended there (agreement, the env's turn limit, or the
search's `max_depth`), and terminal nodes are never expanded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from optima_agents.mcts.errors import MCTSError, TreeInvariantError

_TOLERANCE = 1e-9


@dataclass(eq=False)
class Node:
    """One utterance of the tree (or the root, with `speaker None` and empty text).

    `snapshot` is the env after this utterance; `observation` is what the next speaker sees
    then (None at a terminal node), so a rollout resumes from a node without replaying it.
    `skipped_by` names the expanded node whose text this one resembles (so selection passes it
    over); `merges` counts sampled utterances that joined this node instead of making a sibling.
    """

    node_id: int
    parent_id: int | None
    depth: int
    speaker: str | None
    text: str
    token_ids: tuple[int, ...]
    num_tokens: int
    terminal: bool
    end_reason: str | None
    next_speaker: str | None
    created_iteration: int
    snapshot: Any = field(default=None, repr=False)
    observation: Mapping[str, Any] | None = field(default=None, repr=False)
    children: list[int] = field(default_factory=list)
    visits: int = 0
    value_sum: float = 0.0
    component_sums: dict[str, float] = field(default_factory=dict)
    expanded_iteration: int | None = None
    skipped_by: int | None = None
    merges: int = 0

    @property
    def is_root(self) -> bool:
        return self.parent_id is None

    @property
    def expanded(self) -> bool:
        return self.expanded_iteration is not None

    @property
    def value(self) -> float:
        """Mean reward of the rollouts through this node (0.0 before any)."""
        return self.value_sum / self.visits if self.visits else 0.0

    @property
    def components(self) -> dict[str, float]:
        """Mean of each reward component over the rollouts through this node."""
        return {k: v / self.visits for k, v in self.component_sums.items()} if self.visits else {}


@dataclass(frozen=True)
class RolloutRecord:
    """One backed-up rollout: which expansion made it, the node path it took, its reward."""

    rollout_id: int
    iteration: int
    expanded_id: int
    path: tuple[int, ...]
    reward: float
    components: Mapping[str, float]

    @property
    def leaf_id(self) -> int:
        return self.path[-1]


class Tree:
    """The nodes of one search, indexed by id (ids count up from the root, 0, in creation order)."""

    def __init__(self, tree_id: str, *, snapshot: Any = None, observation: Mapping[str, Any] | None = None,
                 next_speaker: str | None = None, meta: Mapping[str, Any] | None = None):
        self.tree_id = tree_id
        self.meta: dict[str, Any] = dict(meta or {})
        self.nodes: list[Node] = [Node(
            node_id=0, parent_id=None, depth=0, speaker=None, text="", token_ids=(), num_tokens=0,
            terminal=False,
            end_reason=None, next_speaker=next_speaker, created_iteration=-1, snapshot=snapshot,
            observation=observation,
        )]
        self.rollouts: list[RolloutRecord] = []
        self.exhausted = False  # set when selection found no candidate before the last iteration

    # ------------------------------------------------------------------ reading
    @property
    def root(self) -> Node:
        return self.nodes[0]

    def node(self, node_id: int) -> Node:
        if not 0 <= node_id < len(self.nodes):
            raise MCTSError(f"tree {self.tree_id!r} has no node {node_id} (it has {len(self.nodes)})")
        return self.nodes[node_id]

    def children(self, node_id: int) -> list[Node]:
        return [self.nodes[i] for i in self.node(node_id).children]

    def path(self, node_id: int) -> list[Node]:
        """The nodes from the root down to `node_id`, both included."""
        out = [self.node(node_id)]
        while out[-1].parent_id is not None:
            out.append(self.nodes[out[-1].parent_id])
        return out[::-1]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    # ------------------------------------------------------------------ growing
    def add_child(self, parent_id: int, *, speaker: str, text: str, token_ids: tuple[int, ...] = (),
                  num_tokens: int | None = None, terminal: bool = False, end_reason: str | None = None,
                  next_speaker: str | None = None, snapshot: Any = None,
                  observation: Mapping[str, Any] | None = None, iteration: int = 0) -> Node:
        """Append one utterance under `parent_id`; raises if the parent ended the dialogue."""
        parent = self.node(parent_id)
        if parent.terminal:
            raise MCTSError(
                f"tree {self.tree_id!r}: node {parent_id} ended the dialogue ({parent.end_reason}); "
                "nothing can follow it"
            )
        child = Node(
            node_id=len(self.nodes), parent_id=parent_id, depth=parent.depth + 1, speaker=speaker, text=text,
            token_ids=tuple(token_ids), num_tokens=len(token_ids) if num_tokens is None else num_tokens,
            terminal=terminal, end_reason=end_reason, next_speaker=None if terminal else next_speaker,
            created_iteration=iteration, snapshot=snapshot, observation=None if terminal else observation,
        )
        self.nodes.append(child)
        parent.children.append(child.node_id)
        return child

    def mark_expanded(self, node_id: int, iteration: int) -> None:
        node = self.node(node_id)
        if node.terminal:
            raise MCTSError(f"tree {self.tree_id!r}: node {node_id} is terminal ({node.end_reason}) and cannot be expanded")
        if node.expanded:
            raise MCTSError(f"tree {self.tree_id!r}: node {node_id} was already expanded in iteration {node.expanded_iteration}")
        node.expanded_iteration = iteration

    def backup(self, leaf_id: int, reward: float, components: Mapping[str, float] | None = None, *,
               iteration: int = 0, expanded_id: int = 0) -> RolloutRecord:
        """Add one rollout's reward to every node from `leaf_id` up to the root."""
        path = tuple(n.node_id for n in self.path(leaf_id))
        if not self.nodes[leaf_id].terminal:
            raise MCTSError(f"tree {self.tree_id!r}: a rollout must end at a terminal node, node {leaf_id} is not")
        components = {k: float(v) for k, v in (components or {}).items()}
        for node_id in path:
            node = self.nodes[node_id]
            node.visits += 1
            node.value_sum += float(reward)
            for key, value in components.items():
                node.component_sums[key] = node.component_sums.get(key, 0.0) + value
        record = RolloutRecord(rollout_id=len(self.rollouts), iteration=iteration, expanded_id=expanded_id,
                               path=path, reward=float(reward), components=components)
        self.rollouts.append(record)
        return record

    # ------------------------------------------------------------------ checking
    def check_invariants(self) -> None:
        """Raise `TreeInvariantError` unless structure, visit counts and values are consistent.

        Checked: ids are positions; depths and child lists agree with parent links; terminal
        nodes have no children and were never expanded; every rollout path runs from the root
        down parent links to a terminal node; each node's visits equal the rollouts through it
        and its value (and each component) is the mean of their rewards; a node's visits equal
        the sum of its children's; a non-terminal leaf (left by a dropped rollout) has no visits.
        """
        visits = [0] * len(self.nodes)
        sums = [0.0] * len(self.nodes)
        component_sums: list[dict[str, float]] = [{} for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            _check(node.node_id == i, f"node at position {i} has id {node.node_id}")
            if node.parent_id is None:
                _check(i == 0 and node.depth == 0, f"node {i} has no parent but is not the root")
            else:
                parent = self.nodes[node.parent_id]
                _check(node.parent_id < i, f"node {i}'s parent {node.parent_id} was created after it")
                _check(node.depth == parent.depth + 1, f"node {i} depth {node.depth}, parent depth {parent.depth}")
                _check(i in parent.children, f"node {i} missing from its parent {parent.node_id}'s children")
            for c in node.children:
                _check(self.nodes[c].parent_id == i, f"node {i} lists child {c} whose parent is {self.nodes[c].parent_id}")
            if node.terminal:
                _check(not node.children, f"terminal node {i} has children {node.children}")
                _check(not node.expanded, f"terminal node {i} was expanded in iteration {node.expanded_iteration}")
            elif not node.children and i != 0:
                _check(node.visits == 0, f"non-terminal leaf {i} has {node.visits} visits (rollouts end at terminal nodes)")
        for r in self.rollouts:
            _check(r.path[0] == 0, f"rollout {r.rollout_id} does not start at the root")
            for a, b in zip(r.path, r.path[1:]):
                _check(self.nodes[b].parent_id == a, f"rollout {r.rollout_id} jumps from {a} to {b}")
            _check(self.nodes[r.leaf_id].terminal, f"rollout {r.rollout_id} ends at non-terminal node {r.leaf_id}")
            _check(r.expanded_id in r.path, f"rollout {r.rollout_id} does not pass its expanded node {r.expanded_id}")
            for node_id in r.path:
                visits[node_id] += 1
                sums[node_id] += r.reward
                for key, value in r.components.items():
                    component_sums[node_id][key] = component_sums[node_id].get(key, 0.0) + value
        for node in self.nodes:
            i = node.node_id
            _check(node.visits == visits[i], f"node {i} has {node.visits} visits, rollouts through it: {visits[i]}")
            _check(abs(node.value_sum - sums[i]) <= _TOLERANCE * max(1, visits[i]),
                   f"node {i} value sum {node.value_sum} != sum of its rollouts' rewards {sums[i]}")
            _check(node.component_sums.keys() == component_sums[i].keys() and all(
                abs(node.component_sums[k] - v) <= _TOLERANCE * max(1, visits[i]) for k, v in component_sums[i].items()),
                f"node {i} component sums {node.component_sums} != its rollouts' {component_sums[i]}")
        for node in self.nodes:
            if node.children:
                below = sum(self.nodes[c].visits for c in node.children)
                _check(node.visits == below, f"node {node.node_id} has {node.visits} visits, its children {below}")

    # ------------------------------------------------------------------ export
    def stats(self) -> dict[str, Any]:
        return {
            "tree_id": self.tree_id,
            "nodes": len(self.nodes),
            "rollouts": len(self.rollouts),
            "expanded": sum(n.expanded for n in self.nodes),
            "terminal": sum(n.terminal for n in self.nodes),
            "max_depth": max(n.depth for n in self.nodes),
            "merges": sum(n.merges for n in self.nodes),
            "skipped": sum(n.skipped_by is not None for n in self.nodes),
            "root_value": self.root.value,
            "exhausted": self.exhausted,
        }

    def node_rows(self) -> list[dict[str, Any]]:
        """One plain row per node (no snapshots), for the run dir's trees table."""
        return [
            {
                "tree_id": self.tree_id, "node_id": n.node_id, "parent_id": n.parent_id, "depth": n.depth,
                "speaker": n.speaker, "text": n.text, "token_ids": list(n.token_ids), "num_tokens": n.num_tokens,
                "terminal": n.terminal, "end_reason": n.end_reason, "children": list(n.children),
                "visits": n.visits, "value": n.value, "components": n.components,
                "created_iteration": n.created_iteration, "expanded_iteration": n.expanded_iteration,
                "skipped_by": n.skipped_by, "merges": n.merges,
            }
            for n in self.nodes
        ]

    def rollout_rows(self) -> list[dict[str, Any]]:
        return [
            {"tree_id": self.tree_id, "rollout_id": r.rollout_id, "iteration": r.iteration,
             "expanded_id": r.expanded_id, "leaf_id": r.leaf_id, "path": list(r.path), "reward": r.reward,
             "components": dict(r.components)}
            for r in self.rollouts
        ]


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise TreeInvariantError(message)
