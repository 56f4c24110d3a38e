import pytest

from optima_agents.mcts import PairConfig, Tree
from optima_agents.mcts.pairs import best_and_worst, extract_pairs, keep_top_fraction, tree_pairs

from .builders import add_path


def _tree(tree_id: str = "t", best: float = 1.0) -> Tree:
    """Root has three children (values best, 0.5, 0.0); a1 has two (best, 0.9) - gap too small."""
    tree = Tree(tree_id, next_speaker="alice")
    tree.mark_expanded(0, 0)
    add_path(tree, ["a1", "b1"], best)        # 1 -> 2
    add_path(tree, ["a1", "b2"], 0.9)         # 1 -> 3
    add_path(tree, ["a2"], 0.5)               # 4
    add_path(tree, ["a3"], 0.0)               # 5
    return tree


class TestTreePairs:
    def test_best_vs_worst_child(self):
        pairs = tree_pairs(_tree(), PairConfig(min_chosen_value=0.4, min_gap=0.2))
        assert len(pairs) == 1
        p = pairs[0]
        assert (p.tree_id, p.node_id, p.chosen_id, p.rejected_id, p.speaker) == ("t", 0, 1, 5, "alice")
        assert p.chosen_value == pytest.approx((1.0 + 0.9) / 2) and p.gap == pytest.approx(0.95)
        assert p.num_children == 3

    def test_thresholds_are_strict(self):
        tree = _tree()
        assert len(tree_pairs(tree, PairConfig(min_gap=0.05))) == 2  # a1's pair (gap 0.1) qualifies now
        assert tree_pairs(tree, PairConfig(min_chosen_value=0.95)) == []
        assert tree_pairs(tree, PairConfig(min_gap=0.95)) == []

    def test_ties_give_distinct_nodes(self):
        tree = Tree("t", next_speaker="alice")
        add_path(tree, ["a"], 1.0)
        add_path(tree, ["b"], 1.0)
        best, worst = best_and_worst(tree.children(0))
        assert (best.node_id, worst.node_id) == (1, 2)

    def test_skipped_nodes_are_paired(self):
        tree = _tree()
        tree.node(1).skipped_by = 4
        pairs = tree_pairs(tree, PairConfig(min_gap=0.05))
        assert {p.node_id for p in pairs} == {0, 1}


class TestKeep:
    def test_top_half_by_chosen_value_at_least_one(self):
        trees = [_tree("a", best=1.0), _tree("b", best=0.75), _tree("c", best=0.8)]
        result = extract_pairs(trees, PairConfig())
        assert [p.tree_id for p in result.qualifying] == ["a", "b", "c"]
        assert [p.tree_id for p in result.kept] == ["a"]  # floor(0.5 * 3) = 1
        assert result.is_kept(result.qualifying[0]) and not result.is_kept(result.qualifying[1])
        assert [len(keep_top_fraction(result.qualifying[:n], 0.5)) for n in (0, 1, 2, 3)] == [0, 1, 1, 1]

    def test_per_tree_scope(self):
        trees = [_tree("a", best=1.0), _tree("b", best=0.6)]
        result = extract_pairs(trees, PairConfig(keep_scope="tree"))
        assert [p.tree_id for p in result.kept] == ["a", "b"]


class TestRejectedRule:
    def test_rejects_the_closest_sibling_beyond_the_gap(self):
        tree = _tree()  # root's children: a1 0.95, a2 0.5, a3 0.0
        worst = tree_pairs(tree, PairConfig(min_gap=0.2))[0]
        hardest = tree_pairs(tree, PairConfig(min_gap=0.2, rejected="hardest"))[0]
        assert (worst.chosen_id, worst.rejected_id) == (1, 5)
        assert (hardest.chosen_id, hardest.rejected_id) == (1, 4)
        assert hardest.gap == pytest.approx(0.45)

    def test_falls_back_to_worst_only_when_no_sibling_clears_the_gap(self):
        tree = _tree()
        # a2 (0.5) is 0.45 below a1 and does not clear 0.6; a3 (0.0) does.
        assert tree_pairs(tree, PairConfig(min_gap=0.6, rejected="hardest"))[0].rejected_id == 5
        # a1's own children (1.0, 0.9) are 0.1 apart: no pair under either rule.
        assert [p.node_id for p in tree_pairs(tree, PairConfig(min_gap=0.2, rejected="hardest"))] == [0]

    def test_all_rejects_every_sibling_beyond_the_gap_once(self):
        pairs = tree_pairs(_tree(), PairConfig(min_gap=0.2, rejected="all"))
        assert [(p.node_id, p.chosen_id, p.rejected_id) for p in pairs] == [(0, 1, 4), (0, 1, 5)]
        assert len(set(pairs)) == 2
        kept = extract_pairs([_tree()], PairConfig(min_gap=0.2, rejected="all", keep_fraction=1.0)).kept
        assert [p.rejected_id for p in kept] == [4, 5]
        assert tree_pairs(_tree(), PairConfig(min_gap=0.6, rejected="all"))[0].rejected_id == 5
        assert len(tree_pairs(_tree(), PairConfig(min_gap=0.6, rejected="all"))) == 1

    def test_rule_is_checked(self):
        with pytest.raises(Exception, match="rejected must be 'worst', 'hardest' or 'all'"):
            PairConfig(rejected="easiest")
