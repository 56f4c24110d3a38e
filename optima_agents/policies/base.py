"""The one policy interface every backend implements.

A policy takes a batch of turn requests (an agent and its env observation) and returns one
action per request, in order. Backends batch the whole list in one call: that is where the
speed comes from (DESIGN.md section 4).
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """Explicit, recorded sampling settings. temperature 0 means greedy decoding."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()
    seed: int | None = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "stop": list(self.stop)}


def row_seed(sampling_seed: int | None, request_seed: int | None, call: int, row: int) -> int:
    """The sampling seed of one row of a batched call, shared by every backend.

    A request's own seed wins (mixed with `SamplingParams.seed` when that is set), so a reply does
    not depend on what else is in the batch; without one, the seed comes from
    `SamplingParams.seed`, the policy's call counter and the row (reproducible for the same
    sequence of calls), or from fresh entropy when `SamplingParams.seed` is None. The result is
    below 2**63: servers parse `seed` as a signed 64-bit integer.
    """
    if request_seed is not None:
        parts = [request_seed] if sampling_seed is None else [sampling_seed, request_seed]
    elif sampling_seed is not None:
        parts = [sampling_seed, call, row]
    else:
        return secrets.randbits(63)
    return int(np.random.SeedSequence([int(p) % 2**63 for p in parts]).generate_state(1, np.uint64)[0] >> 1)


@dataclass(frozen=True)
class TurnRequest:
    """One pending turn: which agent speaks and what it observes.

    `seed` individualises sampling per request (e.g. episode seed + turn), so a sampled
    dialogue does not depend on which other requests shared its batch where the backend
    supports per-request seeds.
    """

    agent: str
    observation: Mapping[str, Any]
    seed: int | None = None


@dataclass(frozen=True)
class Action:
    """What a policy said: the text, the token ids that produced it, and why it stopped.

    `finish_reason == "error"` marks an infrastructure failure (connection refused, 5xx, 429,
    timeout, a malformed reply, after retries): `error` says what happened, and the episode is
    flagged, never scored as a wrong answer.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason = "stop"
    prompt_tokens: int = 0
    error: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.finish_reason == "error"

    def to_env_action(self) -> dict[str, Any]:
        """The env's action format: the text, plus its exact token ids when the backend reported
        them. Without ids (a server that returns none, a scripted policy) the env counts the
        text's tokens itself; an empty id list would claim the text cost 0 tokens."""
        if not self.token_ids:
            return {"text": self.text}
        return {"text": self.text, "token_ids": list(self.token_ids)}


@runtime_checkable
class Policy(Protocol):
    """Maps a batch of turn requests to a batch of actions, one per request, in order."""

    sampling: SamplingParams

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]: ...

    def identity(self) -> dict[str, Any]:
        """Model and backend identity plus sampling settings, recorded in episode buffers."""
        ...
