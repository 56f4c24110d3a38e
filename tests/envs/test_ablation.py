"""`reset(options={"ablation": ...})`: the agents' views of each other's messages removed or
swapped, while the dialogue itself is recorded, costed and scored as played."""

from __future__ import annotations

import pytest

import optima_envs
from optima_envs.core.ablation import ablated_transcript, parse_ablation
from optima_envs.core.types import Message
from optima_envs.errors import ConfigError

AGENTS = ("alice", "bob")


def messages(*texts: str) -> tuple[Message, ...]:
    return tuple(Message(turn=i, speaker=AGENTS[i % 2], text=t, token_ids=None, num_tokens=1, answer=None)
                 for i, t in enumerate(texts))


class TestTranscript:
    def test_remove_keeps_only_the_viewers_own_turns(self):
        said = messages("a0", "b1", "a2")
        ablation = parse_ablation({"mode": "remove"}, AGENTS)
        assert [m["text"] for m in ablated_transcript(said, "alice", ablation)] == ["a0", "a2"]
        assert [m["text"] for m in ablated_transcript(said, "bob", ablation)] == ["b1"]

    def test_swap_shows_the_donors_text_at_the_same_turn_and_drops_turns_it_lacks(self):
        said = messages("a0", "b1", "a2")
        ablation = parse_ablation({"mode": "swap", "messages": [{"turn": 0, "text": "other a0"},
                                                                {"turn": 1, "text": "other b1"}]}, AGENTS)
        assert ablated_transcript(said, "bob", ablation) == (
            {"speaker": "alice", "text": "other a0"}, {"speaker": "bob", "text": "b1"})  # no donor turn 2
        assert [m["text"] for m in ablated_transcript(said, "alice", ablation)] == ["a0", "other b1", "a2"]

    def test_agents_limits_whose_view_changes(self):
        said = messages("a0", "b1")
        ablation = parse_ablation({"mode": "remove", "agents": ["bob"]}, AGENTS)
        assert [m["text"] for m in ablated_transcript(said, "alice", ablation)] == ["a0", "b1"]
        assert [m["text"] for m in ablated_transcript(said, "bob", ablation)] == ["b1"]

    def test_no_ablation_is_the_recorded_transcript(self):
        said = messages("a0", "b1")
        assert ablated_transcript(said, "bob", None) == tuple(m.as_observation() for m in said)


class TestOption:
    @pytest.mark.parametrize("value, match", [
        ("remove", "must be a dict"),
        ({"mode": "mute"}, "mode'] must be one of"),
        ({"mode": "remove", "messages": []}, "takes no messages"),
        ({"mode": "swap"}, "needs 'messages'"),
        ({"mode": "swap", "messages": [{"turn": -1, "text": "x"}]}, r"messages'\]\[0\] must be"),
        ({"mode": "swap", "messages": [{"turn": 0, "text": "x"}, {"turn": 0, "text": "y"}]}, "turn 0 twice"),
        ({"mode": "swap", "messages": [{"turn": 0, "text": "bad \ud800"}]}, "UTF-8 cannot encode"),
        ({"mode": "remove", "agents": ["carol"]}, "not agents of this env"),
        ({"mode": "remove", "who": 1}, "unknown key"),
    ])
    def test_bad_values_say_what_is_wrong(self, value, match):
        env = optima_envs.make("referential-game")
        with pytest.raises(ConfigError, match=match):
            env.reset(seed=0, options={"ablation": value})

    def test_the_env_records_and_scores_the_real_dialogue(self):
        env = optima_envs.make("referential-game")
        obs, _ = env.reset(seed=0, options={"index": 0, "ablation": {
            "mode": "swap", "messages": [{"turn": 0, "text": "The target is the tiny gold star."}]}})
        obs, rewards, *_ = env.step({"alice": "The target is the one I see."})
        assert obs["bob"]["transcript"] == ({"speaker": "alice", "text": "The target is the tiny gold star."},)
        assert obs["alice"]["transcript"] == ({"speaker": "alice", "text": "The target is the one I see."},)
        assert [m.text for m in env.state.messages] == ["The target is the one I see."]
        snapshot = env.snapshot()
        env.reset(seed=1)
        env.restore(snapshot)
        assert env.observations_for(env.state)["bob"]["transcript"][0]["text"] == "The target is the tiny gold star."
        gold = env.state.instance.gold
        _, rewards, terminations, *_ = env.step({"bob": f"<A>{gold}</A>"})
        assert rewards["bob"] == 1.0 and terminations["bob"]
