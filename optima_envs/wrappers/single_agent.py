"""A single-agent Gymnasium view: you play one agent, fixed policies play the others.

This is how standard single-agent RL code plugs in: `reset` and `step` return only your
agent's observation, and the other agents' turns happen inside `step`.

    env = SingleAgentWrapper(optima_envs.make("synth-hop-ia"), agent="alice",
                             others={"bob": my_bob_policy})
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("I know that ...")
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import gymnasium as gym

from optima_envs.core.dialogue_env import DialogueEnv
from optima_envs.errors import ConfigError

FixedPolicy = Callable[[Mapping[str, Any]], Any]
"""Takes an agent's observation dict and returns its message (a str or {"text", "token_ids"})."""


class SingleAgentWrapper(gym.Env):
    """Gymnasium `Env` in which `agent` acts and `others[name]` answer for every other agent.

    Reward: the controlled agent's reward summed over its own turn and the others' turns that
    follow it (the final task score arrives on the step that ends the dialogue).
    """

    metadata = {"render_modes": ["human", "ansi"]}

    def __init__(self, env: DialogueEnv, agent: str, others: Mapping[str, FixedPolicy]):
        missing = sorted(set(env.possible_agents) - {agent} - set(others))
        if agent not in env.possible_agents:
            raise ConfigError(f"agent {agent!r} is not in this env; agents are {env.possible_agents}")
        if missing:
            raise ConfigError(f"no fixed policy for {missing}; pass others={{name: policy}} for every other agent")
        self.env, self.agent, self.others = env, agent, dict(others)
        self.observation_space = env.observation_space(agent)
        self.action_space = env.action_space(agent)
        self.render_mode = env.render_mode
        self.metadata = {**self.metadata, **env.metadata}

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        super().reset(seed=seed)
        observations, infos = self.env.reset(seed=seed, options=options)
        observations, reward, ended, infos = self._play_others(observations, infos)
        return observations[self.agent], infos[self.agent]

    def step(self, action: Any):
        observations, rewards, terminations, truncations, infos = self.env.step({self.agent: action})
        reward = rewards[self.agent]
        if not (terminations[self.agent] or truncations[self.agent]):
            observations, extra, _, infos = self._play_others(observations, infos)
            reward += extra
        state = self.env.state
        terminated = state.ended and state.end_reason != "max_turns"
        truncated = state.ended and not terminated
        return observations[self.agent], reward, terminated, truncated, infos[self.agent]

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def _play_others(self, observations, infos):
        """Let the fixed policies speak until it is our turn or the dialogue ends."""
        reward = 0.0
        while self.env.current_speaker not in (None, self.agent):
            speaker = self.env.current_speaker
            message = self.others[speaker](observations[speaker])
            observations, rewards, _, _, infos = self.env.step({speaker: message})
            reward += rewards[self.agent]
        return observations, reward, self.env.current_speaker is None, infos
