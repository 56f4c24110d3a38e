"""`ReplicaRouter`: which base URL an `OpenAIPolicy` request goes to, and which URLs are down.

Routing picks the up URL with the fewest requests in flight; ties go to the URL that has been
routed the fewest requests so far, then to the lowest index. So a URL that answers faster frees its
slots sooner and takes more of the requests sent one by one (`acquire`, as continuous scheduling
does): the split follows load. A batch of requests sent together (`reserve`, one `act` call) is
dealt out under one lock, before any of it goes on the wire, so how it splits depends only on the
counts, never on which replies come back while the batch is being sent: URLs with nothing in
flight get equal shares of it (to within one request, the extra one going to the URL routed the
fewest so far), so a lock-step rollout's requests split evenly however fast each replica answers.

A dead replica refuses connections at once, so it always has zero requests in flight and
least-loaded routing alone would keep sending it a share of the traffic. So a connection failure
marks a URL down: it gets no requests until its backoff has passed (`probe_backoff_s`, doubling on
each failed probe, at most `max_probe_backoff_s`); then one caller probes it (any HTTP answer
counts as alive) before it gets traffic again. A reserved request whose URL went down before it
was sent is routed again when it is sent (`claim`). When every URL is down, requests still go to
the one whose backoff ends first, so a single-URL policy keeps retrying as before.

The router keeps per-URL counters (`stats`) and logs a warning when a URL goes down and when it
comes back, on the `optima_agents.policies` logger.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["ReplicaRouter"]

logger = logging.getLogger("optima_agents.policies")

ProbeFunc = Callable[[int], bool]
"""Probes the URL at an index: True when it answered (any HTTP status), False when unreachable."""


@dataclass
class _Replica:
    url: str
    in_flight: int = 0  # routed here (acquired or reserved) and not yet released
    attempts: int = 0  # routed here so far, reservations included; the tie-break
    successes: int = 0
    failures: int = 0
    connection_failures: int = 0
    times_down: int = 0
    down_until: float | None = None  # None: up
    backoff_s: float = 0.0
    probing: bool = False
    last_error: str | None = None


class ReplicaRouter:
    """Least-in-flight routing over base URLs (ties: fewest routed so far) that skips URLs marked down.

    Args:
        urls: the base URLs.
        probe: `ProbeFunc` used before a down URL gets traffic again.
        probe_backoff_s: how long a URL stays down after its first connection failure.
        max_probe_backoff_s: the longest it stays down between probes.
    """

    def __init__(self, urls: Sequence[str], probe: ProbeFunc, *, probe_backoff_s: float = 1.0,
                 max_probe_backoff_s: float = 60.0):
        self._replicas = [_Replica(u) for u in urls]
        self._probe = probe
        self.probe_backoff_s = probe_backoff_s
        self.max_probe_backoff_s = max(max_probe_backoff_s, probe_backoff_s)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ routing
    def acquire(self, avoid: int | None = None) -> int:
        """An index to send the next attempt to (counted in flight until `release`), not `avoid`
        when another URL is up. A down URL whose backoff has passed is probed first."""
        while True:
            with self._lock:
                index, probe = self._choose(avoid)
                replica = self._replicas[index]
                if not probe:
                    self._route(replica)
                    return index
                replica.probing = True
            alive = self._probe(index)
            with self._lock:
                replica.probing = False
                if alive:
                    self._mark_up(replica)
                else:
                    self._mark_down(replica, "probe found it unreachable")

    def reserve(self, count: int) -> list[int | None]:
        """Indices for `count` attempts that are sent together, chosen one after another under one
        lock by the same rule as `acquire`, each counted in flight until `release`. Pass each to
        `claim` when its attempt is sent.

        None leaves an attempt to `acquire` when it is sent: the first one when a down URL is due
        for a probe (that attempt probes it), and every one when no URL is up.
        """
        with self._lock:
            now = time.monotonic()
            up = [i for i, r in enumerate(self._replicas) if r.down_until is None]
            if not up:
                return [None] * count
            probe_first = any(self._is_due(r, now) for r in self._replicas)
            indices: list[int | None] = [None] if probe_first and count else []
            while len(indices) < count:
                index = self._least_loaded(up)
                self._route(self._replicas[index])
                indices.append(index)
            return indices

    def claim(self, reserved: int | None) -> int:
        """The index to send a reserved attempt to: `reserved` while its URL is up; otherwise (it
        went down since `reserve`, or is None) the reservation is dropped and `acquire` chooses."""
        if reserved is not None:
            with self._lock:
                replica = self._replicas[reserved]
                if replica.down_until is None:
                    return reserved
                self._unroute(replica)
        return self.acquire()

    def cancel(self, reserved: int | None) -> None:
        """Drops a reservation whose attempt will not be sent."""
        if reserved is not None:
            with self._lock:
                self._unroute(self._replicas[reserved])

    def release(self, index: int) -> None:
        with self._lock:
            self._replicas[index].in_flight -= 1

    def _choose(self, avoid: int | None) -> tuple[int, bool]:
        """(index, whether to probe it first); call with the lock held."""
        now = time.monotonic()
        indices = range(len(self._replicas))
        up = [i for i in indices if self._replicas[i].down_until is None]
        if not up:  # nothing else to use: the request itself finds out whether one is back
            return min(indices, key=lambda i: self._replicas[i].down_until or now), False
        due = [i for i in indices if self._is_due(self._replicas[i], now)]
        if due:
            return due[0], True
        return self._least_loaded([i for i in up if i != avoid] or up), False

    def _least_loaded(self, candidates: Sequence[int]) -> int:
        """The fewest in flight, then the fewest routed so far, then the lowest index."""
        return min(candidates, key=lambda i: (self._replicas[i].in_flight, self._replicas[i].attempts, i))

    @staticmethod
    def _route(replica: _Replica) -> None:
        replica.in_flight += 1
        replica.attempts += 1

    @staticmethod
    def _unroute(replica: _Replica) -> None:
        replica.in_flight -= 1
        replica.attempts -= 1

    @staticmethod
    def _is_due(replica: _Replica, now: float) -> bool:
        return replica.down_until is not None and not replica.probing and now >= replica.down_until

    # ------------------------------------------------------------------ outcomes
    def record_success(self, index: int) -> None:
        with self._lock:
            replica = self._replicas[index]
            replica.successes += 1
            self._mark_up(replica)

    def record_failure(self, index: int, error: str, *, connection: bool) -> None:
        """A failed attempt; a connection failure (refused, unreachable, connect timeout) marks the
        URL down."""
        with self._lock:
            replica = self._replicas[index]
            replica.failures += 1
            replica.last_error = error
            if connection:
                replica.connection_failures += 1
                self._mark_down(replica, error)

    def _mark_down(self, replica: _Replica, error: str) -> None:
        first = replica.down_until is None
        replica.backoff_s = (self.probe_backoff_s if first
                             else min(max(replica.backoff_s, self.probe_backoff_s) * 2, self.max_probe_backoff_s))
        replica.down_until = time.monotonic() + replica.backoff_s
        if first:
            replica.times_down += 1
            up = sum(r.down_until is None for r in self._replicas)
            logger.warning("OpenAIPolicy: %s is down (%s); %d of %d base URLs remain; probing it again in %.1f s",
                           replica.url, error, up, len(self._replicas), replica.backoff_s)

    @staticmethod
    def _mark_up(replica: _Replica) -> None:
        if replica.down_until is not None:
            logger.warning("OpenAIPolicy: %s answers again; routing requests to it", replica.url)
        replica.down_until = None
        replica.backoff_s = 0.0

    # ------------------------------------------------------------------ reporting
    @property
    def dead_urls(self) -> list[str]:
        """The URLs marked down now, in base-URL order."""
        with self._lock:
            return [r.url for r in self._replicas if r.down_until is not None]

    def stats(self) -> list[dict[str, Any]]:
        """Per URL: state ("up"/"down"), attempts, successes, failures, connection failures, how
        often it went down, seconds until its next probe, and the last error."""
        now = time.monotonic()
        with self._lock:
            return [{"url": r.url, "state": "up" if r.down_until is None else "down", "attempts": r.attempts,
                     "successes": r.successes, "failures": r.failures, "connection_failures": r.connection_failures,
                     "times_down": r.times_down, "in_flight": r.in_flight,
                     "next_probe_in_s": None if r.down_until is None else round(max(0.0, r.down_until - now), 3),
                     "last_error": r.last_error}
                    for r in self._replicas]
