import re

import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import api_test, seed_test

import optima_envs
from optima_envs.core.reset_args import ResetOptionWarning
from optima_envs.errors import ConfigError
from optima_envs.test import share_evidence_then
from optima_envs.wrappers import DialogueAECEnv, SingleAgentWrapper


class TestAEC:
    @pytest.mark.parametrize("env_id", ["synth-hop-ia", "synth-arith-debate"])
    def test_pettingzoo_api_and_seed_tests(self, env_id, capsys):
        with pytest.warns(ResetOptionWarning, match=re.escape("ignores unknown key 'options'")):  # its probe
            api_test(DialogueAECEnv(optima_envs.make(env_id)), num_cycles=30)
        seed_test(lambda: DialogueAECEnv(optima_envs.make(env_id)), num_cycles=30)

    def test_agent_selection_is_the_speaker(self):
        env = DialogueAECEnv(optima_envs.make("synth-hop-ia", max_turns=3))
        env.reset(seed=0)
        order = []
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, info = env.last()
            order.append(agent)
            env.step(None if terminated or truncated else f"msg from {agent}")
        assert order[:3] == ["alice", "bob", "alice"] and env.agents == []

    def test_restore_rebuilds_view(self):
        env = DialogueAECEnv(optima_envs.make("synth-hop-ia"))
        env.reset(seed=0)
        snap = env.snapshot()
        env.step("hello")
        env.restore(snap)
        assert env.agent_selection == "alice" and env.observe("alice")["transcript"] == ()


class TestSingleAgent:
    def make(self):
        base = optima_envs.make("synth-hop-ia")
        base.reset(seed=0, options={"index": 0})
        gold = base.state.instance.gold
        env = SingleAgentWrapper(optima_envs.make("synth-hop-ia"), agent="bob",
                                 others={"alice": share_evidence_then(gold)})
        return env, gold

    def test_gymnasium_check_env(self):
        env, _ = self.make()
        check_env(env, skip_render_check=True)

    def test_plays_others_and_pays_final_reward(self):
        env, gold = self.make()
        obs, info = env.reset(seed=0, options={"index": 0})
        assert obs["agent"] == "bob" and obs["speaker"] == "bob" and len(obs["transcript"]) == 1
        obs, reward, terminated, truncated, info = env.step("I know things.")
        assert not terminated and reward == 0.0
        obs, reward, terminated, truncated, info = env.step(f"<A>{gold}</A>")
        assert terminated and reward == 1.0 and info["end_reason"] == "agreed"

    def test_missing_fixed_policy(self):
        with pytest.raises(ConfigError, match=re.escape("no fixed policy for ['carol']")):
            SingleAgentWrapper(optima_envs.make("synth-hop-ia", num_agents=3), agent="alice",
                               others={"bob": lambda o: "x"})
