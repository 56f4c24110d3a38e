"""The one policy interface every backend implements.

A policy takes a batch of turn requests (an agent and its env observation) and returns one
action per request, in order. Backends batch the whole list in one call: that is where the
speed comes from (docs/design.md section 4). A backend that batches continuously on its own (a vLLM
engine, an OpenAI-compatible server) may also take requests one at a time (`SubmittingPolicy`),
so a caller need not wait for a whole batch before sending the next request.
"""

from __future__ import annotations

import secrets
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """Explicit, recorded sampling settings. temperature 0 means greedy decoding.

    `logprobs` asks the backend for each generated token's log-probability
    (`Action.logprobs`, see `optima_agents.policies.logprobs`); off by default, since it costs
    a little per decoding step and most rollouts do not need it.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()
    seed: int | None = 0
    logprobs: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not isinstance(self.logprobs, bool):
            raise ValueError(f"SamplingParams.logprobs must be True or False, got {self.logprobs!r}")

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON data; `logprobs` appears only when on, so records and cache keys
        made without it stay as they were before the option existed."""
        data = {**asdict(self), "stop": list(self.stop)}
        if not self.logprobs:
            del data["logprobs"]
        return data


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


def request_row_seed(sampling: SamplingParams, request: "TurnRequest", call: int, row: int) -> int:
    """`row_seed` for one request: its own `sampling_seed` wins over the policy's seed."""
    base = sampling.seed if request.sampling_seed is None else request.sampling_seed
    return row_seed(base, request.seed, call, row)


@dataclass(frozen=True)
class TurnRequest:
    """One pending turn: which agent speaks and what it observes.

    `seed` individualises sampling per request (e.g. episode seed + turn), so a sampled
    dialogue does not depend on which other requests shared its batch where the backend
    supports per-request seeds. `sampling_seed`, when set, takes the place of the policy's
    `SamplingParams.seed` for this request: k sampled copies of one episode then share a batch
    and still draw exactly what k policies seeded 0..k-1 would draw one after another.
    `constraint`, when set, is a regular expression the whole reply must match (constrained
    decoding, on policies that declare `PolicyCapabilities.constraints`); the rollout engine sets
    it to the task's answer pattern for episodes that sample answer moves constrained.
    """

    agent: str
    observation: Mapping[str, Any]
    seed: int | None = None
    sampling_seed: int | None = None
    constraint: str | None = None


@dataclass(frozen=True)
class Action:
    """What a policy said: the text, the token ids that produced it, and why it stopped.

    `finish_reason == "error"` marks an infrastructure failure (connection refused, 5xx, 429,
    timeout, a malformed reply, after retries): `error` says what happened, and the episode is
    flagged, never scored as a wrong answer.

    `logprobs[k]` is the log-probability of `token_ids[k]` under the distribution it was drawn
    from (see `optima_agents.policies.logprobs` for the exact definition), one per token id; None
    when not requested (`SamplingParams.logprobs`) or not available (a server that returns none,
    a reply whose stored ids are not the sampled ones, a scripted policy).
    """

    text: str
    token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason = "stop"
    prompt_tokens: int = 0
    error: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    logprobs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"Action.logprobs must have one value per token id: got {len(self.logprobs)} "
                             f"log-probs for {len(self.token_ids)} token ids")

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


@dataclass(frozen=True)
class PolicyCapabilities:
    """What a policy offers beyond `act`, `identity` and `sampling`, declared by its class so that
    callers check a flag instead of probing for methods. Every flag defaults to False.

    with_sampling: `with_sampling(SamplingParams)` returns a policy that shares this one's model
        (nothing is reloaded) and samples with other settings.
    close: `close()` releases the backend's processes and memory now, not at garbage collection.
    chat_format: `chat_format` is the `ChatFormat` the policy renders its prompts with (training
        pairs built from its dialogues are rendered the same way).
    submit: `submit(request)` answers one request asynchronously (`SubmittingPolicy`), so the
        rollout engine can send each episode's next turn as soon as its previous reply is in.
    replicas: the policy spreads requests over several servers and reports the ones it marked
        down in `dead_urls` (a list of base URLs), which the rollout engine puts in its stats.
    adapters: `with_adapter(path)` returns a policy sharing this one's engine that generates through
        a PEFT LoRA adapter folder (None: the engine's own weights); `max_adapter_rank` is the
        largest rank the engine serves (0: it was started without LoRA support); `sleep()` frees
        the engine's accelerator memory where it can (returns whether it did) until `wake_up()`.
    constraints: the policy honours `TurnRequest.constraint`: every reply it gives matches it.
    """

    with_sampling: bool = False
    close: bool = False
    chat_format: bool = False
    submit: bool = False
    replicas: bool = False
    adapters: bool = False
    constraints: bool = False


NO_CAPABILITIES = PolicyCapabilities()


def capabilities_of(policy: Any) -> PolicyCapabilities:
    """The capabilities `policy` declares (`policy.capabilities`); none for a policy that declares none.

    Raises:
        TypeError: `capabilities` is set to something other than a `PolicyCapabilities`.
    """
    declared = getattr(policy, "capabilities", NO_CAPABILITIES)
    if not isinstance(declared, PolicyCapabilities):
        raise TypeError(f"{type(policy).__name__}.capabilities must be a PolicyCapabilities, got {declared!r}")
    return declared


@runtime_checkable
class Policy(Protocol):
    """Maps a batch of turn requests to a batch of actions, one per request, in order.

    `capabilities` declares the optional methods the policy has (`PolicyCapabilities`); read it
    with `capabilities_of`, which treats a policy that declares nothing as offering nothing.
    """

    sampling: SamplingParams
    capabilities: PolicyCapabilities

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]: ...

    def identity(self) -> dict[str, Any]:
        """Model and backend identity plus sampling settings, recorded in episode buffers."""
        ...


@runtime_checkable
class SubmittingPolicy(Policy, Protocol):
    """A policy that also takes requests one at a time (`PolicyCapabilities.submit`).

    `submit(request)` returns at once with a future of the request's action. The action is the
    one `act([request])` would give: the same sampling settings, and the same sampling seed
    whenever `request.seed` is set (`row_seed`; without one, each submission counts as a call of
    one row). A backend failure the policy would report from `act` as an error action
    (`finish_reason == "error"`) resolves the future with that action; anything `act` would
    raise is set as the future's exception. Futures may complete in any order.
    """

    def submit(self, request: TurnRequest) -> Future[Action]: ...

