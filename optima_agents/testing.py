"""Test doubles that ship with the package, for Optima's tests, its reliability benchmark and
users testing their own envs, systems and clients without a model:

- `StubServer`: a real HTTP server on a loopback port answering OpenAI chat-completion requests
  from a script of `Reply`s (status, body, delay, a dropped connection), recording the requests.
- `TurnScript`, `SeededChoice`: policies with known utterances (by turn, or from the request
  seed alone, as a seeded sampler), so rewards and MCTS trees are known.
- `first_utterance_reward`: a dialogue reward read off the first utterance.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Sequence

from optima_agents.policies.base import Action, SamplingParams, TurnRequest

__all__ = ["Reply", "SeededChoice", "StubServer", "TurnScript", "completion", "first_utterance_reward"]


# ---------------------------------------------------------------------- HTTP double
@dataclass
class Reply:
    """One scripted answer: HTTP status, JSON body (None: a chat completion), delay, headers;
    `raw` sends these bytes as the body instead of JSON, `reset` drops the connection (TCP RST)
    without answering."""

    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    reset: bool = False


def completion(text: str = "Hello there.", token_ids: list[int] | None = None, finish_reason: str = "stop",
               prompt_token_ids: list[int] | None = None) -> dict[str, Any]:
    """A chat-completion body shaped like vLLM 0.32's (ids only when given)."""
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                              "finish_reason": finish_reason}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    body: dict[str, Any] = {"id": "x", "object": "chat.completion", "choices": [choice],
                            "usage": {"prompt_tokens": 7, "completion_tokens": len(token_ids or []) or 3}}
    if prompt_token_ids is not None:
        body["prompt_token_ids"] = prompt_token_ids
    return body


class _Server(ThreadingHTTPServer):
    """A threading HTTP server whose accept queue holds a burst of concurrent clients (the default
    of 5 drops connection attempts, which clients then see as connect timeouts)."""

    request_queue_size = 256
    daemon_threads = True


class StubServer:
    """A real HTTP server on a loopback port (`port`, or one the OS picks) answering from `script`
    (then `default`)."""

    def __init__(self, script: list[Reply] | None = None, default: Reply | None = None, port: int = 0):
        self.script = list(script or [])
        self.default = default or Reply()
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.received.append(body)
                    reply = stub.script.pop(0) if stub.script else stub.default
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.reset:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                payload = reply.raw if reply.raw is not None else \
                    json.dumps(completion() if reply.body is None else reply.body).encode()
                try:
                    self.send_response(reply.status)
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = _Server(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ---------------------------------------------------------------------- scripted policies
class TurnScript:
    """Replies by turn number: turn t cycles through `script[t]` (one counter per turn), so with
    rollouts_per_expansion=3 the three rollouts of one expansion say script[t][0], [1], [2].
    Records every call's batch size. `fail` names (turn, call index) pairs that fail. With
    `with_ids=False` it reports no token ids, as a server that returns none does."""

    def __init__(self, script: Mapping[int, Sequence[str]], default: str = "<A>x</A>",
                 fail: set[tuple[int, int]] = frozenset(), with_ids: bool = True):
        self.script, self.default, self.fail, self.with_ids = script, default, fail, with_ids
        self.counters: dict[int, int] = defaultdict(int)
        self.calls: list[int] = []
        self.sampling = SamplingParams(temperature=0.7, max_new_tokens=256)

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        self.calls.append(len(requests))
        out = []
        for r in requests:
            turn = r.observation["turn"]
            options = self.script.get(turn, [self.default])
            k = self.counters[turn]
            self.counters[turn] += 1
            if (turn, k) in self.fail:
                out.append(Action(text="", finish_reason="error", error="HTTP 503"))
                continue
            text = options[k % len(options)]
            ids = tuple(range(len(text.split()))) if self.with_ids else ()
            out.append(Action(text=text, token_ids=ids))
        return out

    def identity(self):
        return {"backend": "scripted"}


class SeededChoice:
    """Picks one of `options` from the request seed alone: a stand-in for a seeded sampler,
    whose output does not depend on the batch it is in."""

    def __init__(self, options: Sequence[str]):
        self.options = options
        self.sampling = SamplingParams(temperature=0.7, max_new_tokens=256)

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        return [Action(text=self.options[r.seed % len(self.options)]) for r in requests]

    def identity(self):
        return {"backend": "seeded-choice"}


def first_utterance_reward(values: Mapping[str, float]) -> Callable:
    """Reward = values[first utterance] (0 if absent); the components carry it as 'score'."""

    def reward(dialogues):
        out = []
        for d in dialogues:
            v = values.get(d.utterances[0][1], 0.0) if d.utterances else 0.0
            out.append((v, {"score": v, "tokens": float(d.tokens)}))
        return out

    return reward
