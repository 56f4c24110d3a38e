"""The contract checks can fail: an episode too short to compare, or an env whose restore is
broken, is reported instead of passing silently."""

from __future__ import annotations

import pytest

import optima_envs
from optima_envs.core.reset_args import ResetOptionWarning
from optima_envs.test import check_parallel_api, check_snapshot_roundtrip


def test_the_parallel_api_check_keeps_pettingzoos_expected_output_to_itself(recwarn, capsys):
    check_parallel_api(optima_envs.make("synth-hop-ia"), num_cycles=20)
    assert not [w for w in recwarn if w.category is ResetOptionWarning] and not capsys.readouterr().out


def test_passes_on_a_real_env():
    check_snapshot_roundtrip(optima_envs.make("synth-hop-ia"), at_turn=2)


@pytest.mark.parametrize("max_turns, at_turn, message", [
    (2, 3, "the episode ended after 2 message(s), before the snapshot at turn 3"),
    (2, 2, "the episode ended at turn 2, the snapshot turn"),
])
def test_an_episode_that_ends_before_the_snapshot_fails(max_turns, at_turn, message):
    with pytest.raises(AssertionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_snapshot_roundtrip(optima_envs.make("synth-hop-ia", max_turns=max_turns), at_turn=at_turn)


def test_a_restore_that_does_not_return_to_the_snapshot_fails():
    env = optima_envs.make("synth-hop-ia", num_agents=2)
    real_restore = env.restore

    def restore_then_step(snapshot):
        real_restore(snapshot)
        env.step({env.current_speaker: "one message too many"})

    env.restore = restore_then_step
    with pytest.raises(AssertionError, match="observations after restore differ"):
        check_snapshot_roundtrip(env, at_turn=1)
