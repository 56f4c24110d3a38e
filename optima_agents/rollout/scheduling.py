"""How the rollout engine sends turns to its policies: in lock step, or continuously.

- **lock-step**: every step gathers the pending turn of every live episode and makes one
  `act` call per policy; every episode waits for the slowest reply of the step. Any policy can
  do it, and it is the only way to batch for a backend that batches per call (transformers).
- **continuous**: each episode's next turn is submitted (`SubmittingPolicy.submit`) as soon as
  its previous reply is in and the env has stepped, so there is no per-step barrier; a backend
  that batches continuously (vLLM's scheduler, an OpenAI-compatible server) keeps its batch full
  while short replies free their slots early. Episodes are admitted from the queue as others
  finish, so at most `max_inflight` requests (one per live episode) are outstanding and memory
  stays flat however many episodes there are.
- **auto**: continuous when every policy declares `PolicyCapabilities.submit`, else lock-step.

Both modes give the same records: an episode's turns depend only on its own spec, its own
replies and its per-request seeds (`derive_seed(episode seed, turn)`), never on which other
requests shared a batch or in what order replies arrived. Only `on_record`'s call order (the
order episodes finish) and the wall-clock counters differ.

`run_continuous` knows nothing about envs: the engine hands it callbacks to start an episode,
build its next request, apply a reply, and finish an episode.
"""

from __future__ import annotations

import queue as queues
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Literal, Mapping, TypeVar, get_args

from optima_agents.policies.base import Action, Policy, TurnRequest, capabilities_of
from optima_envs.errors import ConfigError

__all__ = ["DEFAULT_MAX_INFLIGHT", "SCHEDULINGS", "Scheduling", "check_max_inflight", "resolve_scheduling",
           "run_continuous"]

Scheduling = Literal["auto", "lock-step", "continuous"]
SCHEDULINGS: tuple[str, ...] = get_args(Scheduling)

DEFAULT_MAX_INFLIGHT = 256
"""In-flight requests in continuous mode when neither `max_inflight` nor `max_live` is set: the
most sequences vLLM batches per step by default on CPU (`max_num_seqs` of `LLM`); more would
only wait in the backend's queue while their episodes hold memory here."""

Item = TypeVar("Item")


def resolve_scheduling(scheduling: str, policies: Mapping[str, Policy]) -> Literal["lock-step", "continuous"]:
    """The mode the engine runs in for `scheduling` and these policies (agent -> policy).

    Raises:
        ConfigError: an unknown `scheduling`, or "continuous" with a policy that cannot submit.
    """
    if scheduling not in SCHEDULINGS:
        raise ConfigError(f"scheduling must be one of {list(SCHEDULINGS)}, got {scheduling!r}")
    if scheduling == "lock-step":
        return "lock-step"
    unable = sorted({type(p).__name__ for p in policies.values() if not capabilities_of(p).submit})
    if not unable:
        return "continuous"
    if scheduling == "auto":
        return "lock-step"
    raise ConfigError(
        f"scheduling='continuous' needs policies that take requests one at a time "
        f"(PolicyCapabilities.submit); {', '.join(unable)} does not. Use scheduling='auto' or 'lock-step', "
        f"or a backend that submits (vllm, openai)"
    )


def check_max_inflight(max_inflight: int | None, *, field: str = "max_inflight") -> None:
    """Raises ConfigError unless `max_inflight` is None or at least 1 (`field` names it in the message)."""
    if max_inflight is not None and (isinstance(max_inflight, bool) or not isinstance(max_inflight, int)
                                     or max_inflight < 1):
        raise ConfigError(f"{field} must be an integer >= 1 or None, got {max_inflight!r}")


def run_continuous(
    queue: deque[tuple[int, Any]],
    limit: int,
    *,
    start: Callable[[int, Any], Item],
    next_turn: Callable[[Item], tuple[Policy, TurnRequest]],
    apply: Callable[[Item, TurnRequest, Action], Any],
    finish: Callable[[Item, Any], None],
    on_wake: Callable[[int], None] = lambda submitted: None,
) -> None:
    """Play the queued episodes with at most `limit` requests in flight, one per live episode.

    Args:
        queue: (position, spec) pairs, consumed from the left.
        limit: the most episodes (hence requests) in flight at once.
        start: (position, spec) -> a live episode.
        next_turn: the policy and request of a live episode's next turn.
        apply: applies a reply; returns the episode's record when it ended, else None.
        finish: called with each ended episode and its record, as it ends.
        on_wake: called after each batch of completed replies is handled, with the number of
            requests submitted so far.

    Raises:
        Whatever a policy's future raises (a bug, not an infra failure): the requests still in
        flight are cancelled where they have not started, and the others' replies are dropped.
    """
    in_flight: dict[Future[Action], tuple[Item, TurnRequest]] = {}
    positions: dict[Future[Action], int] = {}
    completed: queues.Queue[Future[Action]] = queues.Queue()  # each future puts itself here when done
    submitted = 0

    def submit(item: Item, position: int) -> None:
        nonlocal submitted
        policy, request = next_turn(item)
        future = policy.submit(request)  # type: ignore[attr-defined]
        in_flight[future] = (item, request)
        positions[future] = position
        submitted += 1
        future.add_done_callback(completed.put)

    try:
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                position, spec = queue.popleft()
                submit(start(position, spec), position)
            done = [completed.get()]
            while not completed.empty():
                done.append(completed.get())
            for future in sorted(done, key=positions.__getitem__):  # a fixed order within one wake-up
                item, request = in_flight.pop(future)
                position = positions.pop(future)
                record = apply(item, request, future.result())
                if record is None:
                    submit(item, position)
                else:
                    finish(item, record)
            on_wake(submitted)
    finally:
        for future in in_flight:
            future.cancel()
