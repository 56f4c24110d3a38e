"""DPO pairs from searched trees: pure functions over node values.

For every node with two or more children, the best child (highest value) is the chosen reply
and the worst (lowest value) the rejected one, when the best value exceeds
`min_chosen_value` and the gap exceeds `min_gap` (paper section 3.3); with `rejected="hardest"`
the rejected one is instead the best-valued sibling still more than `min_gap` below the chosen
(a hard negative), and with `rejected="all"` every sibling that far below gives its own pair.
Of the qualifying pairs
the `keep_fraction` with the highest chosen values are kept, across the whole batch or per tree.
The prompt of a pair is the dialogue up to its node, seen by the children's speaker; building
it needs the env and a chat template, so it is done by `optima_train.examples.dpo`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from optima_agents.mcts.mcts_config import PairConfig
from optima_agents.mcts.tree import Node, Tree


@dataclass(frozen=True)
class NodePair:
    """A chosen/rejected pair of sibling utterances, traceable to its tree and nodes."""

    tree_id: str
    node_id: int
    chosen_id: int
    rejected_id: int
    speaker: str
    chosen_value: float
    rejected_value: float
    num_children: int

    @property
    def gap(self) -> float:
        return self.chosen_value - self.rejected_value


def best_and_worst(children: Sequence[Node]) -> tuple[Node, Node]:
    """The highest- and lowest-valued of two or more siblings; ties go to the older node for
    the best and the newer for the worst, so the two are always different nodes."""
    if len(children) < 2:
        raise ValueError(f"best_and_worst needs at least two children, got {len(children)}")
    ranked = sorted(children, key=lambda n: (-n.value, n.node_id))
    return ranked[0], ranked[-1]


def rejected_below(best: Node, children: Sequence[Node], min_gap: float) -> list[Node]:
    """The siblings whose value is more than `min_gap` below `best`, highest value first (ties:
    the newer node first)."""
    below = [c for c in children if c.node_id != best.node_id and best.value - c.value > min_gap]
    return sorted(below, key=lambda n: (-n.value, -n.node_id))


def tree_pairs(tree: Tree, config: PairConfig) -> list[NodePair]:
    """The qualifying pairs of one tree, in node order. Skipped nodes take part like any other;
    children no scored rollout reached (left by a dropped rollout) do not."""
    out = []
    for node in tree:
        children = [c for c in tree.children(node.node_id) if c.visits > 0]
        if len(children) < 2:
            continue
        best, worst = best_and_worst(children)
        if best.value <= config.min_chosen_value:
            continue
        if config.rejected == "worst":
            rejected = [worst] if best.value - worst.value > config.min_gap else []
        else:
            rejected = rejected_below(best, children, config.min_gap)
            rejected = rejected[:1] if config.rejected == "hardest" else rejected
        out.extend(NodePair(
            tree_id=tree.tree_id, node_id=node.node_id, chosen_id=best.node_id, rejected_id=r.node_id,
            speaker=best.speaker or "", chosen_value=best.value, rejected_value=r.value,
            num_children=len(children),
        ) for r in rejected)
    return out


def keep_top_fraction(pairs: Sequence[NodePair], fraction: float) -> list[NodePair]:
    """The `floor(fraction * n)` pairs with the highest chosen value (at least one if any),
    in that order; ties keep the input order."""
    if not pairs:
        return []
    count = max(1, math.floor(fraction * len(pairs) + 1e-9))
    order = sorted(range(len(pairs)), key=lambda i: (-pairs[i].chosen_value, i))
    return [pairs[i] for i in order[:count]]


@dataclass(frozen=True)
class PairExtraction:
    """Every qualifying pair and the ones kept for training."""

    qualifying: tuple[NodePair, ...]
    kept: tuple[NodePair, ...]

    def is_kept(self, pair: NodePair) -> bool:
        return pair in set(self.kept)


def extract_pairs(trees: Iterable[Tree], config: PairConfig) -> PairExtraction:
    """Pairs of all `trees`, then the top `keep_fraction` by chosen value (`keep_scope`)."""
    per_tree = [tree_pairs(tree, config) for tree in trees]
    qualifying = [p for pairs in per_tree for p in pairs]
    if config.keep_scope == "tree":
        kept = [p for pairs in per_tree for p in keep_top_fraction(pairs, config.keep_fraction)]
    else:
        kept = keep_top_fraction(qualifying, config.keep_fraction)
    return PairExtraction(qualifying=tuple(qualifying), kept=tuple(kept))
