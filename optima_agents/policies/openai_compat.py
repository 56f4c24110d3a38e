"""`OpenAIPolicy`: any OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp, ...).

Each request becomes one `POST {base_url}/chat/completions` with the agent's chat messages
(`chat.chat_messages`, the same view every backend uses; the server applies the model's chat
template). Requests of one `act` call run concurrently on a thread pool of `concurrency`
threads, so several replicas share the work and the server's own batching sees many requests at
once. Their base URLs are chosen together when `act` is called (`routing.ReplicaRouter.reserve`:
fewest in flight, ties to the URL routed the fewest so far), so the call's requests split evenly
over replicas with nothing in flight, whichever answers first; requests beyond the first
`concurrency` wait for a thread and are routed when they are sent, so a faster replica takes more
of those.
`submit(request)` puts one request on the same pool and returns its future at once
(`PolicyCapabilities.submit`): the rollout engine then sends each episode's next turn as soon as
its reply is in, and the servers batch continuously across episodes. A submitted request is
routed when it is sent, to the URL with the fewest in flight then, so the split follows load. At
most `concurrency` requests are on the wire; further submissions wait in the pool's queue. A URL
that refuses connections is marked down and probed again with backoff (`routing.ReplicaRouter`);
`dead_urls` and `url_stats()` report it, and a warning is logged on the `optima_agents.policies`
logger.

Failures are infrastructure, never answers: connection errors, timeouts, HTTP 408/429/5xx
and malformed replies (invalid JSON, or valid JSON with a missing or wrong-typed field, see
`openai_reply.parse_reply`) are retried with exponential backoff (honouring `Retry-After`, and
moving to another base URL when there is one); after `max_retries` the request becomes
`Action(finish_reason="error", error=...)`, which the rollout engine records as an infra
failure of that episode (no score). Other 4xx answers (a bad request, an unknown model) are not
retried. `act` itself never raises for what a server sent, so one bad reply costs one turn.

Token ids: requests set `"return_token_ids": true`; vLLM (0.32: `ChatCompletionResponseChoice
.token_ids`, and `prompt_token_ids` on the response) then returns the generated ids, which go
through `chat.clean_output` like every backend's (and stay, as generated, in
`meta["raw_token_ids"]`). A server that returns no ids: with a tokenizer, the text is encoded
with it (`meta["token_ids_source"] == "tokenizer"`); without one, the action carries no ids and
the env counts tokens itself (`"none"`).

Log-probs (`SamplingParams.logprobs`): requests then also set `"logprobs": true,
"top_logprobs": 0`, and the sampled tokens' log-probs (`choices[0].logprobs.content`) are
aligned with the returned ids like every backend's (`logprobs.align_logprobs`). A server that
returns none, or returns no ids to tie them to, gives `Action.logprobs=None` (and
`meta["logprobs_missing"]` says why), not an error; a malformed block, or one whose length
differs from the ids', is a malformed reply. A vLLM server gives the model's temperature-1
log-probs unless started with `--logprobs-mode processed_logprobs`, which matches the meaning
the in-process backends use under sampling; `VLLMServer` (and so `optima serve`) starts it so
unless its `extra_args` name another mode. Under greedy decoding both are the same.

Constrained replies (`TurnRequest.constraint`, a regex): the request sets vLLM's
`"structured_outputs": {"regex": ...}`; a server that does not know the field may ignore it
(llama.cpp's server takes a grammar instead), so check the replies when pointing this at one.

httpx (a vLLM dependency; `pip install httpx` otherwise) with one pooled client per base URL;
its clients are thread-safe.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, chat_messages, clean_output, encode_text
from optima_agents.policies.base import Action, PolicyCapabilities, SamplingParams, TurnRequest, request_row_seed
from optima_agents.policies.logprobs import align_logprobs
from optima_agents.policies.openai_reply import ChatReply, MalformedReplyError, parse_reply
from optima_agents.policies.routing import ReplicaRouter

__all__ = ["OpenAIPolicy"]

_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_MAX_RETRY_AFTER_S = 60.0
_PROBE_TIMEOUT_S = 5.0


class _Retryable(Exception):
    """An attempt failed in a way worth retrying (connection, timeout, 429/5xx, bad body);
    `connection` is True when the server could not be reached at all."""

    def __init__(self, message: str, retry_after_s: float | None = None, *, connection: bool = False):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.connection = connection


class _Fatal(Exception):
    """An attempt failed in a way retrying cannot fix (a 4xx other than 408/425/429)."""


class OpenAIPolicy:
    """Chat completions from one or more OpenAI-compatible servers, as a batched policy.

    Args:
        model (str): the model name the servers serve (`--served-model-name`). When it is also
            a registry name or a local folder, its tokenizer is loaded (see `tokenizer`).
        base_urls (list of str): e.g. `["http://127.0.0.1:8000/v1"]`; several for replicas.
        sampling (SamplingParams, *optional*): temperature 0 is greedy.
        timeout_s (float, *optional*, defaults to 60): per attempt (connect, read, write).
        max_retries (int, *optional*, defaults to 3): retries after the first attempt.
        backoff_s (float, *optional*, defaults to 0.5): first retry delay; doubles each retry
            (plus up to 25% jitter), or the server's `Retry-After` when longer (capped at 60 s).
        api_key (str, *optional*): sent as `Authorization: Bearer ...`.
        concurrency (int, *optional*, defaults to 64): the most requests in flight at once.
        tokenizer (*optional*, defaults to `"auto"`): a Hugging Face tokenizer, used to decode
            and canonicalise returned ids and to count tokens when a server returns none.
            `"auto"` loads it when `model` resolves to a local folder or registry name, else None.
        chat_format (ChatFormat, *optional*): how transcripts become chat messages.
        extra_body (dict, *optional*): more JSON fields for every request.
        probe_backoff_s (float, *optional*, defaults to 1): how long a base URL that refused a
            connection gets no requests before it is probed again; doubles after each failed
            probe, up to 60 s.

    Attributes:
        dead_urls (list of str): the base URLs marked down now.

    Raises:
        ValueError: no base URLs, or a bad option value.
    """

    capabilities = PolicyCapabilities(with_sampling=True, close=True, chat_format=True, submit=True, replicas=True,
                                      constraints=True)

    def __init__(
        self,
        model: str,
        *,
        base_urls: Sequence[str],
        sampling: SamplingParams = SamplingParams(),
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        api_key: str | None = None,
        concurrency: int = 64,
        tokenizer: Any = "auto",
        chat_format: ChatFormat = DEFAULT_CHAT_FORMAT,
        extra_body: Mapping[str, Any] | None = None,
        probe_backoff_s: float = 1.0,
    ):
        if isinstance(base_urls, str) or not base_urls:
            raise ValueError(f"OpenAIPolicy needs a non-empty list of base_urls, got {base_urls!r}")
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or concurrency < 1 or probe_backoff_s <= 0:
            raise ValueError(
                f"OpenAIPolicy needs timeout_s > 0, max_retries >= 0, backoff_s >= 0, concurrency >= 1 and "
                f"probe_backoff_s > 0; got {timeout_s}, {max_retries}, {backoff_s}, {concurrency}, {probe_backoff_s}"
            )
        import httpx

        self.model = model
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.sampling = sampling
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.concurrency = concurrency
        self.chat_format = chat_format
        self.extra_body = dict(extra_body or {})
        self.tokenizer = _load_tokenizer(model) if tokenizer == "auto" else tokenizer
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._clients = [httpx.Client(base_url=u, headers=headers, timeout=httpx.Timeout(timeout_s), limits=limits)
                         for u in self.base_urls]
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="openai-policy")
        self._router = ReplicaRouter(self.base_urls, self._probe, probe_backoff_s=probe_backoff_s)
        self._calls = 0
        self._calls_lock = threading.Lock()
        self._rng = random.Random(secrets.randbits(64))

    # ------------------------------------------------------------------ Policy
    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        """One action per request, in order; requests run concurrently over the base URLs.

        The base URLs of the first `concurrency` requests are chosen together, before any is sent,
        so how they split does not depend on which replies come back first."""
        if not requests:
            return []
        call = self._next_call()
        seeds = [request_row_seed(self.sampling, r, call, i) for i, r in enumerate(requests)]
        reserved = self._router.reserve(min(len(requests), self.concurrency))
        reserved += [None] * (len(requests) - len(reserved))
        futures: list[Future[Action]] = []
        try:
            for request, seed, index in zip(requests, seeds, reserved):
                futures.append(self._pool.submit(self._one, request, seed, index))
            return [future.result() for future in futures]
        except BaseException:
            for future, index in zip(futures, reserved):
                if future.cancel():
                    self._router.cancel(index)
            for index in reserved[len(futures):]:
                self._router.cancel(index)
            raise

    def submit(self, request: TurnRequest) -> Future[Action]:
        """The action `act([request])` would give, as a future; the request runs on the pool.

        Failures resolve the future with an error action, as in `act` (`SubmittingPolicy`)."""
        seed = request_row_seed(self.sampling, request, self._next_call(), 0)
        return self._pool.submit(self._one, request, seed)

    @property
    def dead_urls(self) -> list[str]:
        """The base URLs marked down now (they refused connections; probed again with backoff)."""
        return self._router.dead_urls

    def url_stats(self) -> list[dict[str, Any]]:
        """Per base URL: state, attempts, successes, failures, connection failures, last error."""
        return self._router.stats()

    def identity(self) -> dict[str, Any]:
        """Backend, served model, base URLs, sampling and chat format."""
        return {
            "backend": "openai",
            "model": self.model,
            "model_path": getattr(self.tokenizer, "name_or_path", None),
            "revision": None,
            "dtype": None,
            "base_urls": list(self.base_urls),
            "sampling": self.sampling.to_dict(),
            "chat_format": self.chat_format.to_dict(),
        }

    def with_sampling(self, sampling: SamplingParams) -> "OpenAIPolicy":
        """A new policy for the same servers and tokenizer with other sampling settings."""
        other = object.__new__(OpenAIPolicy)
        other.__dict__.update(self.__dict__)
        other.sampling = sampling
        other._calls = 0
        other._calls_lock = threading.Lock()
        return other

    def close(self) -> None:
        """Close the HTTP clients and the thread pool (shared with `with_sampling` copies)."""
        self._pool.shutdown(wait=True)
        for client in self._clients:
            client.close()

    def __enter__(self) -> "OpenAIPolicy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ one request
    def _body(self, request: TurnRequest, seed: int) -> dict[str, Any]:
        sp = self.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request.observation, self.chat_format),
            "max_tokens": sp.max_new_tokens,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "seed": seed,
            "n": 1,
            "return_token_ids": True,
        }
        if sp.stop:
            body["stop"] = list(sp.stop)
        if sp.logprobs:
            body.update(logprobs=True, top_logprobs=0)
        if request.constraint is not None:
            body["structured_outputs"] = {"regex": request.constraint}
        body.update(self.extra_body)
        return body

    def _one(self, request: TurnRequest, seed: int, reserved: int | None = None) -> Action:
        """`reserved`: the base URL index `act` chose for the first attempt (`ReplicaRouter.reserve`)."""
        try:
            body = self._body(request, seed)
        except BaseException:
            self._router.cancel(reserved)
            raise
        errors: list[str] = []
        avoid: int | None = None
        for attempt in range(self.max_retries + 1):
            index = self._router.claim(reserved) if attempt == 0 else self._router.acquire(avoid)
            url = self.base_urls[index]
            try:
                action = self._attempt(index, body, seed, attempts=attempt + 1)
                self._router.record_success(index)
                return action
            except _Fatal as exc:
                errors.append(f"{url}: {exc}")
                self._router.record_failure(index, str(exc), connection=False)
                break
            except _Retryable as exc:
                errors.append(f"{url}: {exc}")
                self._router.record_failure(index, str(exc), connection=exc.connection)
                avoid = index if len(self.base_urls) > 1 else None
                if attempt < self.max_retries:
                    time.sleep(self._delay(attempt, exc.retry_after_s))
            finally:
                self._router.release(index)
        tries = len(errors)
        return Action(
            text="", finish_reason="error",
            error=f"request failed after {tries} attempt{'s' if tries != 1 else ''}: " + " | ".join(errors[-3:]),
            meta={"attempts": tries, "seed": seed},
        )

    def _attempt(self, index: int, body: Mapping[str, Any], seed: int, *, attempts: int) -> Action:
        """One POST and its reply as an Action; anything wrong with the reply is `_Retryable`."""
        data, raw = self._post(index, body)
        try:
            reply = parse_reply(data, logprobs=self.sampling.logprobs)
            return self._to_action(reply, seed, attempts=attempts, url=self.base_urls[index])
        except MalformedReplyError as exc:
            raise _Retryable(f"malformed response: {exc}: {raw[:200]!r}") from exc

    def _post(self, index: int, body: Mapping[str, Any]) -> tuple[Any, str]:
        """The reply's JSON and its text (for error messages)."""
        import httpx

        try:
            response = self._clients[index].post("/chat/completions", json=body)
            text = response.text
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timed out after {self.timeout_s} s ({type(exc).__name__})",
                             connection=isinstance(exc, httpx.ConnectTimeout)) from exc
        except httpx.RequestError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}", connection=isinstance(exc, httpx.ConnectError)) from exc
        if response.status_code in _RETRY_STATUS:
            raise _Retryable(f"HTTP {response.status_code}: {text[:200]}",
                             _retry_after(response.headers.get("retry-after")))
        if response.status_code >= 400:
            raise _Fatal(f"HTTP {response.status_code}: {text[:300]}")
        try:
            return response.json(), text
        except ValueError as exc:
            raise _Retryable(f"malformed response (not JSON: {exc}): {text[:200]!r}") from exc

    def _probe(self, index: int) -> bool:
        """Whether a base URL answers HTTP at all (any status): used before a down URL gets traffic."""
        import httpx

        try:
            self._clients[index].get("/models", timeout=min(self.timeout_s, _PROBE_TIMEOUT_S))
        except httpx.RequestError:
            return False
        return True

    def _to_action(self, reply: ChatReply, seed: int, *, attempts: int, url: str) -> Action:
        ids = reply.token_ids
        prompt_tokens = reply.prompt_token_count or 0
        meta: dict[str, Any] = {"seed": seed, "attempts": attempts, "base_url": url,
                                "server_finish_reason": reply.finish_reason}
        sp = self.sampling
        if ids is not None and reply.logprobs is not None and len(reply.logprobs) != len(ids):
            raise MalformedReplyError(f"choices[0].logprobs.content has {len(reply.logprobs)} entries but "
                                      f"choices[0].token_ids has {len(ids)} ids; they must be one per token")
        if sp.logprobs and reply.logprobs is None:
            meta["logprobs_missing"] = "the server returned no log-probs"
        elif sp.logprobs and ids is None:
            meta["logprobs_missing"] = "the server returned no token ids to align the log-probs with"
        if ids is not None and self.tokenizer is not None:
            vocab = len(self.tokenizer)
            if any(i >= vocab for i in ids):
                raise MalformedReplyError(f"choices[0].token_ids has ids beyond the tokenizer's {vocab} tokens: "
                                          f"{max(ids)}")
            cleaned = clean_output(self.tokenizer, ids, max_new_tokens=sp.max_new_tokens, stop=sp.stop,
                                   stop_token_ids=_stop_ids(self.tokenizer))
            meta.update(generated_tokens=cleaned.generated_tokens, reencoded=cleaned.reencoded,
                        token_ids_source="server", raw_token_ids=ids)
            logprobs = None if reply.logprobs is None else align_logprobs(ids, reply.logprobs, cleaned.token_ids)
            if reply.logprobs is not None and logprobs is None:
                meta["logprobs_missing"] = "the reply was re-encoded: its stored ids are not the sampled ones"
            return Action(text=cleaned.text, token_ids=cleaned.token_ids, finish_reason=cleaned.finish_reason,
                          prompt_tokens=prompt_tokens, meta=meta, logprobs=logprobs)
        text = _cut_at_stop(reply.text, sp.stop).strip()
        finish = "length" if reply.finish_reason == "length" else "stop"
        if ids is not None:  # ids but no tokenizer: keep the server's ids as they are
            meta.update(generated_tokens=len(ids), token_ids_source="server", raw_token_ids=ids)
            return Action(text=text, token_ids=ids, finish_reason=finish, prompt_tokens=prompt_tokens, meta=meta,
                          logprobs=reply.logprobs)
        if self.tokenizer is not None:
            token_ids = tuple(encode_text(self.tokenizer, text)) if text else ()
            meta.update(generated_tokens=reply.completion_tokens or len(token_ids), token_ids_source="tokenizer")
            return Action(text=text, token_ids=token_ids, finish_reason=finish, prompt_tokens=prompt_tokens, meta=meta)
        meta.update(generated_tokens=reply.completion_tokens or 0, token_ids_source="none")
        return Action(text=text, finish_reason=finish, prompt_tokens=prompt_tokens, meta=meta)

    # ------------------------------------------------------------------ seeds, backoff
    def _next_call(self) -> int:
        """Counts `act` calls and submissions (the seed of a request without its own uses it)."""
        with self._calls_lock:
            self._calls += 1
            return self._calls

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        delay = self.backoff_s * (2**attempt) * (1 + 0.25 * self._rng.random())
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, _MAX_RETRY_AFTER_S))
        return delay


def _load_tokenizer(model: str) -> Any:
    """The tokenizer of a registry model or local folder named `model`; None for anything else."""
    from pathlib import Path

    from optima_agents.models import MODEL_REGISTRY, resolve_model

    if model.lower() not in MODEL_REGISTRY and not Path(model).expanduser().is_dir():
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    return AutoTokenizer.from_pretrained(resolve_model(model))


def _stop_ids(tokenizer: Any) -> list[int]:
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    hits = [text.find(s) for s in stop if s and s in text]
    return text[: min(hits)] if hits else text


def _retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds (the delta-seconds form; an HTTP date is ignored)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
