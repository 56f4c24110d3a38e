import numpy as np
import pytest

from optima_agents.mcts import MCTSConfig, Tree
from optima_agents.mcts.selection import candidates, edit_ratio, find_similar, rank, select, softmax

from .builders import add_path


def _tree() -> Tree:
    """Root expanded; children a1 (value 1.0, via b1) and 'the cat sat' (0.2) and a terminal 'x' (0.9)."""
    tree = Tree("t", next_speaker="alice")
    tree.mark_expanded(0, 0)
    add_path(tree, ["the cat sat on the mat", "b1", "end"], 1.0)   # ids 1, 2, 3
    add_path(tree, ["the dog ran", "b2", "end"], 0.2)              # ids 4, 5, 6
    add_path(tree, ["x"], 0.9)                                     # id 7, terminal
    return tree


class TestEditRatio:
    def test_normalised_by_longer_text(self):
        assert edit_ratio("abcd", "abcd") == 0.0
        assert edit_ratio("abcd", "abce") == pytest.approx(0.25)
        assert edit_ratio("", "") == 0.0
        assert edit_ratio("ab", "") == 1.0

    def test_find_similar_is_strict_and_zero_disables(self):
        tree = _tree()
        cat = tree.node(1)
        assert find_similar("the cat sat on the mat!", [cat], 0.25) is cat
        assert find_similar("abcd", [tree.add_child(0, speaker="alice", text="abce")], 0.25) is None  # == 0.25
        assert find_similar(cat.text, [cat], 0.0) is None


class TestCandidates:
    def test_terminal_and_expanded_nodes_are_not_candidates(self):
        tree = _tree()
        pool, skipped = candidates(tree, MCTSConfig())
        assert [n.node_id for n in pool] == [1, 2, 4, 5]
        assert skipped == {}

    def test_nodes_like_an_expanded_node_are_skipped_but_kept(self):
        tree = _tree()
        tree.mark_expanded(1, 1)
        twin = add_path(tree, ["the cat sat on the rug", "b3", "end"], 0.7)[0]
        pool, skipped = candidates(tree, MCTSConfig())
        assert twin not in [n.node_id for n in pool]
        assert skipped == {twin: 1}
        assert twin in tree.node(0).children  # still in the tree, so it can be paired
        assert candidates(tree, MCTSConfig(skip_similarity=0.0))[1] == {}

    def test_max_depth_bounds_candidates(self):
        pool, _ = candidates(_tree(), MCTSConfig(max_depth=2))
        assert [n.node_id for n in pool] == [1, 4]


class TestSelect:
    def test_rank_by_value_then_age(self):
        tree = _tree()
        assert [n.node_id for n in rank(tree.nodes[1:7], 3)] == [1, 2, 3]

    def test_softmax_is_stable(self):
        p = softmax([1000.0, 1000.0])
        assert p.tolist() == [0.5, 0.5]
        assert softmax([0.0, np.log(3.0)]).tolist() == pytest.approx([0.25, 0.75])

    def test_draws_among_top_k_by_softmax(self):
        tree = _tree()
        config = MCTSConfig(top_k=2)
        result = select(tree, config, np.random.default_rng(0))
        assert result.top == (1, 2)  # values 1.0, 1.0 beat 0.2, 0.2
        assert result.probabilities == pytest.approx((0.5, 0.5))
        counts = {1: 0, 2: 0}
        rng = np.random.default_rng(1)
        for _ in range(400):
            counts[select(tree, config, rng).node_id] += 1
        assert 150 < counts[1] < 250

    def test_low_temperature_picks_the_best(self):
        tree = _tree()
        tree.mark_expanded(1, 1)
        tree.mark_expanded(2, 2)
        result = select(tree, MCTSConfig(selection_temperature=1e-3), np.random.default_rng(0))
        assert result.node_id == 4 or result.node_id == 5
        assert result.top == (4, 5)

    def test_same_seed_same_choice(self):
        picks = [select(_tree(), MCTSConfig(), np.random.default_rng(7)).node_id for _ in range(3)]
        assert len(set(picks)) == 1

    def test_nothing_to_expand(self):
        tree = Tree("t", next_speaker="alice")
        tree.mark_expanded(0, 0)
        add_path(tree, ["done"], 1.0)
        assert select(tree, MCTSConfig(), np.random.default_rng(0)).node_id is None
