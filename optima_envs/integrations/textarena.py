"""TextArena games as Optima envs: a two-player (or n-player) TextArena game inside PettingZoo's
parallel API, with the same token costs, snapshots and records as `DialogueEnv`, so the rollout
engine, the rewards and the trainers play it like any Optima task.

    from optima_envs.integrations.textarena import make_textarena_env
    env = make_textarena_env("SimpleNegotiation-v0-short")
    records = RolloutEngine(env, policy).run(8)

What each agent sees: its system prompt is the game's opening prompt for its seat; its transcript
holds every player's message (as the player wrote it, before TextArena's action wrappers) and
the game's own messages (board, offers, invalid-move notices) under the speaker `"game"`, in the
order the game produced them, only those the game sent to that seat. Whose turn it is comes from
the game (`state.current_player_id`), so a player who made an invalid move speaks again.

Rewards: 0 on every turn; at the end each agent gets its own game reward (TextArena's -1 / 0 / 1
for loss / draw / win). The episode's `score` (what records, rewards and the leaderboard read) is
the reward of seat `score_seat` mapped to [0, 1]: 1 for a win, 0.5 for a draw, 0 for a loss.
A game cut by `max_turns` before it ended counts as a draw.

Snapshots: TextArena games are mutable objects, so a snapshot holds a deep copy of the game (and
`restore` copies it again, so one snapshot can be restored many times). TextArena draws from
Python's global `random`; each episode here draws from its own saved `random` state, so episodes
interleaved by the rollout engine do not disturb each other and a seed replays exactly. A game
that draws from numpy's global RNG instead is not isolated this way.
"""

from __future__ import annotations

import copy
import functools
import importlib
import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from optima_envs.core import render as render_lib
from optima_envs.core.dialogue_env import DEFAULT_AGENT_NAMES
from optima_envs.core.reset_args import check_options, check_seed
from optima_envs.core.spaces import AgentName, DialogueObservationSpace, MessageSpace, UnicodeText
from optima_envs.core.state import DialogueState
from optima_envs.core.task import Role
from optima_envs.core.text import repair_text
from optima_envs.core.tokens import make_token_counter, read_token_ids
from optima_envs.core.types import Message, TaskInstance
from optima_envs.errors import (
    ConfigError,
    EpisodeEndedError,
    InvalidActionError,
    InvalidSnapshotError,
    ResetNeededError,
)

__all__ = ["GAME_SPEAKER", "TextArenaEnv", "TextArenaSnapshot", "make_textarena_env"]

#: The speaker name of the game's own messages in the agents' transcripts.
GAME_SPEAKER = "game"

_UNSUPPORTED_OPTIONS = ("instance", "format_instruction", "ablation")


@dataclass(frozen=True)
class _Entry:
    speaker: str
    text: str


@dataclass(frozen=True)
class TextArenaSnapshot:
    """What `TextArenaEnv.snapshot()` returns: the dialogue state, each agent's view, a private
    copy of the game and the episode's `random` state."""

    env_id: str
    agents: tuple[str, ...]
    max_turns: int
    state: DialogueState | None
    views: tuple[tuple[_Entry, ...], ...]
    game: Any
    py_random: Any
    rng_state: Mapping[str, Any]


class TextArenaEnv(ParallelEnv):
    """A TextArena game as a PettingZoo ParallelEnv the Optima rollout engine can play.

    Args:
        make_game: builds a fresh TextArena env (e.g. `lambda: textarena.make("TicTacToe-v0")`).
        env_id: the name in records and renders.
        num_players: the game's number of seats.
        agent_names: one name per seat (default `alice`, `bob`, ...).
        tokenizer: HF tokenizer, callable, or None for the built-in word counter (as `DialogueEnv`).
        max_turns: the most messages in one episode (invalid moves count); the game is cut there.
        max_message_chars: longer messages are cut (`message_truncated`).
        score_seat: the seat whose game reward is the episode's score.
        render_mode: "ansi" or None.

    Reset options: `index` picks the game's deal (the TextArena seed); without it the deal is
    drawn from the env's RNG (seeded by `reset(seed=...)`). The dialogue-only options
    (`instance`, `format_instruction`, `ablation`) raise `ConfigError`.
    """

    metadata = {"render_modes": ["ansi"], "name": "textarena", "is_parallelizable": True}

    def __init__(self, make_game: Callable[[], Any], *, env_id: str, num_players: int = 2,
                 agent_names: Sequence[str] | None = None, tokenizer: Any = None, max_turns: int = 64,
                 max_message_chars: int = 8_000, score_seat: int = 0, render_mode: str | None = None):
        names = tuple(agent_names) if agent_names is not None else DEFAULT_AGENT_NAMES[:num_players]
        if len(names) != num_players or len(set(names)) != num_players or GAME_SPEAKER in names:
            raise ConfigError(f"{env_id} has {num_players} seats: pass {num_players} distinct agent names other "
                              f"than {GAME_SPEAKER!r}, got {list(names)}")
        if max_turns < 1 or max_message_chars < 1:
            raise ConfigError(f"max_turns and max_message_chars must be >= 1, got {max_turns} and {max_message_chars}")
        if not 0 <= score_seat < num_players:
            raise ConfigError(f"score_seat must be a seat in [0, {num_players}), got {score_seat}")
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be 'ansi' or None, got {render_mode!r}")
        self.make_game = make_game
        self.env_id = env_id
        self.metadata = {**type(self).metadata, "name": env_id, "version": 1}
        self.possible_agents = list(names)
        self.agents: list[str] = []
        self.num_players = num_players
        self.max_turns = max_turns
        self.max_message_chars = max_message_chars
        self.score_seat = score_seat
        self.render_mode = render_mode
        self._count_tokens = make_token_counter(tokenizer)
        self._rng = np.random.default_rng()
        self._state: DialogueState | None = None
        self._views: tuple[tuple[_Entry, ...], ...] = ()
        self._game: Any = None
        self._py_random: Any = None

    # ------------------------------------------------------------------ spaces
    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> DialogueObservationSpace:
        space = DialogueObservationSpace(tuple(self.possible_agents), self.max_turns)
        speakers = AgentName((*self.possible_agents, GAME_SPEAKER))
        space["transcript"] = spaces.Sequence(spaces.Dict({"speaker": speakers, "text": UnicodeText()}), stack=False)
        return space

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> MessageSpace:
        return MessageSpace()

    # ------------------------------------------------------------------ API
    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None):
        check_seed(seed)
        options = check_options(options, owner=self)
        unsupported = sorted(set(options) & set(_UNSUPPORTED_OPTIONS))
        if unsupported:
            raise ConfigError(f"{self.env_id} is a TextArena game: reset takes options['index'] (the game's deal) "
                              f"only, not {unsupported}")
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        game_seed = self._pick_deal(options.get("index"))
        game = self.make_game()
        _, self._py_random = _isolated(random.Random(game_seed).getstate(),
                                       lambda: game.reset(num_players=self.num_players, seed=game_seed))
        self._game = game
        prompts, views = self._drain_opening()
        instance = TaskInstance(instance_id=f"{self.env_id}/{game_seed}", question=f"{self.env_id}, deal {game_seed}",
                                gold=None, meta={"game_seed": game_seed})
        roles = tuple(Role(f"player {i}", f"seat {i} of {self.env_id}", gives_answer=False)
                      for i in range(self.num_players))
        self._state = DialogueState(instance=instance, roles=roles, evidence=((),) * self.num_players,
                                    system_prompts=prompts, format_instruction=None,
                                    agent_tokens=(0,) * self.num_players)
        self._views = views
        self.agents = list(self.possible_agents)
        infos = {a: {"turn": 0, "speaker": self.current_speaker, "instance_id": instance.instance_id}
                 for a in self.agents}
        return self.observations_for(self._state), infos

    def step(self, actions: Mapping[str, Any]):
        state = self._require_state()
        if state.ended:
            raise EpisodeEndedError(f"step() called after the episode ended ({state.end_reason}); call reset()")
        speaker = self.current_speaker
        text, token_ids = _read_action(actions, speaker, self.possible_agents)
        message = self._message(state, speaker, text, token_ids)
        seat = self.possible_agents.index(speaker)
        (done, _), self._py_random = _isolated(self._py_random, lambda: self._game.step(message.text))
        self._views = self._drain_step(seat, message.text)
        tokens = list(state.agent_tokens)
        tokens[seat] += message.num_tokens
        state = replace(state, messages=(*state.messages, message), agent_tokens=tuple(tokens))
        if done or state.turn >= self.max_turns:
            state = self._end(state, finished=bool(done))
        self._state = state
        rewards = {a: 0.0 for a in self.possible_agents}
        if state.ended:
            rewards = {a: float(r) for a, r in state.outcome["game_rewards"].items()}
            self.agents = []
        terminated = state.ended and state.end_reason != "max_turns"
        terminations = {a: terminated for a in self.possible_agents}
        truncations = {a: state.ended and not terminated for a in self.possible_agents}
        return self.observations_for(state), rewards, terminations, truncations, self._infos(state, message)

    def render(self) -> str | None:
        return render_lib.render_transcript(self, self._require_state(), color=False)

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ tree search
    def snapshot(self) -> TextArenaSnapshot:
        """The full state; the game is deep-copied (TextArena games are mutable)."""
        return TextArenaSnapshot(env_id=self.env_id, agents=tuple(self.possible_agents), max_turns=self.max_turns,
                                 state=self._state, views=self._views, game=copy.deepcopy(self._game),
                                 py_random=self._py_random, rng_state=self._rng.bit_generator.state)

    def restore(self, snapshot: TextArenaSnapshot) -> None:
        """Return exactly to a snapshot of an env of the same game and agents."""
        if not isinstance(snapshot, TextArenaSnapshot):
            raise InvalidSnapshotError(f"restore() needs a TextArenaSnapshot, got {type(snapshot).__name__}")
        mine = (self.env_id, tuple(self.possible_agents), self.max_turns)
        theirs = (snapshot.env_id, snapshot.agents, snapshot.max_turns)
        if mine != theirs:
            raise InvalidSnapshotError(f"snapshot of (game, agents, max_turns)={theirs} cannot restore an env of {mine}")
        self._state, self._views, self._py_random = snapshot.state, snapshot.views, snapshot.py_random
        self._game = copy.deepcopy(snapshot.game)
        self._rng.bit_generator.state = snapshot.rng_state
        live = snapshot.state is not None and not snapshot.state.ended
        self.agents = list(self.possible_agents) if live else []

    # ------------------------------------------------------------------ read-only views
    @property
    def state(self) -> DialogueState:
        """The current dialogue state (immutable): the players' messages, token costs, outcome."""
        return self._require_state()

    @property
    def current_speaker(self) -> str | None:
        if self._state is None or self._state.ended:
            return None
        return self.possible_agents[int(self._game.state.current_player_id)]

    def observations_for(self, state: DialogueState) -> dict[str, dict[str, Any]]:
        """Every agent's observation of the current state (the keys `DialogueEnv` observations have)."""
        speaker = self.current_speaker
        return {agent: {"agent": agent, "role": state.roles[i].name, "question": state.instance.question,
                        "evidence": (), "system_prompt": state.system_prompts[i],
                        "transcript": tuple({"speaker": e.speaker, "text": e.text} for e in self._views[i]),
                        "speaker": speaker, "turn": state.turn, "max_turns": self.max_turns}
                for i, agent in enumerate(self.possible_agents)}

    # ------------------------------------------------------------------ internals
    def _require_state(self) -> DialogueState:
        if self._state is None:
            raise ResetNeededError("call reset() before step(), render(), state or snapshot")
        return self._state

    def _pick_deal(self, index: Any) -> int:
        if index is None:
            return int(self._rng.integers(2**31))
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
            raise ConfigError(f"options['index'] (the game's deal) must be a non-negative int, got {index!r}")
        return int(index)

    def _message(self, state: DialogueState, speaker: str, text: str, token_ids: tuple[int, ...] | None) -> Message:
        truncated = len(text) > self.max_message_chars
        text, repaired = repair_text(text[: self.max_message_chars])
        num_tokens = len(token_ids) if token_ids is not None else self._count_tokens(text)
        return Message(turn=state.turn, speaker=speaker, text=text, token_ids=token_ids, num_tokens=num_tokens,
                       answer=None, truncated=truncated, repaired=repaired)

    def _queues(self) -> list[list[tuple]]:
        """Take what the game queued for each seat since the last call (and empty its queues)."""
        observations = self._game.state.observations
        taken = [list(observations.get(seat, ())) for seat in range(self.num_players)]
        for seat in range(self.num_players):
            observations[seat] = []
        return taken

    def _drain_opening(self) -> tuple[tuple[str, ...], tuple[tuple[_Entry, ...], ...]]:
        """The game's opening prompt for each seat (its system prompt) and any other opening messages."""
        prompt_type = _observation_type("PROMPT")
        prompts, views = [], []
        for queue in self._queues():
            prompts.append("\n\n".join(text for _, text, kind in queue if kind == prompt_type))
            views.append(tuple(_Entry(GAME_SPEAKER, text) for _, text, kind in queue if kind != prompt_type))
        return tuple(prompts), tuple(views)

    def _drain_step(self, seat: int, text: str) -> tuple[tuple[_Entry, ...], ...]:
        """Each seat's view after `seat` said `text`: its own words stand for TextArena's copy of the
        action (which action wrappers may have reformatted), the rest as the game sent it."""
        action_type = _observation_type("PLAYER_ACTION")
        views = []
        for view, queue in zip(self._views, self._queues()):
            added = []
            for sender, message, kind in queue:
                if kind == action_type and sender == seat:
                    added.append(_Entry(self.possible_agents[seat], text))
                elif kind == action_type and 0 <= sender < self.num_players:
                    added.append(_Entry(self.possible_agents[sender], message))
                else:
                    added.append(_Entry(GAME_SPEAKER, message))
            views.append((*view, *added))
        return tuple(views)

    def _end(self, state: DialogueState, *, finished: bool) -> DialogueState:
        game = self._game.state
        raw = game.rewards if finished and game.rewards else {}
        rewards = {agent: float(raw.get(seat, 0.0)) for seat, agent in enumerate(self.possible_agents)}
        info = getattr(game, "game_info", {}) or {}
        invalid = any(bool(info.get(seat, {}).get("invalid_move")) for seat in range(self.num_players))
        end_reason = "max_turns" if not finished else "invalid_move" if invalid else "game_over"
        seat_reward = rewards[self.possible_agents[self.score_seat]]
        reason = next((str(v["reason"]) for v in info.values() if isinstance(v, Mapping) and v.get("reason")), None)
        outcome = {"answer": None, "gold": None, "score": min(1.0, max(0.0, (seat_reward + 1.0) / 2.0)),
                   "score_ok": True, "score_error": None, "game_rewards": rewards, "game_reason": reason}
        return replace(state, end_reason=end_reason, outcome=outcome)

    def _infos(self, state: DialogueState, message: Message) -> dict[str, dict[str, Any]]:
        common = {"turn": message.turn, "speaker": message.speaker, "next_speaker": self.current_speaker,
                  "message_tokens": message.num_tokens, "tokens_exact": message.token_ids is not None,
                  "total_tokens": state.total_tokens, "message_truncated": message.truncated,
                  "message_repaired": message.repaired, "message_answer": None}
        if state.ended:
            common.update(end_reason=state.end_reason, tokens=state.total_tokens, **state.outcome)
        return {a: {**common, "agent_tokens": state.agent_tokens[i]} for i, a in enumerate(self.possible_agents)}


def make_textarena_env(game_id: str, *, num_players: int = 2, agent_names: Sequence[str] | None = None,
                       tokenizer: Any = None, max_turns: int = 64, max_message_chars: int = 8_000,
                       score_seat: int = 0, render_mode: str | None = None,
                       game_kwargs: Mapping[str, Any] | None = None) -> TextArenaEnv:
    """A registered TextArena game (`textarena.make(game_id, **game_kwargs)`, with the game's own
    default wrappers) as an Optima env; see `TextArenaEnv` for the other arguments. `max_turns`
    caps the episode's messages; the game's own options (its turn limit too) go in `game_kwargs`.

    Raises:
        ConfigError: textarena is not installed, or the game id is unknown.
    """
    try:
        textarena = importlib.import_module("textarena")
    except ModuleNotFoundError as error:
        raise ConfigError("TextArena games need the textarena package: pip install 'optima[integrations]'") from error
    if game_id not in textarena.envs.registration.ENV_REGISTRY:
        raise ConfigError(f"textarena has no game {game_id!r}; list them with textarena.pprint_registry_detailed()")
    kwargs = dict(game_kwargs or {})
    return TextArenaEnv(lambda: textarena.make(game_id, **kwargs), env_id=game_id, num_players=num_players,
                        agent_names=agent_names, tokenizer=tokenizer, max_turns=max_turns,
                        max_message_chars=max_message_chars, score_seat=score_seat, render_mode=render_mode)


def _isolated(saved: Any, fn: Callable[[], Any]) -> tuple[Any, Any]:
    """Run `fn` with Python's global `random` at `saved`; return its result and the state it left,
    with the caller's own `random` state put back."""
    outer = random.getstate()
    random.setstate(saved)
    try:
        return fn(), random.getstate()
    finally:
        random.setstate(outer)


def _observation_type(name: str) -> Any:
    return getattr(importlib.import_module("textarena").ObservationType, name)


def _read_action(actions: Any, speaker: str, agents: Sequence[str]) -> tuple[str, tuple[int, ...] | None]:
    """The speaker's message (text and optional token ids) from a step's actions."""
    if not isinstance(actions, Mapping) or speaker not in actions:
        raise InvalidActionError(f"step() takes a dict {{agent: message}} with an entry for {speaker!r}, whose turn "
                                 f"it is, e.g. env.step({{{speaker!r}: '[Accept]'}}); got {actions!r:.80}")
    strangers = [a for a in actions if a not in agents]
    if strangers:
        raise InvalidActionError(f"actions for agents not in this game: {strangers}; agents are {list(agents)}")
    action = actions[speaker]
    if isinstance(action, str):
        return action, None
    if isinstance(action, Mapping) and isinstance(action.get("text"), str):
        return action["text"], read_token_ids(action.get("token_ids"), action["text"], speaker)
    raise InvalidActionError(f"{speaker!r}'s action must be a str or a mapping with a 'text' str (and optional "
                             f"'token_ids'), got {type(action).__name__}")
