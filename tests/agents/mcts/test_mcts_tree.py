import pytest

from optima_agents.mcts import MCTSError, Tree, TreeInvariantError

from .builders import add_path


def _tree() -> Tree:
    tree = Tree("t0", next_speaker="alice")
    tree.mark_expanded(0, 0)
    add_path(tree, ["a1", "b1", "a2"], 1.0, components={"score": 1.0})
    add_path(tree, ["a1", "b2"], 0.0, components={"score": 0.0})
    add_path(tree, ["a3"], 0.5, components={"score": 0.5})
    return tree


class TestTree:
    def test_values_are_means_of_backed_up_rewards(self):
        tree = _tree()
        tree.check_invariants()
        a1 = tree.children(0)[0]
        assert (tree.root.visits, tree.root.value) == (3, pytest.approx(0.5))
        assert (a1.visits, a1.value) == (2, pytest.approx(0.5))
        assert a1.components == {"score": pytest.approx(0.5)}
        assert [c.visits for c in tree.children(a1.node_id)] == [1, 1]

    def test_visits_equal_sum_of_children(self):
        tree = _tree()
        for node in tree:
            if node.children:
                assert node.visits == sum(c.visits for c in tree.children(node.node_id))

    def test_path_and_ids(self):
        tree = _tree()
        assert [n.text for n in tree.path(3)] == ["", "a1", "b1", "a2"]
        assert [n.node_id for n in tree] == list(range(len(tree)))
        assert [n.depth for n in tree.path(3)] == [0, 1, 2, 3]

    def test_terminal_node_cannot_grow_or_be_expanded(self):
        tree = _tree()
        leaf = tree.node(3)
        assert leaf.terminal
        with pytest.raises(MCTSError, match="ended the dialogue"):
            tree.add_child(3, speaker="bob", text="more")
        with pytest.raises(MCTSError, match="is terminal"):
            tree.mark_expanded(3, 1)

    def test_node_expanded_once(self):
        tree = _tree()
        with pytest.raises(MCTSError, match="already expanded in iteration 0"):
            tree.mark_expanded(0, 1)

    def test_backup_needs_terminal_leaf(self):
        tree = Tree("t", next_speaker="alice")
        tree.add_child(0, speaker="alice", text="hi")
        with pytest.raises(MCTSError, match="must end at a terminal node"):
            tree.backup(1, 1.0)

    def test_invariant_checker_catches_corruption(self):
        tree = _tree()
        tree.node(1).visits += 1
        with pytest.raises(TreeInvariantError, match="node 1 has 3 visits, rollouts through it: 2"):
            tree.check_invariants()
        tree = _tree()
        tree.node(2).value_sum += 0.5
        with pytest.raises(TreeInvariantError, match="value sum"):
            tree.check_invariants()

    def test_rows_carry_ids_and_values(self):
        tree = _tree()
        rows = tree.node_rows()
        assert rows[1]["tree_id"] == "t0" and rows[1]["children"] == [2, 4]
        assert rows[0]["value"] == pytest.approx(0.5)
        assert [r["path"] for r in tree.rollout_rows()] == [[0, 1, 2, 3], [0, 1, 4], [0, 5]]
        assert tree.stats()["rollouts"] == 3
