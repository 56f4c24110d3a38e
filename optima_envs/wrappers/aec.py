"""A native AEC view of a dialogue env: `agent_selection` is always the agent whose turn it is.

PettingZoo's generic `parallel_to_aec` would ask every agent for an action each turn; in a
turn-based dialogue only the speaker's counts, so this view asks only the speaker.
"""

from __future__ import annotations

from typing import Any, Mapping

from pettingzoo import AECEnv

from optima_envs.core.dialogue_env import DialogueEnv


class DialogueAECEnv(AECEnv):
    """Wraps a `DialogueEnv`; snapshot/restore/render pass through to it."""

    def __init__(self, env: DialogueEnv):
        super().__init__()
        self.env = env
        self.metadata = env.metadata
        self.possible_agents = list(env.possible_agents)
        self.render_mode = env.render_mode
        self._observations: dict[str, Any] = {}

    def observation_space(self, agent: str):
        return self.env.observation_space(agent)

    def action_space(self, agent: str):
        return self.env.action_space(agent)

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> None:
        self._observations, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = dict(infos)
        self.agent_selection = self.env.current_speaker
        self._skip_agent_selection = None

    def observe(self, agent: str) -> dict[str, Any]:
        return self._observations[agent]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self._observations, rewards, terminations, truncations, infos = self.env.step({agent: action})
        self.rewards = {a: rewards[a] for a in self.agents}
        self.terminations = {a: terminations[a] for a in self.agents}
        self.truncations = {a: truncations[a] for a in self.agents}
        self.infos = {a: infos[a] for a in self.agents}
        self._accumulate_rewards()
        speaker = self.env.current_speaker
        self.agent_selection = speaker if speaker is not None else self.agents[0]

    def render(self) -> str | None:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def snapshot(self):
        return self.env.snapshot()

    def restore(self, snapshot) -> None:
        """Restore the dialogue and rebuild this view's bookkeeping as after the same turns."""
        self.env.restore(snapshot)
        state = self.env.state
        self._observations = self.env.observations_for(state)
        self.agents = list(self.env.possible_agents)
        ended = state.ended
        terminated = ended and state.end_reason != "max_turns"
        reward = float(state.outcome.get("score") or 0.0) if ended else 0.0
        self.rewards = dict.fromkeys(self.agents, reward)
        self._cumulative_rewards = dict.fromkeys(self.agents, reward)
        self.terminations = dict.fromkeys(self.agents, terminated)
        self.truncations = dict.fromkeys(self.agents, ended and not terminated)
        self.infos = (self.env.infos_for(state, state.messages[-1]) if state.messages
                      else {a: {"turn": 0, "speaker": self.env.current_speaker} for a in self.agents})
        self.agent_selection = self.env.current_speaker or self.agents[0]
        self._skip_agent_selection = None
