import re

import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import optima_envs
from optima_envs.core.reset_args import RESET_OPTIONS, ResetOptionWarning
from optima_envs.errors import ConfigError, EpisodeEndedError, InvalidActionError, InvalidSnapshotError, ResetNeededError
from optima_envs.test import play, random_messages, scripted, share_evidence_then


def make(**kwargs):
    return optima_envs.make("synth-hop-ia", **kwargs)


class TestTurnTaking:
    def test_observation_says_whose_turn(self):
        env = make()
        obs, infos = env.reset(seed=0)
        assert obs["alice"]["speaker"] == obs["bob"]["speaker"] == "alice"
        obs, *_ = env.step({"alice": "hi"})
        assert obs["bob"]["speaker"] == "bob"
        assert obs["bob"]["transcript"] == ({"speaker": "alice", "text": "hi"},)

    def test_other_agents_entries_are_ignored(self):
        env = make()
        env.reset(seed=0)
        env.step({"alice": "hi", "bob": "ignored"})
        assert [m.text for m in env.state.messages] == ["hi"]

    def test_observation_contents(self):
        env = make()
        obs, _ = env.reset(seed=0, options={"index": 3})
        alice = obs["alice"]
        assert alice["role"] == "partner" and alice["question"] == env.state.instance.question
        assert alice["evidence"] and all(e in alice["system_prompt"] for e in alice["evidence"])
        assert env.observation_space("alice").contains(alice)


class TestTokenCosts:
    def test_exact_when_token_ids_given(self):
        env = make()
        env.reset(seed=0)
        _, _, _, _, infos = env.step({"alice": {"text": "hello there", "token_ids": [5, 6, 7]}})
        assert infos["alice"]["message_tokens"] == 3 and infos["alice"]["tokens_exact"] is True
        assert infos["alice"]["agent_tokens"] == 3 and infos["bob"]["agent_tokens"] == 0
        _, _, _, _, infos = env.step({"bob": "one two three four"})
        assert infos["bob"]["message_tokens"] == 4 and infos["bob"]["tokens_exact"] is False
        assert infos["bob"]["total_tokens"] == 7 and infos["bob"]["agent_tokens"] == 4

    def test_token_ids_from_any_iterable_are_read_once(self):
        env = make()
        env.reset(seed=0)
        infos = env.step({"alice": {"text": "hello there", "token_ids": iter([1, 2, 3])}})[4]
        assert infos["alice"]["message_tokens"] == 3 and infos["alice"]["tokens_exact"] is True
        assert env.state.messages[-1].token_ids == (1, 2, 3)

    def test_empty_ids_only_for_empty_text(self):
        env = make()
        env.reset(seed=0)
        infos = env.step({"alice": {"text": "", "token_ids": []}})[4]
        assert infos["alice"]["message_tokens"] == 0 and infos["alice"]["tokens_exact"] is True
        assert not env.action_space("bob").contains({"text": "hi", "token_ids": []})
        assert env.action_space("bob").contains({"text": "", "token_ids": []})
        assert not env.action_space("bob").contains({"text": "hi", "token_ids": [2**31]})

    def test_tokenizer_callable_and_hf_like(self):
        env = make(tokenizer=lambda text: list(text))
        env.reset(seed=0)
        assert env.step({"alice": "abcd"})[4]["alice"]["message_tokens"] == 4

        class FakeHF:
            def encode(self, text, add_special_tokens=False):
                return text.split(",")

        env = make(tokenizer=FakeHF())
        env.reset(seed=0)
        assert env.step({"alice": "a,b,c"})[4]["alice"]["message_tokens"] == 3

    def test_bad_tokenizer(self):
        with pytest.raises(TypeError, match="tokenizer must be None"):
            make(tokenizer=42)


class TestEnding:
    def test_agreement_terminates_and_scores(self):
        env = make()
        env.reset(seed=0, options={"index": 0})
        gold = env.state.instance.gold
        trace = play(env, {"alice": share_evidence_then(gold), "bob": share_evidence_then(gold)}, seed=0,
                     options={"index": 0})
        _, rewards, terminations, truncations, infos = trace[-1]
        assert all(terminations.values()) and not any(truncations.values())
        assert rewards == {"alice": 1.0, "bob": 1.0}
        end = infos["bob"]
        assert end["end_reason"] == "agreed" and end["answer"] == gold and end["gold"] == gold
        assert end["score"] == 1.0 and end["score_ok"] is True and end["tokens"] == end["total_tokens"]
        assert env.agents == []

    def test_turn_limit_truncates_and_scores_last_answer(self):
        env = make(max_turns=3)
        env.reset(seed=0, options={"index": 0})
        gold = env.state.instance.gold
        results = [env.step({env.current_speaker: m}) for m in ("hi", f"<A>{gold}</A>", "<A>nope</A>")]
        _, rewards, terminations, truncations, infos = results[-1]
        assert all(truncations.values()) and not any(terminations.values())
        assert infos["alice"]["end_reason"] == "max_turns" and infos["alice"]["answer"] == "nope"
        assert rewards["alice"] == 0.0

    def test_no_answer_scores_zero_not_failure(self):
        env = make(max_turns=2)
        env.reset(seed=0)
        env.step({"alice": "a"})
        infos = env.step({"bob": "b"})[4]
        assert infos["bob"]["answer"] is None and infos["bob"]["score"] == 0.0 and infos["bob"]["score_ok"] is True


class TestBadInput:
    def test_step_before_reset(self):
        with pytest.raises(ResetNeededError, match="call reset\\(\\) before step"):
            make().step({"alice": "x"})

    def test_step_after_end(self):
        env = make(max_turns=1)
        env.reset(seed=0)
        env.step({"alice": "x"})
        with pytest.raises(EpisodeEndedError, match=re.escape("step() called after the episode ended (max_turns)")):
            env.step({"bob": "x"})

    @pytest.mark.parametrize("actions, message", [
        ({"alice": 3}, "'alice''s action must be a str or a mapping with a 'text' str"),
        ({"alice": None}, "'alice''s action must be a str"),
        ({"alice": {"text": "x", "token_ids": "abc"}}, "'alice''s token_ids must be a list of ints"),
        ({"alice": {"text": "x", "token_ids": 7}}, "'alice''s token_ids must be a list of ints (or None"),
        ({"alice": {"text": "x", "token_ids": [1, "a"]}}, "'alice''s token_ids must be ints in [0, 2147483647], got 'a'"),
        ({"alice": {"text": "x", "token_ids": [2**31]}}, "got 2147483648"),
        ({"alice": {"text": "x", "token_ids": [-1]}}, "got -1"),
        ({"alice": {"text": "x", "token_ids": [True]}}, "got True"),
        ({"alice": {"text": "hello", "token_ids": []}}, "'alice''s token_ids is empty but its text is not"),
        ({"mallory": "x", "alice": "y"}, "actions for agents not in this game: ['mallory']"),
        ({"bob": "x"}, "it is 'alice''s turn but actions has no entry for 'alice'"),
        ("hello", "step() takes a dict {agent: message}, got str"),
    ])
    def test_invalid_actions(self, actions, message):
        env = make()
        env.reset(seed=0)
        with pytest.raises(InvalidActionError, match=re.escape(message)):
            env.step(actions)
        assert env.state.turn == 0, "a rejected action must not change the state"

    def test_long_message_truncated_and_flagged(self):
        env = make(max_message_chars=10)
        env.reset(seed=0)
        infos = env.step({"alice": "x" * 1_000_000})[4]
        assert infos["alice"]["message_truncated"] is True
        assert env.state.messages[-1].text == "x" * 10

    @pytest.mark.parametrize("kwargs, message", [
        ({"num_agents": 1}, "num_agents must be between 2 and 8"),
        ({"max_turns": 0}, "max_turns must be >= 1, got 0"),
        ({"agent_names": ["a", "a"]}, "agent_names must be at least two distinct names"),
        ({"render_mode": "rgb_array"}, "render_mode must be one of ['human', 'ansi'] or None"),
        ({"hops": 5}, "synth-hop-ia: hops must be 2 or 3, got 5"),
    ])
    def test_bad_config(self, kwargs, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            make(**kwargs)

    def test_bad_reset_options(self):
        env = make()
        with pytest.raises(ConfigError, match=re.escape("options['format_instruction'] must be a string, 'sample'")):
            env.reset(seed=0, options={"format_instruction": 99})
        env = optima_envs.make("synth-hop-ia")
        with pytest.raises(ConfigError, match=re.escape("options['index'] must be an int in [0, ")):
            env.reset(seed=0, options={"index": -1})


    @pytest.mark.parametrize("options, message", [
        ("index", "reset(options=...) must be a dict of reset options or None, got str 'index'; accepted keys: "
                  f"{sorted(RESET_OPTIONS)}, e.g. options={{'index': 3}}"),
        ([("index", 3)], "reset(options=...) must be a dict of reset options or None, got list [('index', 3)]"),
        ({"instance": "q1"}, "options['instance'] must be a TaskInstance, got str 'q1'"),
        ({"format_instruction": "be brief \ud800"}, "options['format_instruction'] holds text UTF-8 cannot encode"),
    ])
    def test_reset_options_are_checked(self, options, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            make().reset(seed=0, options=options)

    @pytest.mark.parametrize("seed, shown", [(True, "bool True"), ([1, 2], "list [1, 2]"), (1.5, "float 1.5"),
                                             ("7", "str '7'"), (-1, "int -1")])
    def test_reset_seed_must_be_an_int_or_none(self, seed, shown):
        message = f"reset(seed=...) must be a non-negative int or None, got {shown}"
        with pytest.raises(ConfigError, match=re.escape(message)):
            make().reset(seed=seed)

    def test_numpy_seeds_and_none_are_fine(self):
        env = make()
        env.reset(seed=np.int64(3))
        env.reset(seed=None, options=None)


class TestUnknownResetOptions:
    """An unknown key is ignored, as Gymnasium and PettingZoo envs do, but said once per env so a typo shows."""

    def test_warns_with_a_close_match_and_the_accepted_keys(self):
        message = (f"reset(options=...) ignores unknown key 'idx' (did you mean 'index'?); "
                   f"accepted keys: {sorted(RESET_OPTIONS)}")
        with pytest.warns(ResetOptionWarning, match=re.escape(message)):
            make().reset(seed=0, options={"idx": 1})

    def test_names_every_unknown_key_in_one_warning(self):
        with pytest.warns(ResetOptionWarning) as caught:
            make().reset(seed=0, options={"index": 1, "colour": 2, "options": 1})
        assert len(caught) == 1 and "unknown keys 'colour', 'options'; accepted keys: " in str(caught[0].message)

    def test_the_episode_is_the_one_without_the_key(self):
        def episode(options):
            messages = random_messages(5, 10)
            return play(make(), {"alice": scripted(messages[0::2]), "bob": scripted(messages[1::2])}, seed=5,
                        options=options)

        with pytest.warns(ResetOptionWarning):
            with_key = episode({"index": 2, "colour": "red"})
        assert data_equivalence(with_key, episode({"index": 2}))

    def test_warns_once_per_env_and_key(self, recwarn):
        env = make()
        env.reset(seed=0, options={"options": 1})
        env.reset(seed=1, options={"options": 1})
        env.reset(seed=2, options={"options": 2, "colour": 1})
        make().reset(seed=0, options={"options": 1})
        messages = [str(w.message) for w in recwarn if w.category is ResetOptionWarning]
        assert [m.split(";")[0] for m in messages] == [
            "reset(options=...) ignores unknown key 'options'",
            "reset(options=...) ignores unknown key 'colour'",
            "reset(options=...) ignores unknown key 'options'",
        ]

    def test_points_at_the_caller_of_reset(self):
        with pytest.warns(ResetOptionWarning) as caught:
            make().reset(options={"options": 1})
        assert caught[0].filename == __file__

    def test_a_wrong_value_beside_an_unknown_key_still_raises(self):
        with pytest.warns(ResetOptionWarning), \
                pytest.raises(ConfigError, match=re.escape("options['index'] must be an int")):
            make().reset(seed=0, options={"index": "3", "colour": 2})


class TestTextRepair:
    def test_a_lone_surrogate_is_replaced_and_flagged(self):
        env = make()
        env.reset(seed=0)
        infos = env.step({"alice": "bad \ud800 text"})[4]
        assert infos["alice"]["message_repaired"] is True and infos["bob"]["message_repaired"] is True
        message = env.state.messages[-1]
        assert message.text == "bad \ufffd text" and message.repaired
        message.text.encode("utf-8")
        assert env.step({"bob": "fine"})[4]["bob"]["message_repaired"] is False

    def test_a_split_surrogate_pair_is_joined(self):
        env = make()
        env.reset(seed=0)
        infos = env.step({"alice": {"text": "smile \ud83d\ude00", "token_ids": [1, 2]}})[4]
        assert env.state.messages[-1].text == "smile \U0001f600" and infos["alice"]["message_repaired"] is True
        assert infos["alice"]["message_tokens"] == 2

    def test_repaired_episodes_can_be_stored(self, tmp_path):
        from optima_agents.policies import ScriptedPolicy
        from optima_agents.rollout import rollout
        from optima_train.buffers import read_episodes, write_episodes

        records = rollout("synth-hop-ia", ScriptedPolicy(lambda o: "x \udfff y"), 3, env_kwargs={"max_turns": 2},
                          progress=False)
        write_episodes(tmp_path / "buf", records)
        assert [t.text for t in read_episodes(tmp_path / "buf")[0].turns] == ["x \ufffd y"] * 2


class TestDeterminism:
    def test_exact_replay(self):
        messages = random_messages(1, 20)
        first = play(make(), {"alice": scripted(messages[0::2]), "bob": scripted(messages[1::2])}, seed=11)
        second = play(make(), {"alice": scripted(messages[0::2]), "bob": scripted(messages[1::2])}, seed=11)
        assert data_equivalence(first, second)

    def test_seed_changes_instance_and_split(self):
        env = make()
        seen = set()
        for seed in range(5):
            env.reset(seed=seed)
            seen.add(env.state.instance.instance_id)
        assert len(seen) > 1

    def test_global_random_state_untouched(self):
        import random
        random.seed(0)
        np.random.seed(0)
        expected = (random.random(), np.random.rand())
        random.seed(0)
        np.random.seed(0)
        play(make(), {"alice": scripted(["a"] * 9), "bob": scripted(["b"] * 9)}, seed=3,
             options={"format_instruction": "sample"})
        assert (random.random(), np.random.rand()) == expected

    def test_format_instruction_sampled_from_env_rng(self):
        env = make()
        picks = []
        for _ in range(2):
            env.reset(seed=5, options={"format_instruction": "sample"})
            picks.append(env.state.format_instruction)
        assert picks[0] == picks[1] and picks[0] in env.format_pool
        assert picks[0] in env.state.system_prompts[0]


class TestSnapshot:
    def test_restore_rejects_other_tasks(self):
        env = make()
        env.reset(seed=0)
        other = optima_envs.make("synth-arith-debate")
        other.reset(seed=0)
        with pytest.raises(InvalidSnapshotError, match="cannot restore an env of"):
            env.restore(other.snapshot())

    def test_snapshots_are_independent(self):
        env = make()
        env.reset(seed=0)
        a = env.snapshot()
        env.step({"alice": "one"})
        b = env.snapshot()
        env.step({"bob": "two"})
        env.restore(a)
        assert env.state.turn == 0 and env.current_speaker == "alice"
        env.restore(b)
        assert [m.text for m in env.state.messages] == ["one"]

    def test_restore_also_restores_rng(self):
        env = make()
        env.reset(seed=0)
        snap = env.snapshot()
        env.reset()
        first = env.state.instance.instance_id
        env.restore(snap)
        env.reset()
        assert env.state.instance.instance_id == first


class TestRender:
    def test_plain_and_ansi(self):
        env = make()
        env.reset(seed=0)
        env.step({"alice": "hello"})
        plain = env.render()
        assert "[alice] (1 tok) hello" in plain and "\033[" not in plain
        env = make(render_mode="ansi")
        env.reset(seed=0)
        env.step({"alice": "hello"})
        assert "\033[" in env.render()

    def test_human_prints(self, capsys):
        env = make(render_mode="human")
        env.reset(seed=0)
        env.step({"alice": "hello"})
        assert "hello" in capsys.readouterr().out
