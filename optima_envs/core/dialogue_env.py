"""The one environment class every task runs in: a turn-based dialogue inside PettingZoo's
parallel API."""

from __future__ import annotations

import functools
import sys
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
from pettingzoo import ParallelEnv

from optima_envs.core import render as render_lib
from optima_envs.core.ablation import ablated_transcript, parse_ablation
from optima_envs.core.reset_args import check_options, check_seed
from optima_envs.core.spaces import DialogueObservationSpace, MessageSpace
from optima_envs.core.state import DialogueState, EnvSnapshot
from optima_envs.core.task import Task, instance_gold_for_info
from optima_envs.core.text import repair_text
from optima_envs.core.tokens import make_token_counter, read_token_ids
from optima_envs.core.types import Message
from optima_envs.errors import (
    ConfigError,
    EpisodeEndedError,
    InvalidActionError,
    InvalidSnapshotError,
    ResetNeededError,
    ScoringError,
)
from optima_envs.prompts.format_pool import FORMAT_POOL
from optima_envs.scoring.result import score_response

DEFAULT_AGENT_NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")

#: The infos keys the env writes itself; a task's `DialogueOutcome.details` may not reuse them.
RESERVED_INFO_KEYS = frozenset({
    "turn", "speaker", "next_speaker", "instance_id", "message_tokens", "tokens_exact", "agent_tokens",
    "total_tokens", "message_truncated", "message_repaired", "message_answer", "end_reason", "tokens",
    "answer", "gold", "score", "score_ok", "score_error",
})


class DialogueEnv(ParallelEnv):
    """Agents talk in turns to solve one task instance.

    ## Description
    Agents speak round-robin, `alice` first. Every observation names the agent whose turn it is
    (`speaker`); `step` takes that agent's message and ignores the other entries (which may be
    omitted). What the agents know, how their answers are parsed and scored, and when the
    dialogue ends come from the composed `Task`. Any message text is accepted: text over
    `max_message_chars` is cut (`message_truncated`), and text UTF-8 cannot encode (lone UTF-16
    surrogates) is repaired, a split surrogate pair joined and a lone one replaced by U+FFFD
    (`message_repaired`), so every recorded dialogue can be stored.

    ## Spaces
    Observation: `DialogueObservationSpace` (a dict: agent, role, question, evidence,
    system_prompt, transcript, speaker, turn, max_turns). Action: `MessageSpace` (a `str`, or
    `{"text": str, "token_ids": [int, ...]}` when the policy knows its tokens).

    ## Rewards
    0 on every turn; at the end every agent gets the task score of the final answer (the
    agents cooperate), or of the whole dialogue for a task with `score_dialogue` (a game).
    On a scoring failure (a metric that could not score) the reward is 0
    and `infos[agent]["score_ok"]` is False with the error, so evaluators can drop the episode
    instead of counting it wrong.

    ## Starting State
    `reset(seed=..., options=...)` picks an instance (`options["index"]`, or drawn from the
    env's private RNG), deals the evidence with the same RNG and writes each system prompt.
    `options["format_instruction"]` adds a format instruction: a string, an index into the
    format pool, or "sample" for one drawn from the RNG (the prompts without it are kept too, in
    `state.plain_system_prompts`, for training); `options["instance"]` plays a given
    `TaskInstance`; `options["ablation"]` removes or swaps the other agents' messages in the
    agents' views, for measuring what talking contributed (`optima_envs.core.ablation`). `seed` is a non-negative int or None; any other seed, or options that are not
    a dict, raise `ConfigError` listing what is accepted (`RESET_OPTIONS`); an unknown key is
    ignored with one `ResetOptionWarning` per env.

    ## Episode End
    Termination when the task's rule fires (`end_reason`, e.g. "agreed"); truncation at
    `max_turns` messages (`end_reason="max_turns"`, the last answer given is scored).

    ## Infos
    Each step, for every agent: `turn`, `speaker`, `message_tokens`, `tokens_exact`,
    `agent_tokens` (this agent's running total), `total_tokens`, `message_truncated`,
    `message_repaired`, `message_answer`. At the end also: `end_reason`, `score`, `score_ok`, `score_error`,
    `tokens` (the dialogue total), `answer`, `gold`, and a `score_dialogue` task's own
    details (e.g. each agent's utility in a game). No wall-clock values.

    ## Arguments
    task, env_id, version, num_agents (>= 2, or the task's fixed `num_agents`), agent_names,
    max_turns, tokenizer (HF tokenizer, callable, or None for a built-in word counter),
    max_message_chars, render_mode ("human", "ansi" or None), format_pool.
    """

    metadata = {"render_modes": ["human", "ansi"], "name": "dialogue", "is_parallelizable": True}

    def __init__(
        self,
        task: Task,
        *,
        env_id: str | None = None,
        version: int = 1,
        num_agents: int = 2,
        agent_names: Sequence[str] | None = None,
        max_turns: int | None = None,
        tokenizer: Any = None,
        max_message_chars: int = 8_000,
        render_mode: str | None = None,
        format_pool: Sequence[str] = FORMAT_POOL,
    ):
        names = tuple(agent_names) if agent_names is not None else DEFAULT_AGENT_NAMES[:num_agents]
        if agent_names is None and not 2 <= num_agents <= len(DEFAULT_AGENT_NAMES):
            raise ConfigError(
                f"num_agents must be between 2 and {len(DEFAULT_AGENT_NAMES)} with default names, "
                f"got {num_agents}; pass agent_names=[...] for more"
            )
        if len(names) < 2 or len(set(names)) != len(names):
            raise ConfigError(f"agent_names must be at least two distinct names, got {list(names)}")
        if task.num_agents is not None and len(names) != task.num_agents:
            raise ConfigError(f"{task.name} is played by exactly {task.num_agents} agents (one per seat), "
                              f"got {len(names)}: {list(names)}; pass num_agents={task.num_agents}")
        if max_turns is not None and max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
        if max_message_chars < 1:
            raise ConfigError(f"max_message_chars must be >= 1, got {max_message_chars}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ConfigError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")

        self.task = task
        self.env_id = env_id or task.name
        self.metadata = {**type(self).metadata, "name": self.env_id, "version": version}
        self.possible_agents = list(names)
        self.agents: list[str] = []
        self.max_turns = max_turns if max_turns is not None else task.max_turns
        self.max_message_chars = max_message_chars
        self.render_mode = render_mode
        self.format_pool = tuple(format_pool)
        self._count_tokens = make_token_counter(tokenizer)
        self._agent_index = {name: i for i, name in enumerate(names)}
        self._roles = task.prompts.roles(len(names))
        self._rng = np.random.default_rng()
        self._state: DialogueState | None = None

    # ------------------------------------------------------------------ spaces
    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> DialogueObservationSpace:
        return DialogueObservationSpace(tuple(self.possible_agents), self.max_turns)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> MessageSpace:
        return MessageSpace()

    # ------------------------------------------------------------------ API
    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None):
        check_seed(seed)
        options = check_options(options, owner=self)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        instance = options.get("instance")
        if instance is None:
            instance = self.task.source.get(self._pick_index(options.get("index")))
        evidence = self.task.split_evidence(instance, len(self.possible_agents), self._rng)
        format_instruction = self._pick_format_instruction(options.get("format_instruction"))
        ablation = parse_ablation(options["ablation"], self.possible_agents) if "ablation" in options else None

        def prompts(instruction: str | None) -> tuple[str, ...]:
            return tuple(
                self.task.prompts.system_prompt(
                    agent=name, agents=self.possible_agents, role=self._roles[i], instance=instance,
                    evidence=evidence[i], format_instruction=instruction,
                )
                for i, name in enumerate(self.possible_agents)
            )

        self._state = DialogueState(
            instance=instance, roles=self._roles, evidence=evidence, system_prompts=prompts(format_instruction),
            format_instruction=format_instruction, agent_tokens=(0,) * len(self.possible_agents), ablation=ablation,
            plain_system_prompts=prompts(None) if format_instruction else None,
        )
        self.agents = list(self.possible_agents)
        observations = self.observations_for(self._state)
        infos = {a: {"turn": 0, "speaker": self.current_speaker, "instance_id": instance.instance_id}
                 for a in self.agents}
        return observations, infos

    def step(self, actions: Mapping[str, Any]):
        state = self._require_state()
        if state.ended:
            raise EpisodeEndedError(
                f"step() called after the episode ended ({state.end_reason}); call reset() to start a new one"
            )
        speaker = self.current_speaker
        text, token_ids = self._read_action(actions, speaker)
        message, state = self._advance(state, speaker, text, token_ids)
        self._state = state
        observations = self.observations_for(state)
        infos = self.infos_for(state, message)
        ended = state.ended
        reward = float(state.outcome.get("score") or 0.0) if ended else 0.0
        rewards = {a: reward for a in self.possible_agents}
        terminated = ended and state.end_reason != "max_turns"
        terminations = {a: terminated for a in self.possible_agents}
        truncations = {a: ended and not terminated for a in self.possible_agents}
        if ended:
            self.agents = []
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        state = self._require_state()
        if self.render_mode == "human":
            print(render_lib.render_transcript(self, state, color=sys.stdout.isatty()))
            return None
        return render_lib.render_transcript(self, state, color=self.render_mode == "ansi")

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ tree search
    def snapshot(self) -> EnvSnapshot:
        """The full state, cheaply: the state is immutable, so this copies only the RNG state."""
        return EnvSnapshot(
            task_name=self.task.name, agents=tuple(self.possible_agents), max_turns=self.max_turns,
            state=self._state, rng_state=self._rng.bit_generator.state,
        )

    def restore(self, snapshot: EnvSnapshot) -> None:
        """Return exactly to a snapshot taken from an env of the same task and agents."""
        if not isinstance(snapshot, EnvSnapshot):
            raise InvalidSnapshotError(f"restore() needs an EnvSnapshot, got {type(snapshot).__name__}")
        mine = (self.task.name, tuple(self.possible_agents), self.max_turns)
        theirs = (snapshot.task_name, snapshot.agents, snapshot.max_turns)
        if mine != theirs:
            raise InvalidSnapshotError(f"snapshot of (task, agents, max_turns)={theirs} cannot restore an env of {mine}")
        self._state = snapshot.state
        self._rng.bit_generator.state = snapshot.rng_state
        live = snapshot.state is not None and not snapshot.state.ended
        self.agents = list(self.possible_agents) if live else []

    # ------------------------------------------------------------------ read-only views
    @property
    def state(self) -> DialogueState:
        """The current state (immutable)."""
        return self._require_state()

    @property
    def current_speaker(self) -> str | None:
        state = self._state
        if state is None or state.ended:
            return None
        return self.possible_agents[state.turn % len(self.possible_agents)]

    # ------------------------------------------------------------------ internals
    def _require_state(self) -> DialogueState:
        if self._state is None:
            raise ResetNeededError("call reset() before step(), render(), state or snapshot-based search")
        return self._state

    def _pick_index(self, index: Any) -> int:
        size = len(self.task.source)
        if index is None:
            return int(self._rng.integers(size))
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < size:
            raise ConfigError(f"options['index'] must be an int in [0, {size}), got {index!r}")
        return int(index)

    def _pick_format_instruction(self, choice: Any) -> str | None:
        if choice is None or isinstance(choice, str) and choice != "sample":
            return choice
        if choice == "sample":
            return self.format_pool[int(self._rng.integers(len(self.format_pool)))]
        if isinstance(choice, (int, np.integer)) and not isinstance(choice, bool) and 0 <= choice < len(self.format_pool):
            return self.format_pool[int(choice)]
        raise ConfigError(
            f"options['format_instruction'] must be a string, 'sample', or an index in "
            f"[0, {len(self.format_pool)}), got {choice!r}"
        )

    def _read_action(self, actions: Any, speaker: str) -> tuple[str, tuple[int, ...] | None]:
        if not isinstance(actions, Mapping):
            raise InvalidActionError(
                f"step() takes a dict {{agent: message}}, got {type(actions).__name__}; "
                f"it is {speaker!r}'s turn, e.g. env.step({{{speaker!r}: 'hello'}})"
            )
        strangers = [a for a in actions if a not in self._agent_index]
        if strangers:
            raise InvalidActionError(f"actions for agents not in this game: {strangers}; agents are {self.possible_agents}")
        if speaker not in actions:
            raise InvalidActionError(f"it is {speaker!r}'s turn but actions has no entry for {speaker!r}")
        action = actions[speaker]
        if isinstance(action, str):
            return action, None
        if isinstance(action, Mapping) and isinstance(action.get("text"), str):
            text = action["text"]
            return text, read_token_ids(action.get("token_ids"), text, speaker)
        raise InvalidActionError(
            f"{speaker!r}'s action must be a str or a mapping with a 'text' str "
            f"(and optional 'token_ids'), got {type(action).__name__}"
        )

    def _advance(self, state: DialogueState, speaker: str, text: str, token_ids):
        index = self._agent_index[speaker]
        truncated = len(text) > self.max_message_chars
        if truncated:
            text = text[: self.max_message_chars]
        text, repaired = repair_text(text)
        num_tokens = len(token_ids) if token_ids is not None else self._count_tokens(text)
        answer = self.task.extract(text).answer if state.roles[index].gives_answer else None
        message = Message(turn=state.turn, speaker=speaker, text=text, token_ids=token_ids,
                          num_tokens=num_tokens, answer=answer, truncated=truncated, repaired=repaired)
        end_reason = self.task.termination(state.messages, message)
        if end_reason is None and state.turn + 1 >= self.max_turns:
            end_reason = "max_turns"
        tokens = list(state.agent_tokens)
        tokens[index] += num_tokens
        new_state = replace(state, messages=(*state.messages, message), agent_tokens=tuple(tokens),
                            end_reason=end_reason)
        if end_reason is not None:
            new_state = replace(new_state, outcome=self._score(new_state))
        return message, new_state

    def _score(self, state: DialogueState) -> dict[str, Any]:
        """Score the last message that gave an answer (none: the empty text, a wrong answer), or
        the whole dialogue when the task has `score_dialogue`."""
        if self.task.score_dialogue is not None:
            return self._score_dialogue(state)
        final = next((m.text for m in reversed(state.messages) if m.answer is not None), "")
        result = score_response(final, state.instance, extractor=self.task.extract, metric=self.task.metric)
        return {"answer": result.answer, "gold": instance_gold_for_info(state.instance),
                "score": result.score, "score_ok": result.ok, "score_error": result.error}

    def _score_dialogue(self, state: DialogueState) -> dict[str, Any]:
        """As `score_response` does for one answer: a ScoringError is a recorded failure."""
        gold = instance_gold_for_info(state.instance)
        try:
            outcome = self.task.score_dialogue(state.instance, tuple(self.possible_agents), state.messages)
        except (ScoringError, TimeoutError) as error:
            return {"answer": None, "gold": gold, "score": None, "score_ok": False,
                    "score_error": f"{type(error).__name__}: {error}"}
        clash = sorted(RESERVED_INFO_KEYS & set(outcome.details))
        if clash:
            raise ConfigError(f"{self.task.name}: score_dialogue details use the env's own infos keys {clash}; "
                              "rename them")
        return {**outcome.details, "answer": outcome.answer, "gold": gold, "score": float(outcome.score),
                "score_ok": True, "score_error": None}

    def observations_for(self, state: DialogueState) -> dict[str, dict[str, Any]]:
        """Every agent's observation of a state (what `reset`/`step` return), e.g. after `restore`."""
        speaker = self.current_speaker
        question = state.instance.question
        observations = {}
        for i, agent in enumerate(self.possible_agents):
            observations[agent] = {
                "agent": agent,
                "role": state.roles[i].name,
                "question": question,
                "evidence": tuple(e.render() for e in state.evidence[i]),
                "system_prompt": state.system_prompts[i],
                "transcript": ablated_transcript(state.messages, agent, state.ablation),
                "speaker": speaker,
                "turn": state.turn,
                "max_turns": self.max_turns,
            }
        return observations

    def infos_for(self, state: DialogueState, message: Message) -> dict[str, dict[str, Any]]:
        """Every agent's infos for the step that added `message` and led to `state`."""
        common = {
            "turn": message.turn,
            "speaker": message.speaker,
            "next_speaker": self.current_speaker,
            "message_tokens": message.num_tokens,
            "tokens_exact": message.token_ids is not None,
            "total_tokens": state.total_tokens,
            "message_truncated": message.truncated,
            "message_repaired": message.repaired,
            "message_answer": message.answer,
        }
        if state.ended:
            common.update(end_reason=state.end_reason, tokens=state.total_tokens, **state.outcome)
        return {a: {**common, "agent_tokens": state.agent_tokens[i]} for i, a in enumerate(self.possible_agents)}
