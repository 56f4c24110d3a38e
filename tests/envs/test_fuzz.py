"""Any string is a valid action: arbitrary Unicode and sizes never crash the env."""

from hypothesis import given, settings
from hypothesis import strategies as st

import optima_envs
from optima_envs.core.tokens import default_token_count

ENVS = {env_id: optima_envs.make(env_id, max_message_chars=5_000) for env_id in ("synth-hop-ia", "synth-arith-debate")}


@settings(max_examples=150, deadline=None)
@given(env_id=st.sampled_from(sorted(ENVS)), messages=st.lists(st.text(max_size=300), min_size=1, max_size=12),
       seed=st.integers(0, 2**32 - 1))
def test_arbitrary_unicode_messages(env_id, messages, seed):
    """Every step's bookkeeping is exact: the stored text, the token counts, whose turn it is,
    the transcript every agent sees, and a final score that is either in [0, 1] or a recorded
    failure with its reason."""
    env = ENVS[env_id]
    env.reset(seed=seed)
    spent = {agent: 0 for agent in env.possible_agents}
    for turn, text in enumerate(messages):
        if not env.agents:
            break
        speaker = env.current_speaker
        observations, rewards, terminations, truncations, infos = env.step({speaker: text})
        stored = text[:5_000]
        cost = default_token_count(stored)
        spent[speaker] += cost
        message = env.state.messages[-1]
        assert (message.speaker, message.text, message.turn) == (speaker, stored, turn)
        for agent, info in infos.items():
            assert info["message_tokens"] == cost and info["tokens_exact"] is False
            assert info["agent_tokens"] == spent[agent] and info["total_tokens"] == sum(spent.values())
            assert info["message_truncated"] == (len(text) > 5_000)
        for agent, observation in observations.items():
            assert observation["transcript"][-1] == {"speaker": speaker, "text": stored}
            assert len(observation["transcript"]) == turn + 1 and observation["turn"] == turn + 1
        assert isinstance(env.render(), str)
        if env.agents:
            assert not any(terminations.values()) and not any(truncations.values())
            assert set(rewards.values()) == {0.0}
            assert env.current_speaker in env.possible_agents
        else:
            info = infos["alice"]
            truncated = info["end_reason"] == "max_turns"
            assert not truncated or turn + 1 == env.max_turns
            assert set(truncations.values()) == {truncated} and set(terminations.values()) == {not truncated}
            assert info["tokens"] == sum(spent.values())
            if info["score_ok"]:
                assert 0.0 <= info["score"] <= 1.0 and info["score_error"] is None
                assert set(rewards.values()) == {info["score"]}
            else:
                assert isinstance(info["score_error"], str) and info["score_error"]


@settings(max_examples=5, deadline=None)
@given(size=st.sampled_from([0, 1, 100_000, 1_000_000]), char=st.characters())
def test_huge_messages_are_truncated(size, char):
    env = ENVS["synth-hop-ia"]
    env.reset(seed=0)
    infos = env.step({"alice": char * size})[4]
    assert infos["alice"]["message_truncated"] == (size > 5_000)
