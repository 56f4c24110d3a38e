"""The conformance suite: every registered id passes PettingZoo's tests and ours."""

import re

import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test

import optima_envs
from optima_envs.core.reset_args import ResetOptionWarning
from optima_envs.errors import ConfigError
from optima_envs.test import check_parallel_api, check_seed_determinism, check_snapshot_roundtrip, env_kwargs

ALL_IDS = sorted(optima_envs.list_envs())


@pytest.mark.parametrize("env_id", ALL_IDS)
class TestEveryEnv:
    def test_pettingzoo_api_test_as_shipped(self, env_id, capsys):
        env = optima_envs.make(env_id, **env_kwargs(env_id))
        with pytest.warns(ResetOptionWarning, match=re.escape("ignores unknown key 'options'")):  # its probe
            parallel_api_test(env, num_cycles=20)
        assert "Passed Parallel API test" in capsys.readouterr().out

    def test_pettingzoo_seed_test_as_shipped(self, env_id):
        parallel_seed_test(lambda: optima_envs.make(env_id, **env_kwargs(env_id)), num_cycles=20)

    def test_full_episode_seed_determinism(self, env_id):
        check_seed_determinism(lambda: optima_envs.make(env_id, **env_kwargs(env_id)))

    def test_snapshot_roundtrip(self, env_id):
        for turn in (0, 1, 2):
            check_snapshot_roundtrip(optima_envs.make(env_id, **env_kwargs(env_id)), at_turn=turn)

    def test_three_agents(self, env_id):
        seats = optima_envs.make(env_id, **env_kwargs(env_id)).task.num_agents
        if seats not in (None, 3):  # a game declares its number of seats and refuses any other
            with pytest.raises(ConfigError, match=re.escape(f"is played by exactly {seats} agents")):
                optima_envs.make(env_id, num_agents=3, **env_kwargs(env_id))
            return
        env = optima_envs.make(env_id, num_agents=3, **env_kwargs(env_id))
        check_parallel_api(env)
        env.reset(seed=3)
        speakers = []
        while env.agents and len(speakers) < 4:
            speakers.append(env.current_speaker)
            env.step({env.current_speaker: "hello"})
        assert speakers[:3] == ["alice", "bob", "carol"]
