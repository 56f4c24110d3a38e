"""`negotiation-game`: generated pools and values, reading moves, the deal's score, the oracle,
the env contract, and the env's whole-dialogue scoring hook the game uses."""

import dataclasses
import itertools
import re
from fractions import Fraction

import pytest
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.test import parallel_seed_test

import optima_envs
from optima_envs.core.task import DialogueOutcome
from optima_envs.core.types import TaskInstance
from optima_envs.errors import ConfigError, ScoringError
from optima_envs.tasks.negotiation import (
    Accept,
    Game,
    InvalidMove,
    NegotiationConfig,
    NegotiationSource,
    Proposal,
    is_accept,
    oracle_policy,
    parse_move,
    score_proposal,
    values_first_pattern,
    values_then_split_pattern,
)
from optima_envs.test import check_env, check_snapshot_roundtrip, play, scripted

ENV_ID = "negotiation-game"
ITEMS, COUNTS = ("book", "hat", "ball"), (3, 1, 2)
# Alice: 3*2 + 1*2 + 2*1 = 10; Bob: 0 + 1*4 + 2*3 = 10. Best: books to Alice, hat and balls to Bob (1.6).
INSTANCE = TaskInstance(instance_id="hand-made", question="Split the pool: 3 book, 1 hat, 2 ball.",
                        gold="propose book=3 hat=0 ball=0",
                        meta={"items": ITEMS, "counts": COUNTS, "values": ((2, 2, 1), (0, 4, 3))})


def _play(messages, **kwargs):
    env = optima_envs.make(ENV_ID, **kwargs)
    policy = scripted(messages)  # one queue for both seats, spoken in turn order
    trace = play(env, {a: policy for a in env.possible_agents}, options={"instance": INSTANCE})
    return env, trace[-1]


def _all_takes(counts):
    return itertools.product(*(range(c + 1) for c in counts))


class TestSource:
    def test_instances_are_reproducible_and_split_dependent(self):
        a = NegotiationSource(NegotiationConfig()).get(5)
        assert a == NegotiationSource(NegotiationConfig()).get(5)
        assert a != NegotiationSource(NegotiationConfig(split="validation")).get(5)

    @pytest.mark.parametrize("item_types, max_count, total_value", [(3, 4, 10), (2, 2, 6), (4, 5, 20)])
    def test_pools_and_private_values(self, item_types, max_count, total_value):
        config = NegotiationConfig(item_types=item_types, max_count=max_count, total_value=total_value)
        source = NegotiationSource(config)
        for i in range(40):
            game = Game.of(source.get(i))
            assert len(set(game.items)) == len(game.counts) == item_types
            assert all(1 <= n <= max_count for n in game.counts)
            assert game.worth(0, game.counts) == game.worth(1, game.counts) == total_value
            assert game.values[0] != game.values[1] and all(a or b for a, b in zip(*game.values))

    def test_gold_is_a_best_split_for_the_first_seat(self):
        source = NegotiationSource(NegotiationConfig())
        for i in range(30):
            instance = source.get(i)
            assert score_proposal(instance.gold, instance) == 1.0

    @pytest.mark.parametrize("kwargs, message", [
        ({"item_types": 1}, "item_types must be in [2, 4], got 1"),
        ({"max_count": 0}, "max_count must be in [1, 10], got 0"),
        ({"total_value": 31}, "total_value must be in [2, 30], got 31"),
        ({"split": "dev"}, "split must be one of ['test', 'train', 'validation'], got 'dev'"),
        ({"sampled_turns": "values"}, "sampled_turns must be one of ['moves', 'values_first', 'values_then_split'], "
                                     "got 'values'"),
    ])
    def test_bad_knobs(self, kwargs, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            optima_envs.make(ENV_ID, **kwargs)


class TestReadingMoves:
    @pytest.mark.parametrize("text", ["accept", "Accept.", " ACCEPT! "])
    def test_accept(self, text):
        assert is_accept(text) and parse_move(text, ITEMS, COUNTS) == Accept()

    @pytest.mark.parametrize("text, take", [
        ("propose book=2 hat=0 ball=1", (2, 0, 1)),
        ("Propose: ball=2, hat=1; book=0.", (0, 1, 2)),
        ("propose books = 3 hats: 1 balls=0", (3, 1, 0)),
        ("propose book=0 hat=0 ball=0", (0, 0, 0)),
    ])
    def test_proposals(self, text, take):
        assert parse_move(text, ITEMS, COUNTS) == Proposal(take)

    @pytest.mark.parametrize("text, reason", [
        ("propose book=4 hat=0 ball=0", "asks for 4 book but the pool has 3"),
        ("propose book=1 hat=2 ball=0", "asks for 2 hat but the pool has 1"),
        ("propose book=2 hat=0", "a proposal lists every item (book, hat, ball); missing: ball"),
        ("propose", "missing: book, hat, ball"),
        ("propose book=1 hat=0 ball=1 book=2", "item 'book' is listed twice"),
        ("propose book=1 hat=0 banana=1", "unknown item 'banana'; the items are book, hat, ball"),
        ("propose book=-1 hat=0 ball=0", "book=-1: a count is a whole number >= 0"),
        ("propose book=1.5 hat=0 ball=0", "book=1.5: a count is a whole number >= 0"),
        ("propose book=two hat=0 ball=0", "book=two: a count is a whole number >= 0"),
        ("propose I take book=1 hat=0 ball=1", "unreadable text 'I take' in the proposal"),
        ("propose book=1 hat=0 ball=1 if you agree", "unreadable text 'if you agree' in the proposal"),
        ("I accept", "a move is 'accept' or 'propose book=N hat=N ball=N', got 'I accept'"),
        ("book=1 hat=0 ball=1", "a move is 'accept' or 'propose book=N hat=N ball=N'"),
        ("proposed book=1 hat=0 ball=1", "a move is 'accept' or 'propose"),
    ])
    def test_invalid_moves_say_why(self, text, reason):
        move = parse_move(text, ITEMS, COUNTS)
        assert isinstance(move, InvalidMove) and reason in move.reason


class TestValuesFirstTurns:
    ALICE, BOB = ("Your value per item: book=2 hat=2 ball=1",), ("Your value per item: book=0 hat=4 ball=3",)

    def test_only_the_values_first_task_constrains_whole_turns(self):
        assert optima_envs.make(ENV_ID).task.turn_pattern is None
        assert optima_envs.make(ENV_ID, sampled_turns="values_first").task.turn_pattern is values_first_pattern

    def test_the_opener_states_its_own_table_and_makes_no_move(self):
        pattern = values_first_pattern(INSTANCE, self.ALICE, ())
        assert re.fullmatch(pattern, "My values: book=2 hat=2 ball=1.")
        for other in ("My values: book=0 hat=4 ball=3.", "<A>propose book=3 hat=0 ball=0</A>",
                      "My values: book=2 hat=2 ball=1. <A>propose book=3 hat=0 ball=0</A>"):
            assert not re.fullmatch(pattern, other), other

    def test_a_later_turn_is_a_move_optionally_after_the_speakers_own_table(self):
        offer = "My values: book=2 hat=2 ball=1. <A>propose book=3 hat=0 ball=0</A>"
        pattern = values_first_pattern(INSTANCE, self.BOB, ("My values: book=2 hat=2 ball=1.", offer))
        for turn in ("<A>accept</A>", "<A>propose book=0 hat=1 ball=2</A>",
                     "My values: book=0 hat=4 ball=3. <A>propose book=0 hat=1 ball=2</A>"):
            assert re.fullmatch(pattern, turn), turn
        for turn in ("My values: book=0 hat=4 ball=3.", "<A>propose book=4 hat=1 ball=2</A>",
                     "My values: book=2 hat=2 ball=1. <A>accept</A>"):
            assert not re.fullmatch(pattern, turn), turn

    @pytest.mark.parametrize("heard", [("My values: book=2 hat=2 ball=1.",),
                                       ("My values: book=2 hat=2 ball=1.", "<A>propose book=9 hat=0 ball=0</A>")])
    def test_accept_is_offered_only_after_a_valid_partner_proposal(self, heard):
        pattern = values_first_pattern(INSTANCE, self.BOB, heard)
        assert not re.fullmatch(pattern, "<A>accept</A>")
        assert re.fullmatch(pattern, "<A>propose book=0 hat=1 ball=2</A>")

    def test_evidence_without_a_table_of_the_game_is_refused(self):
        with pytest.raises(ValueError, match="no value table of this game"):
            values_first_pattern(INSTANCE, ("Your value per item: book=1 hat=1 ball=1",), ())

    def test_the_setting_changes_no_game(self):
        plain, values_first = optima_envs.make(ENV_ID), optima_envs.make(ENV_ID, sampled_turns="values_first")
        for env in (plain, values_first):
            env.reset(seed=5, options={"index": 7})
        assert plain.state.instance == values_first.state.instance


class TestValuesThenSplitTurns:
    ALICE, BOB = TestValuesFirstTurns.ALICE, TestValuesFirstTurns.BOB
    STATED = "My values: book=2 hat=2 ball=1."

    def test_the_task_uses_it_when_asked(self):
        task = optima_envs.make(ENV_ID, sampled_turns="values_then_split").task
        assert task.turn_pattern is values_then_split_pattern

    def test_the_opener_states_its_own_table(self):
        pattern = values_then_split_pattern(INSTANCE, self.ALICE, ())
        assert re.fullmatch(pattern, self.STATED)
        assert not re.fullmatch(pattern, "<A>propose book=3 hat=0 ball=0</A>")

    def test_the_second_speaker_proposes_a_whole_item_split_and_nothing_else(self):
        pattern = values_then_split_pattern(INSTANCE, self.BOB, (self.STATED,))
        whole = [f"<A>propose book={b} hat={h} ball={c}</A>" for b in (0, 3) for h in (0, 1) for c in (0, 2)]
        assert all(re.fullmatch(pattern, turn) for turn in whole)
        for turn in ("<A>accept</A>", "<A>propose book=1 hat=1 ball=2</A>", "<A>propose book=3 hat=1 ball=1</A>",
                     "My values: book=0 hat=4 ball=3. <A>propose book=0 hat=1 ball=2</A>"):
            assert not re.fullmatch(pattern, turn), turn

    def test_after_a_valid_partner_proposal_the_turn_is_accept(self):
        pattern = values_then_split_pattern(INSTANCE, self.ALICE, ("<A>propose book=0 hat=1 ball=2</A>",))
        assert re.fullmatch(pattern, "<A>accept</A>")
        assert not re.fullmatch(pattern, "<A>propose book=3 hat=0 ball=0</A>")

    def test_the_three_sampled_turns_make_a_deal_scored_by_the_split(self):
        turns = [(self.ALICE, self.STATED), (self.BOB, "<A>propose book=0 hat=1 ball=2</A>"),
                 (self.ALICE, "<A>accept</A>")]
        for k, (evidence, turn) in enumerate(turns):
            heard = tuple(said for (seen, said) in turns[:k] if seen != evidence)
            assert re.fullmatch(values_then_split_pattern(INSTANCE, evidence, heard), turn), turn
        _, (_, rewards, terms, _, infos) = _play([turn for _, turn in turns], sampled_turns="values_then_split")
        assert rewards == {"alice": 1.0, "bob": 1.0} and all(terms.values())
        assert infos["alice"]["deal"]["bob"] == {"book": 0, "hat": 1, "ball": 2}

    def test_evidence_without_a_table_of_the_game_is_refused(self):
        with pytest.raises(ValueError, match="no value table of this game"):
            values_then_split_pattern(INSTANCE, ("Your value per item: book=1 hat=1 ball=1",), ())


class TestScore:
    def test_best_split_is_the_maximum_over_every_split(self):
        source = NegotiationSource(NegotiationConfig(item_types=3, max_count=3))
        for i in range(25):
            game = Game.of(source.get(i))
            best = max(game.joint(take) for take in _all_takes(game.counts))
            assert game.joint(game.best_take0()) == best and game.score(game.best_take0()) == 1.0
            assert all(0.0 <= game.score(take) <= 1.0 for take in _all_takes(game.counts))

    def test_hand_computed_scores(self):
        game = Game.of(INSTANCE)
        assert game.best_take0() == (3, 0, 0) and game.joint((3, 0, 0)) == Fraction(16, 10)
        assert game.score((3, 1, 0)) == 0.875  # Alice 8/10, Bob 6/10: 1.4 / 1.6
        assert game.score((0, 1, 2)) == 0.25  # Alice 4/10, Bob 0/10 (books are worth nothing to him): 0.4 / 1.6
        assert score_proposal("propose book=3 hat=1 ball=0", INSTANCE) == 0.875
        assert score_proposal("accept", INSTANCE) == 0.0 and score_proposal("propose book=9", INSTANCE) == 0.0


class TestGame:
    def test_each_seat_sees_only_its_own_values(self):
        env = optima_envs.make(ENV_ID)
        obs, _ = env.reset(seed=0, options={"instance": INSTANCE})
        assert obs["alice"]["evidence"] == ("Your value per item: book=2 hat=2 ball=1",)
        assert obs["bob"]["evidence"] == ("Your value per item: book=0 hat=4 ball=3",)
        assert "book=0 hat=4 ball=3" not in obs["alice"]["system_prompt"]
        assert "book=2 hat=2 ball=1" not in obs["bob"]["system_prompt"]
        assert "<A>propose book=N hat=N ball=N</A>" in obs["alice"]["system_prompt"]
        assert "<A>accept</A>" in obs["bob"]["system_prompt"]

    def test_an_accepted_deal_scores_its_joint_utility(self):
        env, (_, rewards, terms, _, infos) = _play(["Hi. <A>propose book=3 hat=1 ball=0</A>", "OK <A>accept</A>"])
        info = infos["alice"]
        assert rewards == {"alice": 0.875, "bob": 0.875} and all(terms.values())
        assert info["end_reason"] == "accepted" and info["utilities"] == {"alice": 8, "bob": 6}
        assert info["deal"] == {"alice": {"book": 3, "hat": 1, "ball": 0}, "bob": {"book": 0, "hat": 0, "ball": 2}}
        assert info["answer"] == "alice: book=3 hat=1 ball=0; bob: book=0 hat=0 ball=2"
        assert info["deal_error"] is None and info["gold"] == INSTANCE.gold

    def test_the_latest_proposal_is_the_one_accepted(self):
        _, (_, rewards, _, _, infos) = _play(["<A>propose book=3 hat=1 ball=2</A>",
                                              "<A>propose book=3 hat=0 ball=0</A>", "<A>accept</A>"])
        assert infos["bob"]["deal"]["bob"] == {"book": 3, "hat": 0, "ball": 0}
        assert infos["bob"]["utilities"] == {"alice": 4, "bob": 0} and rewards["bob"] == 0.25

    @pytest.mark.parametrize("messages, reason", [
        (["<A>accept</A>"], "accepted with no proposal on the table"),
        (["let us talk", "<A>accept</A>"], "accepted with no proposal on the table"),
        (["<A>propose book=3 hat=0 ball=0</A>", "hmm", "<A>accept</A>"], "accepted its own proposal"),
        (["<A>propose book=4 hat=0 ball=0</A>", "<A>accept</A>"],
         "accepted an invalid proposal: asks for 4 book but the pool has 3"),
        (["<A>propose book=3 hat=0 ball=0</A>", "<A>I take the rest</A>", "<A>accept</A>"],
         "accepted an invalid proposal: a move is 'accept' or 'propose"),
    ])
    def test_an_accept_without_a_valid_partner_proposal_ends_with_zero(self, messages, reason):
        env, (_, rewards, terms, _, infos) = _play(messages)
        assert all(terms.values()) and set(rewards.values()) == {0.0} and len(env.state.messages) == len(messages)
        info = infos["alice"]
        assert info["end_reason"] == "accepted" and reason in info["deal_error"]
        assert info["deal"] is None and info["answer"] is None and info["utilities"] == {"alice": 0, "bob": 0}

    def test_no_agreement_within_max_turns_scores_zero(self):
        env, (_, rewards, terms, truncs, infos) = _play(["<A>propose book=3 hat=1 ball=2</A>"] * 4, max_turns=4)
        assert all(truncs.values()) and not any(terms.values()) and set(rewards.values()) == {0.0}
        assert infos["bob"]["end_reason"] == "max_turns" and infos["bob"]["deal_error"] == "no proposal was accepted"
        assert infos["bob"]["score_ok"] is True

    @pytest.mark.parametrize("seed", range(0, 200, 2))
    def test_the_oracle_scores_one(self, seed):
        env = optima_envs.make(ENV_ID)
        env.reset(seed=seed)
        policy = oracle_policy(env.state.instance, env.possible_agents)
        trace = play(env, {a: policy for a in env.possible_agents}, seed=seed)
        info = trace[-1][4]["bob"]
        assert len(trace) == 3 and trace[-1][1] == {"alice": 1.0, "bob": 1.0} and info["end_reason"] == "accepted"
        game = Game.of(env.state.instance)
        assert info["utilities"] == {a: game.worth(s, list(info["deal"][a].values()))
                                     for s, a in enumerate(env.possible_agents)}

    def test_same_seed_same_game_and_episode(self):
        traces = []
        for seed in (5, 5, 6):
            env = optima_envs.make(ENV_ID)
            env.reset(seed=seed)
            policy = oracle_policy(env.state.instance, env.possible_agents)
            traces.append(play(env, {a: policy for a in env.possible_agents}, seed=seed))
        assert data_equivalence(traces[0], traces[1])
        assert traces[0][0][0]["alice"]["system_prompt"] != traces[2][0][0]["alice"]["system_prompt"]

    def test_three_agents_are_refused(self):
        with pytest.raises(ConfigError, match=re.escape("negotiation-game is played by exactly 2 agents")):
            optima_envs.make(ENV_ID, num_agents=3)


class TestContract:
    def test_check_env(self):
        check_env(ENV_ID)

    def test_pettingzoo_seed_test(self):
        parallel_seed_test(lambda: optima_envs.make(ENV_ID))

    def test_snapshot_roundtrip(self):
        for turn in (0, 1, 2, 5):
            check_snapshot_roundtrip(optima_envs.make(ENV_ID), at_turn=turn)


class TestDialogueScoringHook:
    """The env side of `Task.score_dialogue`, with the game's task and a replaced scorer."""

    def _env_with(self, scorer):
        env = optima_envs.make(ENV_ID)
        env.task = dataclasses.replace(env.task, score_dialogue=scorer)
        env.reset(seed=0)
        return env

    def test_a_scoring_error_is_recorded_not_scored_zero(self):
        def broken(instance, agents, messages):
            raise ScoringError("the deal table is corrupt")

        env = self._env_with(broken)
        env.step({"alice": "<A>propose x</A>"})
        _, rewards, _, _, infos = env.step({"bob": "<A>accept</A>"})
        assert rewards == {"alice": 0.0, "bob": 0.0}
        assert (infos["bob"]["score"], infos["bob"]["score_ok"]) == (None, False)
        assert infos["bob"]["score_error"] == "ScoringError: the deal table is corrupt"

    def test_details_may_not_reuse_the_envs_infos_keys(self):
        env = self._env_with(lambda instance, agents, messages: DialogueOutcome(1.0, "x", {"score": 2.0}))
        env.step({"alice": "hi"})
        message = "score_dialogue details use the env's own infos keys ['score']"
        with pytest.raises(ConfigError, match=re.escape(message)):
            env.step({"bob": "<A>accept</A>"})
