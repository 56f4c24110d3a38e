"""`ReplicaRouter`: which base URL an `OpenAIPolicy` request goes to, and which URLs are down.

Routing picks the URL with the fewest requests in flight (round robin among ties). A dead
replica refuses connections at once, so it always has zero requests in flight and least-loaded
routing alone would keep sending it a share of the traffic. So a connection failure marks a URL
down: it gets no requests until its backoff has passed (`probe_backoff_s`, doubling on each
failed probe, at most `max_probe_backoff_s`); then one caller probes it (any HTTP answer counts
as alive) before it gets traffic again. When every URL is down, requests still go to the one
whose backoff ends first, so a single-URL policy keeps retrying as before.

The router keeps per-URL counters (`stats`) and logs a warning when a URL goes down and when it
comes back, on the `optima_agents.policies` logger.
"""

from __future__ import annotations

import itertools
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
    in_flight: int = 0
    attempts: int = 0
    successes: int = 0
    failures: int = 0
    connection_failures: int = 0
    times_down: int = 0
    down_until: float | None = None  # None: up
    backoff_s: float = 0.0
    probing: bool = False
    last_error: str | None = None


class ReplicaRouter:
    """Least-in-flight routing over base URLs that skips URLs marked down.

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
        self._turn = itertools.count()

    # ------------------------------------------------------------------ routing
    def acquire(self, avoid: int | None = None) -> int:
        """An index to send the next attempt to (counted in flight until `release`), not `avoid`
        when another URL is up. A down URL whose backoff has passed is probed first."""
        while True:
            with self._lock:
                index, probe = self._choose(avoid)
                replica = self._replicas[index]
                if not probe:
                    replica.in_flight += 1
                    replica.attempts += 1
                    return index
                replica.probing = True
            alive = self._probe(index)
            with self._lock:
                replica.probing = False
                if alive:
                    self._mark_up(replica)
                else:
                    self._mark_down(replica, "probe found it unreachable")

    def release(self, index: int) -> None:
        with self._lock:
            self._replicas[index].in_flight -= 1

    def _choose(self, avoid: int | None) -> tuple[int, bool]:
        """(index, whether to probe it first); call with the lock held."""
        now = time.monotonic()
        start = next(self._turn)
        order = [(start + k) % len(self._replicas) for k in range(len(self._replicas))]
        up = [i for i in order if self._replicas[i].down_until is None]
        if not up:  # nothing else to use: the request itself finds out whether one is back
            return min(order, key=lambda i: self._replicas[i].down_until or now), False
        due = [i for i in order if self._is_due(self._replicas[i], now)]
        if due:
            return due[0], True
        candidates = [i for i in up if i != avoid] or up
        return min(candidates, key=lambda i: self._replicas[i].in_flight), False

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
