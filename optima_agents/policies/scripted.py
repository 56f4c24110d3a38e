"""A policy from a plain function, for tests and examples (never for product claims)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from optima_agents.chat import encode_text
from optima_agents.policies.base import Action, PolicyCapabilities, SamplingParams, TurnRequest

__all__ = ["ScriptFunc", "ScriptedPolicy"]

ScriptFunc = Callable[[Mapping[str, Any]], "str | Action"]
"""Maps one observation to the reply text, or to a full `Action` (e.g. an error action)."""


class ScriptedPolicy:
    """Answers every request with `fn(observation)`.

    Args:
        fn: the script; it may return a `str` or an `Action` (returned unchanged).
        name (str, *optional*, defaults to `"scripted"`): recorded as the model in `identity()`.
        tokenizer (*optional*): a Hugging Face tokenizer; when given, string replies carry their
            token ids, so the env's token costs are exact. Without it the env counts tokens.
            String replies carry no log-probs (`Action.logprobs` is None): nothing sampled them.

    Attributes:
        calls: how many `act` calls were made (one per batch).
        requests: how many requests were answered in total.
    """

    capabilities = PolicyCapabilities(with_sampling=True)

    def __init__(self, fn: ScriptFunc, *, name: str = "scripted", tokenizer: Any = None):
        if not callable(fn):
            raise TypeError(f"ScriptedPolicy needs a callable observation -> text, got {type(fn).__name__}")
        self.fn = fn
        self.name = name
        self.tokenizer = tokenizer
        self.sampling = SamplingParams()
        self.calls = 0
        self.requests = 0

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        self.calls += 1
        self.requests += len(requests)
        return [self._one(request) for request in requests]

    def _one(self, request: TurnRequest) -> Action:
        out = self.fn(request.observation)
        if isinstance(out, Action):
            return out
        if not isinstance(out, str):
            raise TypeError(
                f"ScriptedPolicy {self.name!r}: the script returned {type(out).__name__}, not str or Action")
        ids = tuple(encode_text(self.tokenizer, out)) if self.tokenizer is not None and out else ()
        return Action(text=out, token_ids=ids, finish_reason="stop")

    def with_sampling(self, sampling: SamplingParams) -> "ScriptedPolicy":
        """The same script, recording other sampling settings (the script sees only the
        observation, so its replies do not change)."""
        other = ScriptedPolicy(self.fn, name=self.name, tokenizer=self.tokenizer)
        other.sampling = sampling
        return other

    def identity(self) -> dict[str, Any]:
        return {"backend": "scripted", "model": self.name, "model_path": None, "revision": None,
                "dtype": None, "sampling": self.sampling.to_dict()}
