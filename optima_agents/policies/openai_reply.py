"""Reading a chat-completion reply: every field `OpenAIPolicy` uses, checked for its type.

A server (or a proxy in front of it) can answer HTTP 200 with JSON of the wrong shape: a
`message` that is a string, `content: 123`, `token_ids: ["a"]`, `usage.prompt_tokens: "x"`.
`parse_reply` turns such a body into a `MalformedReplyError` that names the field, the value
and the type expected, so the policy retries it like any other failed attempt instead of
raising out of `act` (which would cost every episode of the rollout).

Log-probs (`parse_reply(..., logprobs=True)`): `choices[0].logprobs.content[k].logprob`, one
entry per generated token in the OpenAI chat format. A reply without them (`logprobs` missing or
null, or `content` null) gives None: not every server returns them. A block that is there but
malformed (not an object, `content` not a list, an entry without a numeric `logprob`, NaN, a
value above 0) is a `MalformedReplyError`. vLLM writes -9999.0 for a log-prob below that (e.g.
-inf); it is kept as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from optima_agents.policies.logprobs import check_logprob
from optima_envs.core.tokens import MAX_TOKEN_ID

__all__ = ["ChatReply", "MalformedReplyError", "parse_reply"]


class MalformedReplyError(ValueError):
    """Raised when a chat-completion body lacks a field `OpenAIPolicy` needs or has the wrong type."""


@dataclass(frozen=True)
class ChatReply:
    """The checked fields of one chat completion (choice 0)."""

    text: str
    token_ids: tuple[int, ...] | None
    finish_reason: str | None
    prompt_token_count: int | None  # from `prompt_token_ids`, else `usage.prompt_tokens`
    completion_tokens: int | None
    logprobs: tuple[float, ...] | None = None  # one per generated token, when asked for and returned


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail(field: str, expected: str, value: Any) -> MalformedReplyError:
    return MalformedReplyError(f"{field} must be {expected}, got {type(value).__name__} {_short(value)}")


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(field, "an object", value)
    return value


def _count(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(field, "a non-negative integer or null", value)
    return value


def _ids(value: Any, field: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _fail(field, "a list of token ids or null", value)
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= MAX_TOKEN_ID:
            raise _fail(f"{field}[{i}]", f"an int in [0, {MAX_TOKEN_ID}]", item)
    return tuple(value)


def _logprobs(value: Any, field: str) -> tuple[float, ...] | None:
    """The per-token log-probs of a chat choice's `logprobs` block; None when the server sent none."""
    if value is None:
        return None
    block = _mapping(value, field)
    content = block.get("content")
    if content is None:
        return None
    if not isinstance(content, list):
        raise _fail(f"{field}.content", "a list of token log-probs or null", content)
    out = []
    for k, entry in enumerate(content):
        where = f"{field}.content[{k}]"
        entry = _mapping(entry, where)
        if "logprob" not in entry:
            raise MalformedReplyError(f"{where} has no 'logprob' (keys: {sorted(entry)})")
        try:
            out.append(check_logprob(entry["logprob"], f"{where}.logprob"))
        except ValueError as exc:
            raise MalformedReplyError(str(exc)) from None
    return tuple(out)


def parse_reply(data: Any, *, logprobs: bool = False) -> ChatReply:
    """The fields of a chat-completion body (vLLM's `token_ids`/`prompt_token_ids` included).

    `logprobs`: also read `choices[0].logprobs` (ignored otherwise, so a request that did not
    ask for them cannot fail on them).

    Raises:
        MalformedReplyError: a missing field or a value of the wrong type (the message says which).
    """
    body = _mapping(data, "the response body")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _fail("choices", "a non-empty list", choices)
    choice = _mapping(choices[0], "choices[0]")
    message = _mapping(choice.get("message"), "choices[0].message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _fail("choices[0].message.content", "a string or null", content)
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise _fail("choices[0].finish_reason", "a string or null", finish)
    usage = body.get("usage")
    usage = {} if usage is None else _mapping(usage, "usage")
    prompt_ids = _ids(body.get("prompt_token_ids"), "prompt_token_ids")
    prompt_tokens = _count(usage.get("prompt_tokens"), "usage.prompt_tokens")
    return ChatReply(
        text=content or "",
        token_ids=_ids(choice.get("token_ids"), "choices[0].token_ids"),
        finish_reason=finish,
        prompt_token_count=len(prompt_ids) if prompt_ids else prompt_tokens,
        completion_tokens=_count(usage.get("completion_tokens"), "usage.completion_tokens"),
        logprobs=_logprobs(choice.get("logprobs"), "choices[0].logprobs") if logprobs else None,
    )
