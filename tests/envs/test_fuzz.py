"""Any string is a valid action: arbitrary Unicode and sizes never crash the env."""

from hypothesis import given, settings
from hypothesis import strategies as st

import optima_envs

ENVS = {env_id: optima_envs.make(env_id, max_message_chars=5_000) for env_id in ("synth-hop-ia", "synth-arith-debate")}


@settings(max_examples=150, deadline=None)
@given(env_id=st.sampled_from(sorted(ENVS)), messages=st.lists(st.text(max_size=300), min_size=1, max_size=12),
       seed=st.integers(0, 2**32 - 1))
def test_arbitrary_unicode_messages(env_id, messages, seed):
    env = ENVS[env_id]
    env.reset(seed=seed)
    for text in messages:
        if not env.agents:
            break
        infos = env.step({env.current_speaker: text})[4]
        info = infos["alice"]
        assert info["message_tokens"] >= 0 and isinstance(env.render(), str)
        if not env.agents:
            assert info["score_ok"] is False or 0.0 <= info["score"] <= 1.0


@settings(max_examples=5, deadline=None)
@given(size=st.sampled_from([0, 1, 100_000, 1_000_000]), char=st.characters())
def test_huge_messages_are_truncated(size, char):
    env = ENVS["synth-hop-ia"]
    env.reset(seed=0)
    infos = env.step({"alice": char * size})[4]
    assert infos["alice"]["message_truncated"] == (size > 5_000)
