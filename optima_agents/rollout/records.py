"""What a rollout produces: one `EpisodeRecord` per episode, plain data, no wall-clock values.

Records are what episode buffers store (`optima_train.buffers`, one row per record) and what
rewards, selection and trainers read. Every field is JSON-compatible (`to_dict`/`from_dict`
round-trip exactly), so the same seed and greedy decoding give equal records. A turn's
`logprobs`, and an episode's `plain_system_prompts`, are left out of `to_dict` when None, so
records made without them read the same as before the fields existed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

__all__ = ["EpisodeRecord", "TurnRecord"]


@dataclass(frozen=True)
class TurnRecord:
    """One utterance as the env recorded it, plus how the policy produced it.

    Attributes:
        turn: 0-based position in the dialogue.
        speaker: the agent that spoke.
        text: the message (after the env's length cap).
        token_ids: the ids the policy reported (empty when it reported none).
        num_tokens: the token cost the env charged (exact when `tokens_exact`).
        tokens_exact: True when the cost came from the policy's token ids.
        answer: the answer the task parsed from this message, if any.
        finish_reason: "stop" or "length" (the policy's), or "enumerated" for a final answer
            written by `optima_train.answer_variants` rather than sampled.
        prompt_tokens: length of the prompt the policy saw (0 when unknown).
        truncated: the env cut the message at `max_message_chars`.
        logprobs: one log-prob per id of `token_ids`, under the distribution the policy drew it
            from (`optima_agents.policies.logprobs`); None when not requested or not available.
    """

    turn: int
    speaker: str
    text: str
    token_ids: tuple[int, ...]
    num_tokens: int
    tokens_exact: bool
    answer: str | None
    finish_reason: str
    prompt_tokens: int = 0
    truncated: bool = False
    logprobs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"turn {self.turn}: {len(self.logprobs)} log-probs for {len(self.token_ids)} token ids; "
                             f"a turn's log-probs must be one per token id")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; `logprobs` only when present."""
        data = json.loads(json.dumps(asdict(self)))
        if self.logprobs is None:
            del data["logprobs"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TurnRecord":
        logprobs = data.get("logprobs")
        return cls(**{**data, "token_ids": tuple(data["token_ids"] or ()),
                      "logprobs": None if logprobs is None else tuple(float(v) for v in logprobs)})


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished (or infra-failed) episode.

    Attributes:
        env_id, env_version: the registered task and its version.
        seed: the `reset` seed (None: unseeded).
        index: the instance index asked for (None: drawn from the seed).
        options: the other reset options (e.g. `format_instruction`).
        instance_id, question, gold: the task instance (gold as JSON data).
        agents, roles: agent names and role names, in speaking order.
        system_prompts: each agent's system prompt, aligned with `agents`.
        format_instruction: the format instruction actually used, if any.
        turns: the utterances.
        final_answer: the answer that was scored (None: none given).
        score: the task score; None when not scored (scoring error or infra failure).
        score_ok, score_error: whether the metric could score, and why not.
        end_reason: the env's (e.g. "agreed", "max_turns"), or "infra_failure".
        total_tokens, agent_tokens: the token cost, in total and per agent.
        reward_components: named reward parts (now "score" and "tokens"; empty on infra failure).
        policies: each agent's policy identity (backend, model, dtype, sampling, ...).
        sampling: each agent's sampling settings.
        infra_failure, error: a policy returned an error action (connection, timeout, ...): the
            episode stopped there and must not be scored as wrong.
        plain_system_prompts: each agent's system prompt without the format instruction (equal
            to `system_prompts` when none was used), what training shows the model; None when the
            record was made before episodes recorded it.
    """

    env_id: str
    env_version: int
    seed: int | None
    index: int | None
    options: Mapping[str, Any]
    instance_id: str
    question: str
    gold: Any
    agents: tuple[str, ...]
    roles: tuple[str, ...]
    system_prompts: tuple[str, ...]
    format_instruction: str | None
    turns: tuple[TurnRecord, ...]
    final_answer: str | None
    score: float | None
    score_ok: bool
    score_error: str | None
    end_reason: str
    total_tokens: int
    agent_tokens: Mapping[str, int]
    reward_components: Mapping[str, float] = field(default_factory=dict)
    policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sampling: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    infra_failure: bool = False
    error: str | None = None
    plain_system_prompts: tuple[str, ...] | None = None

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def scored(self) -> bool:
        """True when the episode has a usable score (no infra failure, metric succeeded)."""
        return not self.infra_failure and self.score_ok and self.score is not None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (tuples become lists); `from_dict` restores an equal record.
        `plain_system_prompts` only when recorded."""
        data = json.loads(json.dumps(asdict(self)))
        data["turns"] = [t.to_dict() for t in self.turns]
        if self.plain_system_prompts is None:
            del data["plain_system_prompts"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EpisodeRecord":
        data = dict(data)
        data["turns"] = tuple(TurnRecord.from_dict(t) for t in data["turns"])
        for key in ("agents", "roles", "system_prompts"):
            data[key] = tuple(data[key])
        if data.get("plain_system_prompts") is not None:
            data["plain_system_prompts"] = tuple(data["plain_system_prompts"])
        return cls(**data)
