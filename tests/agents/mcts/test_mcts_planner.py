import numpy as np
import pytest

import optima_envs
from optima_agents.mcts import MCTSConfig, MCTSPlanner, PairConfig, TreeTask, extract_pairs
from optima_agents.mcts.errors import EnvNotSearchableError
from optima_agents.mcts.reward import score_only_reward

from optima_agents.testing import SeededChoice, TurnScript, first_utterance_reward

GOOD, BAD1, BAD2 = "I say <A>good</A>", "I say <A>bad one</A>", "I say <A>bad two</A>"
VALUES = {GOOD: 1.0, BAD1: 0.0, BAD2: 0.25}


def _env():
    return optima_envs.make("synth-hop-ia")


def _search(policy, config, tasks=(TreeTask("q0", seed=0),), reward=None):
    planner = MCTSPlanner(policy, reward or first_utterance_reward(VALUES), config)
    return planner.search(_env(), list(tasks))


class TestExpansion:
    def test_root_then_best_child_is_expanded(self):
        # turn 0: three different openers; turn 1: Bob agrees with Alice (same answer) -> the dialogue ends
        policy = TurnScript({0: [GOOD, BAD1, BAD2], 1: ["<A>good</A>", "<A>bad one</A>", "<A>bad two</A>"]})
        config = MCTSConfig(iterations=2, selection_temperature=1e-3, seed=0)
        result = _search(policy, config)
        tree = result.trees[0]
        tree.check_invariants()
        openers = tree.children(0)
        assert [n.text for n in openers] == [GOOD, BAD1, BAD2]
        assert [n.value for n in openers] == [1.0, 0.0, 0.25]
        assert tree.root.expanded_iteration == 0
        # iteration 1: the softmax at temperature 1e-3 picks the best opener
        assert openers[0].expanded_iteration == 1
        assert [n.expanded for n in openers[1:]] == [False, False]
        # its three rollouts: Bob's replies cycle, only "<A>good</A>" ends the dialogue at once
        assert openers[0].visits == 4 and openers[0].value == 1.0
        assert tree.root.visits == 6
        assert result.stats["rollouts"] == 6 and result.stats["iterations"] == 2

    def test_terminal_nodes_are_never_expanded(self):
        policy = TurnScript({0: [GOOD, BAD1, BAD2], 1: ["<A>good</A>", "<A>bad one</A>", "<A>bad two</A>"]})
        result = _search(policy, MCTSConfig(iterations=6, seed=3))
        tree = result.trees[0]
        tree.check_invariants()
        assert all(not (n.terminal and n.expanded) for n in tree)
        assert sum(n.expanded for n in tree) == result.stats["iterations"]

    def test_pairs_from_a_search(self):
        policy = TurnScript({0: [GOOD, BAD1, BAD2], 1: ["<A>good</A>", "<A>bad one</A>", "<A>bad two</A>"]})
        tree = _search(policy, MCTSConfig(iterations=1)).trees[0]
        pairs = extract_pairs([tree], PairConfig()).kept
        assert [(p.node_id, p.chosen_id, p.rejected_id, p.speaker) for p in pairs] == [(0, 1, 2, "alice")]
        assert pairs[0].gap == 1.0

    def test_similar_utterances_merge_into_one_child(self):
        policy = TurnScript({0: [GOOD, GOOD + ".", GOOD + "!"], 1: ["<A>good</A>"]})
        tree = _search(policy, MCTSConfig(iterations=1)).trees[0]
        tree.check_invariants()
        assert [n.text for n in tree.children(0)] == [GOOD]
        assert tree.children(0)[0].merges == 2 and tree.children(0)[0].visits == 3
        # and with merging off they stay apart
        policy = TurnScript({0: [GOOD, GOOD + ".", GOOD + "!"], 1: ["<A>good</A>"]})
        tree = _search(policy, MCTSConfig(iterations=1, merge_similarity=0.0)).trees[0]
        assert len(tree.children(0)) == 3

    def test_max_depth_cuts_dialogues_and_exhausts_the_tree(self):
        policy = TurnScript({0: [GOOD, BAD1, BAD2]})
        result = _search(policy, MCTSConfig(iterations=3, max_depth=1))
        tree = result.trees[0]
        assert [n.end_reason for n in tree.children(0)] == ["max_depth"] * 3
        assert tree.exhausted and result.stats["iterations"] == 1


class TestTokenCosts:
    def test_a_policy_without_token_ids_still_pays_for_its_tokens(self):
        # An OpenAI-compatible server that returns no ids: the env counts each message's tokens,
        # so every node and every rolled-out dialogue costs more than 0 tokens.
        policy = TurnScript({0: [GOOD, BAD1, BAD2], 1: ["<A>good</A>", "<A>bad one</A>", "<A>bad two</A>"]},
                            with_ids=False)
        seen = []

        def reward(dialogues):
            seen.extend(d.tokens for d in dialogues)
            return first_utterance_reward(VALUES)(dialogues)

        tree = _search(policy, MCTSConfig(iterations=2), reward=reward).trees[0]
        expected = optima_envs.make("synth-hop-ia")._count_tokens
        for node in list(tree)[1:]:
            assert node.token_ids == ()
            assert node.num_tokens == expected(node.text) > 0
        assert seen and min(seen) > 0

    def test_reported_ids_are_the_token_cost(self):
        policy = TurnScript({0: [GOOD, BAD1, BAD2], 1: ["<A>good</A>"]})
        tree = _search(policy, MCTSConfig(iterations=1)).trees[0]
        assert [n.num_tokens for n in tree.children(0)] == [len(t.split()) for t in (GOOD, BAD1, BAD2)]


class TestBatchingAndDeterminism:
    def test_one_call_carries_every_tree_and_rollout(self):
        policy = TurnScript({0: [GOOD, BAD1, BAD2], 1: ["<A>good</A>", "<A>bad one</A>", "<A>bad two</A>"]})
        tasks = [TreeTask(f"q{i}", seed=i) for i in range(4)]
        _search(policy, MCTSConfig(iterations=1), tasks)
        assert policy.calls[0] == 4 * 3

    def test_same_seed_same_trees_regardless_of_other_trees(self):
        options = [GOOD, BAD1, BAD2, "<A>good</A>", "hmm", "<A>bad one</A>"]
        config = MCTSConfig(iterations=4, seed=11)
        alone = _search(SeededChoice(options), config, [TreeTask("q0", seed=0)]).trees[0]
        again = _search(SeededChoice(options), config, [TreeTask("q0", seed=0)]).trees[0]
        batched = _search(SeededChoice(options), config, [TreeTask("q0", seed=0), TreeTask("q1", seed=1)]).trees[0]
        assert alone.node_rows() == again.node_rows() == batched.node_rows()
        other = _search(SeededChoice(options), MCTSConfig(iterations=4, seed=12), [TreeTask("q0", seed=0)]).trees[0]
        assert other.node_rows() != alone.node_rows()
        for tree in (alone, batched):
            tree.check_invariants()

    def test_snapshots_match_paths(self):
        options = [GOOD, BAD1, "<A>good</A>", "hmm", "hmm!"]
        tree = _search(SeededChoice(options), MCTSConfig(iterations=5, seed=2)).trees[0]
        for node in tree:
            texts = [m.text for m in node.snapshot.state.messages]
            assert texts == [n.text for n in tree.path(node.node_id)[1:]]


class TestFailures:
    def test_failed_turns_drop_their_rollout(self):
        policy = TurnScript({0: [GOOD, BAD1, BAD2], 1: ["hmm", "<A>bad one</A>", "<A>bad two</A>"],
                             2: ["<A>good</A>"]}, fail={(2, 0)})
        result = _search(policy, MCTSConfig(iterations=1))
        tree = result.trees[0]
        tree.check_invariants()
        assert result.stats["dropped_rollouts"] == 1 and result.stats["rollouts"] == 2
        good = tree.children(0)[0]
        assert good.visits == 0 and not good.expanded
        pairs = extract_pairs([tree], PairConfig(min_chosen_value=0.0, min_gap=0.0)).qualifying
        assert [(p.chosen_id, p.rejected_id) for p in pairs] == [(3, 2)]  # the unscored opener (node 1) is left out

    def test_env_without_snapshots_is_refused(self):
        with pytest.raises(EnvNotSearchableError, match="lacks"):
            MCTSPlanner(TurnScript({}), score_only_reward).search(object(), [TreeTask("q")])


class TestEnvScore:
    def test_score_only_reward_uses_the_env_score(self):
        env = _env()
        env.reset(seed=0)
        gold = env.state.instance.gold_text
        policy = TurnScript({0: [f"<A>{gold}</A>", "<A>nowhere</A>", "<A>nowhere</A>"],
                             1: [f"<A>{gold}</A>", "<A>nowhere</A>", "<A>nowhere</A>"]})
        tree = _search(policy, MCTSConfig(iterations=1), reward=score_only_reward).trees[0]
        assert [n.value for n in tree.children(0)] == [1.0, 0.0]
        assert np.isclose(tree.root.value, 1 / 3)


class TestEnumeratedAnswers:
    """A listener that always picks A: sampled, the search only ever sees A; enumerated, every
    listener node holds every pick from the rollout that creates it, and pairs the target
    against a wrong one, whatever the node's value."""

    def _search(self, enumerate_answers, iterations=1):
        env = optima_envs.make("referential-game", min_candidates=4, max_candidates=4)
        policy = TurnScript({0: ["It is the one I was told."], 1: ["<A>A</A>"]})
        config = MCTSConfig(iterations=iterations, selection_temperature=1e-3, enumerate_answers=enumerate_answers,
                            seed=0)
        tree = MCTSPlanner(policy, score_only_reward, config).search(env, [TreeTask("g", seed=6)]).trees[0]
        tree.check_invariants()
        return tree, policy

    def test_an_answering_turn_is_expanded_into_every_pick_when_created(self):
        tree, policy = self._search(True)
        (said,) = tree.children(0)
        picks = sorted(n.text for n in tree.children(said.node_id))
        assert picks == ["<A>A</A>", "<A>B</A>", "<A>C</A>", "<A>D</A>"]
        gold = tree.nodes[said.node_id].snapshot.state.instance.gold
        assert gold != "A"  # the listener's only sampled pick is wrong, and the pair still holds the target
        assert [n.value for n in tree.children(said.node_id) if n.text == f"<A>{gold}</A>"] == [1.0]
        # the first rollout made the speaker's node and became four given picks; the two that
        # merged into that node sampled their pick (A, merged into the given A)
        assert policy.calls == [3, 2]
        assert said.visits == 6 and said.value == pytest.approx(1 / 6)
        (pair,) = extract_pairs([tree], PairConfig(min_chosen_value=0.4)).qualifying
        assert tree.nodes[pair.chosen_id].text == f"<A>{gold}</A>" and tree.nodes[pair.rejected_id].value == 0.0

    def test_off_by_default_the_picks_are_sampled(self):
        tree, _ = self._search(False, iterations=2)
        (said,) = tree.children(0)
        assert [n.text for n in tree.children(said.node_id)] == ["<A>A</A>"]

    def test_a_task_with_open_answers_is_sampled_as_usual(self):
        script = {0: [GOOD, BAD1, BAD2], 1: ["<A>good</A>", "<A>bad one</A>", "<A>bad two</A>"]}
        plain = _search(TurnScript(script), MCTSConfig(iterations=2, seed=0)).trees[0]
        enumerated = _search(TurnScript(script), MCTSConfig(iterations=2, enumerate_answers=True, seed=0)).trees[0]
        assert [n.text for n in enumerated] == [n.text for n in plain]


class TestGroundedReward:
    """synth-hop-ia seed 0: Alice holds "Stader was born in Griru." (the answer city), Bob the link
    fact "Tropepein was founded by Stader."; Alice answering at once is a right guess."""

    GUESS, TELL, WRONG = "<A>Griru</A>", "Stader was born in Griru.", "<A>Nowhere</A>"

    def _tree(self, grounded_only):
        from optima_agents.mcts import OptimaTreeReward

        policy = TurnScript({0: [self.GUESS, self.TELL, self.WRONG], 1: ["<A>Griru</A>"], 2: ["<A>Griru</A>"]})
        reward = OptimaTreeReward.without_reference_model(max_tokens=50.0, grounded_only=grounded_only)
        return _search(policy, MCTSConfig(iterations=1), reward=reward).trees[0]

    def test_the_search_prefers_passing_the_fact_to_a_right_guess(self):
        plain, grounded = self._tree(False), self._tree(True)
        assert [n.text for n in grounded.children(0)] == [self.GUESS, self.TELL, self.WRONG]
        guess, tell, _ = plain.children(0)
        assert guess.value > tell.value > 0  # the shorter right dialogue wins on tokens
        guess, tell, wrong = grounded.children(0)
        assert guess.value < 0 and wrong.value < 0 < tell.value
        pairs = extract_pairs([grounded], PairConfig()).kept
        assert [(p.node_id, p.chosen_id) for p in pairs] == [(0, tell.node_id)]
