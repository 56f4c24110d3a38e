"""`referential-game`: generated games, reading picks, hidden views, scoring, the oracle, and the
env contract."""

import re

import pytest
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.test import parallel_seed_test

import optima_envs
from optima_envs.errors import ConfigError
from optima_envs.tasks.referential import (
    ATTRIBUTES,
    LETTERS,
    ReferentialConfig,
    ReferentialSource,
    describe,
    extract_pick,
    oracle_policies,
    parse_pick,
    score_pick,
)
from optima_envs.test import check_env, check_snapshot_roundtrip, play, scripted

ENV_ID = "referential-game"


def _objects(view):
    """Descriptions back to attribute indices."""
    return [tuple(values.index(word) for values, word in zip(ATTRIBUTES, d.split())) for d in view]


class TestSource:
    def test_instances_are_reproducible_and_split_dependent(self):
        a = ReferentialSource(ReferentialConfig()).get(5)
        assert a == ReferentialSource(ReferentialConfig()).get(5)
        assert a != ReferentialSource(ReferentialConfig(split="test")).get(5)
        assert a != ReferentialSource(ReferentialConfig(seed=1)).get(5)

    @pytest.mark.parametrize("max_differences", [1, 2, 4])
    def test_views_hold_the_same_distinct_objects_and_gold_is_the_target(self, max_differences):
        source = ReferentialSource(ReferentialConfig(max_differences=max_differences))
        counts = set()
        for i in range(60):
            meta = source.get(i).meta
            speaker, listener = meta["speaker_view"], meta["listener_view"]
            counts.add(len(speaker))
            assert sorted(speaker) == sorted(listener) and len(set(speaker)) == len(speaker)
            target = speaker[meta["speaker_target"] - 1]
            assert listener[LETTERS.index(source.get(i).gold)] == target
            (goal,) = _objects([target])
            for other in _objects(speaker):
                if other != goal:
                    assert 1 <= sum(a != b for a, b in zip(goal, other)) <= max_differences
        assert counts == {4, 5, 6}

    def test_orders_differ_between_the_seats(self):
        source = ReferentialSource(ReferentialConfig())
        different = sum(source.get(i).meta["speaker_view"] != source.get(i).meta["listener_view"] for i in range(30))
        assert different >= 25

    def test_describe_is_size_colour_material_shape(self):
        assert describe((0, 0, 1, 0)) == "small red glass cube"

    @pytest.mark.parametrize("kwargs, message", [
        ({"min_candidates": 1}, "need 2 <= min_candidates <= max_candidates <= 8, got 1 and 6"),
        ({"min_candidates": 5, "max_candidates": 4}, "got 5 and 4"),
        ({"max_candidates": 9}, "got 4 and 9"),
        ({"max_differences": 0}, "max_differences must be in [1, 4], got 0"),
        ({"split": "dev"}, "split must be one of ['test', 'train', 'validation'], got 'dev'"),
    ])
    def test_bad_knobs(self, kwargs, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            optima_envs.make(ENV_ID, **kwargs)


class TestReadingPicks:
    @pytest.mark.parametrize("text, label", [
        ("B", "B"), ("b", "B"), (" (C) ", "C"), ("D.", "D"), ("[A]", "A"), ("object B", "B"), ("Candidate c", "C"),
        ("B or C", None), ("B, C", None), ("B and C", None), ("BC", None), ("", None), ("E", None), ("?", None),
        ("the small red glass cube", None), ("B because it is red", None),
    ])
    def test_parse_pick(self, text, label):
        assert parse_pick(text, "ABCD") == label

    @pytest.mark.parametrize("text, label", [
        ("It is <A>B</A>", "B"),
        ("<a> c </a>", "C"),
        ("<A>B</A> no, wait: <A>C</A>", "C"),       # the last tag pair is the pick, as in every task
        ("<A>B or C</A>", None),                    # two candidates: no pick
        ("<A>B</A> <A>B or C</A>", None),           # the last pair names two: no pick
        ("<A></A>", None),
        ("Answer: B", None),                        # strict: no lenient fallback for a final move
        ("<A>B", None),                             # an unclosed tag is no pick
        ("<A>X</A>", None),                         # not a label
    ])
    def test_extract_pick(self, text, label):
        extraction = extract_pick(text, "ABCDEF")
        assert extraction.answer == label and extraction.fallback is False
        assert extraction.method == ("tag" if label else "none")

    def test_score_pick_uses_the_listener_labels(self):
        instance = ReferentialSource(ReferentialConfig(min_candidates=4, max_candidates=4)).get(0)
        wrong = next(label for label in "ABCD" if label != instance.gold)
        assert score_pick(instance.gold, instance) == 1.0
        assert score_pick(f"({instance.gold.lower()})", instance) == 1.0
        assert score_pick(wrong, instance) == 0.0 and score_pick("E", instance) == 0.0


class TestGame:
    def test_each_seat_sees_only_its_own_view(self):
        env = optima_envs.make(ENV_ID)
        obs, _ = env.reset(seed=3)
        meta = env.state.instance.meta
        speaker, listener = obs["alice"], obs["bob"]
        assert (speaker["role"], listener["role"]) == ("speaker", "listener")
        assert speaker["evidence"][:-1] == tuple(f"{i + 1}: {d}" for i, d in enumerate(meta["speaker_view"]))
        assert speaker["evidence"][-1] == f"Target: {meta['speaker_target']}"
        target = meta["speaker_view"][meta["speaker_target"] - 1]
        assert f"The target is object {meta['speaker_target']}: {target}." in speaker["system_prompt"]
        assert target not in listener["system_prompt"].split("Your objects:")[0]  # the listener is told nothing
        assert listener["evidence"] == tuple(f"{LETTERS[i]}: {d}" for i, d in enumerate(meta["listener_view"]))
        assert "Target" not in " ".join(listener["evidence"]) and "target is object" not in listener["system_prompt"]
        assert all(f"- {e}" in listener["system_prompt"] for e in listener["evidence"])
        assert env.observation_space("bob").contains(listener)

    def test_the_speakers_tags_are_not_picks(self):
        env = optima_envs.make(ENV_ID)
        env.reset(seed=0)
        infos = env.step({"alice": f"<A>{env.state.instance.gold}</A>"})[4]
        assert infos["alice"]["message_answer"] is None and env.agents == ["alice", "bob"]

    def test_the_right_pick_scores_one_and_ends_the_game(self):
        env = optima_envs.make(ENV_ID)
        env.reset(seed=0)
        env.step({"alice": "It is the large one."})
        _, rewards, terms, truncs, infos = env.step({"bob": f"Then <A>{env.state.instance.gold}</A>"})
        assert rewards == {"alice": 1.0, "bob": 1.0} and all(terms.values()) and not any(truncs.values())
        assert infos["bob"]["end_reason"] == "picked" and infos["bob"]["answer"] == env.state.instance.gold

    def test_a_wrong_pick_scores_zero_and_ends_the_game(self):
        env = optima_envs.make(ENV_ID)
        env.reset(seed=0)
        wrong = next(label for label in LETTERS if label != env.state.instance.gold)
        env.step({"alice": "It is the large one."})
        _, rewards, terms, _, infos = env.step({"bob": f"<A>{wrong}</A>"})
        assert rewards == {"alice": 0.0, "bob": 0.0} and all(terms.values())
        assert (infos["bob"]["end_reason"], infos["bob"]["answer"], infos["bob"]["score_ok"]) == ("picked", wrong, True)

    def test_a_letter_past_the_candidates_is_a_wrong_pick(self):
        env = optima_envs.make(ENV_ID, min_candidates=4, max_candidates=6)
        for seed in range(40):
            env.reset(seed=seed)
            if len(env.state.instance.meta["listener_view"]) == 4:
                break
        env.step({"alice": "hi"})
        _, rewards, _, _, infos = env.step({"bob": "<A>F</A>"})
        assert infos["bob"]["end_reason"] == "picked" and rewards["bob"] == 0.0

    def test_picking_two_candidates_is_no_pick_and_scores_zero(self):
        env = optima_envs.make(ENV_ID, max_turns=4)
        env.reset(seed=1)
        gold = env.state.instance.gold
        trace = play(env, {"alice": scripted(["one", "two"]), "bob": scripted([f"<A>{gold} or C</A>", "<A>A, B</A>"])},
                     seed=1)
        infos, truncs = trace[-1][4], trace[-1][3]
        assert all(truncs.values()) and infos["bob"]["end_reason"] == "max_turns"
        assert [m.answer for m in env.state.messages] == [None] * 4
        assert infos["bob"]["score"] == 0.0 and infos["bob"]["answer"] is None

    @pytest.mark.parametrize("seed", range(0, 200, 2))
    def test_the_oracle_scores_one(self, seed):
        env = optima_envs.make(ENV_ID)
        trace = play(env, oracle_policies(env.possible_agents), seed=seed)
        assert len(trace) == 3 and trace[-1][1] == {"alice": 1.0, "bob": 1.0}
        assert trace[-1][4]["bob"]["end_reason"] == "picked"

    def test_same_seed_same_game_and_episode(self):
        traces = []
        for seed in (11, 11, 12):
            env = optima_envs.make(ENV_ID)
            traces.append(play(env, oracle_policies(env.possible_agents), seed=seed))
        assert data_equivalence(traces[0], traces[1])
        assert traces[0][0][0]["bob"]["evidence"] != traces[2][0][0]["bob"]["evidence"]

    def test_three_agents_are_refused(self):
        with pytest.raises(ConfigError, match=re.escape("referential-game is played by exactly 2 agents")):
            optima_envs.make(ENV_ID, num_agents=3)


class TestContract:
    def test_check_env(self):
        check_env(ENV_ID)

    def test_pettingzoo_seed_test(self):
        parallel_seed_test(lambda: optima_envs.make(ENV_ID))

    def test_snapshot_before_the_pick_replays_the_oracle(self):
        env = optima_envs.make(ENV_ID)
        policies = oracle_policies(env.possible_agents)
        obs, _ = env.reset(seed=4)
        obs = env.step({"alice": policies["alice"](obs["alice"])})[0]
        snap = env.snapshot()
        first = env.step({"bob": policies["bob"](obs["bob"])})
        env.restore(snap)
        assert env.agents == ["alice", "bob"]
        second = env.step({"bob": policies["bob"](env.observations_for(env.state)["bob"])})
        assert data_equivalence(first, second) and first[1]["bob"] == 1.0
        for turn in (0, 1, 2):
            check_snapshot_roundtrip(optima_envs.make(ENV_ID), at_turn=turn)
