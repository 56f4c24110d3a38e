"""`MicroBatcher`: one-request calls from many threads, gathered into batched `act` calls.

An OpenAI-compatible server batches the requests that are in flight together; an in-process
policy has no such loop, so a thread pool calling `act([request])` on it would decode one
sequence at a time (or, behind a lock, one request after another), which is not how a pool of
threads against a server runs. This class is the server loop in miniature: threads call it with
one request each and block; a dispatcher thread takes every waiting request into one `act` call,
the way llama.cpp's server slots or vLLM's scheduler decode concurrent requests together.

When a batch closes: as soon as it holds `max_batch` requests, or when no request has arrived
for `window_s` since the last one. Requests that arrive while a batch is decoding wait for the
next batch (a server could add them to the running batch at its next step; see
`benchmarks/rollout_throughput.py` for why that does not change what is measured there).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Callable, Generic, Sequence, TypeVar

__all__ = ["MicroBatcher"]

Request = TypeVar("Request")
Reply = TypeVar("Reply")


class MicroBatcher(Generic[Request, Reply]):
    """Gathers single requests from concurrent callers into calls of `act(requests) -> replies`.

    Args:
        act: answers a list of requests with one reply each, in order.
        max_batch: the most requests per call; a batch that reaches it is sent at once.
        window_s: a batch that has not reached `max_batch` is sent once no request has arrived
            for this long.

    Attributes:
        batch_sizes: the size of every batch sent since the last `reset_stats()`.
        busy_s: seconds spent inside `act` since the last `reset_stats()`.

    Raises:
        ValueError: `max_batch` < 1 or `window_s` < 0.
    """

    def __init__(self, act: Callable[[list[Request]], Sequence[Reply]], *, max_batch: int, window_s: float):
        if max_batch < 1:
            raise ValueError(f"MicroBatcher max_batch must be >= 1, got {max_batch}")
        if window_s < 0:
            raise ValueError(f"MicroBatcher window_s must be >= 0, got {window_s}")
        self._act = act
        self.max_batch = max_batch
        self.window_s = window_s
        self.batch_sizes: list[int] = []
        self.busy_s = 0.0
        self._waiting: list[tuple[Request, Future]] = []
        self._last_arrival = 0.0
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._dispatch, name="micro-batcher", daemon=True)
        self._thread.start()

    def __call__(self, request: Request) -> Reply:
        """The reply to `request`, once the batch it joined has been answered.

        Raises:
            RuntimeError: the batcher was closed.
            Exception: whatever `act` raised for the batch this request was in.
        """
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("this MicroBatcher was closed")
            self._waiting.append((request, future))
            self._last_arrival = time.monotonic()
            self._cond.notify_all()
        return future.result()

    def reset_stats(self) -> None:
        self.batch_sizes = []
        self.busy_s = 0.0

    def close(self) -> None:
        """Answer the requests already waiting, then stop the dispatcher thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def __enter__(self) -> "MicroBatcher[Request, Reply]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_batch(self) -> list[tuple[Request, Future]] | None:
        with self._cond:
            while not self._waiting and not self._closed:
                self._cond.wait()
            while self._waiting and len(self._waiting) < self.max_batch and not self._closed:
                quiet_left = self._last_arrival + self.window_s - time.monotonic()
                if quiet_left <= 0:
                    break
                self._cond.wait(quiet_left)
            if not self._waiting:
                return None  # closed with nothing left to answer
            batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch:]
            return batch

    def _dispatch(self) -> None:
        while (batch := self._next_batch()) is not None:
            start = time.perf_counter()
            try:
                replies = list(self._act([request for request, _ in batch]))
                if len(replies) != len(batch):
                    raise RuntimeError(f"act returned {len(replies)} replies for {len(batch)} requests")
            except BaseException as exc:  # every caller of the batch sees the failure
                for _, future in batch:
                    future.set_exception(exc)
                continue
            finally:
                self.busy_s += time.perf_counter() - start
                self.batch_sizes.append(len(batch))
            for (_, future), reply in zip(batch, replies):
                future.set_result(reply)
