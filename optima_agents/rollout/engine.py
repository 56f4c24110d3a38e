"""The batched rollout engine: many episodes at once, every pending turn batched by the backend.

Two schedulings (`scheduling.py`; `scheduling="auto"` picks continuous when every policy can
submit requests one at a time):
- lock-step: each step gathers the pending turn of every live episode, groups the requests by
  policy (by object identity: two agents sharing one policy object share its call) and makes ONE
  `policy.act(requests)` call per group, so the backend batches every episode's turn together
  (batching matters more than anything else for speed on this hardware, docs/design.md section 4);
- continuous: each episode's next turn goes to `policy.submit(request)` as soon as its previous
  reply is in, and the backend's own continuous batching keeps the batch full. Same records.

Episodes are multiplexed over a single env through `snapshot()`/`restore()`: the env state is
immutable, so a snapshot is a reference, and one env (one dataset load) serves any number of
episodes. The env must therefore be a `DialogueEnv` (or offer `reset`, `step`, `snapshot`,
`restore` and `state` the same way).

Determinism: records contain no wall-clock values; reset seeds come from the episode specs and
each request's sampling seed is `derive_seed(episode seed, turn)`, so greedy runs (and sampled
runs on backends with per-request seeds) repeat exactly, in either scheduling.

Failures: an `Action` with `finish_reason == "error"` (an infrastructure failure) stops that
episode; its record has `infra_failure=True`, the error, no score, and the other episodes go
on. So does an action the env rejects (`InvalidActionError`, e.g. token ids out of range): the
backend produced something no model answer looks like. An exception raised by a policy is a
bug, not an infra failure, and propagates; the episodes finished before it have already been
handed to `run(on_record=...)`, so a caller can save them.

Log-probs: a turn's record carries the action's `logprobs` (when the policy was asked for them
and had them) for the token ids the env stored, which are the action's ids; were the env ever to
store other ids, the log-probs of a stored prefix are kept and anything else gives None
(`turn_logprobs`).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from optima_agents.policies.base import Action, Policy, TurnRequest, capabilities_of
from optima_agents.policies.logprobs import align_logprobs
from optima_agents.rollout.progress import ProgressBar
from optima_agents.rollout.records import EpisodeRecord, TurnRecord
from optima_agents.rollout.scheduling import (
    DEFAULT_MAX_INFLIGHT,
    Scheduling,
    check_max_inflight,
    resolve_scheduling,
    run_continuous,
)
from optima_envs.core.task import instance_gold_for_info
from optima_envs.errors import ConfigError, InvalidActionError

__all__ = ["EnvFactory", "EpisodeSpec", "RecordHook", "RolloutEngine", "RolloutStats", "answering_agents", "derive_seed", "episode_specs",
           "rollout", "turn_logprobs"]

logger = logging.getLogger("optima_agents.rollout")

EnvFactory = Callable[[], Any]
"""Builds a fresh env (e.g. `lambda: optima_envs.make("synth-hop-ia", max_turns=4)`)."""

RecordHook = Callable[[EpisodeRecord], None]
"""Called with each episode's record as soon as it finishes (in finishing order, not spec order)."""


def derive_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from integers (e.g. episode seed and turn), stable across runs."""
    state = np.random.SeedSequence([int(p) % 2**63 for p in parts]).generate_state(1, np.uint64)[0]
    return int(state >> 1)


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play.

    Attributes:
        seed: the `reset` seed (deals the evidence; picks the instance when `index` is None).
        index: the instance index (`reset(options={"index": ...})`); None: drawn from the seed.
        options: other reset options, e.g. `{"format_instruction": "sample"}`.
        sampling_seed: replaces the policies' `SamplingParams.seed` for this episode's requests,
            so k sampled copies of one episode (same `seed`, sampling seeds 0..k-1) run in one
            batch and draw what k separately seeded policies would. None: the policies' own.
        constrain_answers: every turn of an agent whose role gives answers is sampled constrained
            to the task's `answer_pattern` (one readable answer move, nothing else), on policies
            declaring `PolicyCapabilities.constraints`: exploration for a model that does not yet
            write moves the task can read. The record's `sampling` says which agents it applied to.
    """

    seed: int | None = 0
    index: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    sampling_seed: int | None = None
    constrain_answers: bool = False

    def reset_options(self) -> dict[str, Any]:
        options = dict(self.options)
        if self.index is not None:
            options["index"] = self.index
        return options


def episode_specs(count: int, *, seed: int = 0, first_index: int | None = 0,
                  options: Mapping[str, Any] | None = None) -> list[EpisodeSpec]:
    """`count` specs with seeds `seed, seed+1, ...` and indices `first_index, first_index+1, ...`
    (or indices drawn from the seeds when `first_index` is None)."""
    return [
        EpisodeSpec(seed=seed + i, index=None if first_index is None else first_index + i, options=dict(options or {}))
        for i in range(count)
    ]


@dataclass
class RolloutStats:
    """Counters of the last `run` (wall time lives here, never in records).

    `scheduling` is the mode the run used. Lock-step: `steps` counts steps and `policy_calls`
    the `act` calls. Continuous: `steps` counts the engine's wake-ups (each handles the replies
    that arrived together) and `policy_calls` the `submit` calls (one per turn request).
    `first_episode_s` is the time from the start to the first finished episode (None before
    one finished); `wall_s` runs to the last. `dead_urls` are the servers a replicated policy
    (`PolicyCapabilities.replicas`) had marked down when the run ended, also after a run that
    raised.
    """

    episodes: int = 0
    infra_failures: int = 0
    turns: int = 0
    steps: int = 0
    policy_calls: int = 0
    generated_tokens: int = 0
    wall_s: float = 0.0
    scheduling: str = "lock-step"
    first_episode_s: float | None = None
    dead_urls: list[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(eq=False)  # compared by identity: two live episodes may hold equal values
class _Live:
    position: int
    spec: EpisodeSpec
    snapshot: Any
    observations: Mapping[str, Any]
    produced: dict[int, Action] = field(default_factory=dict)


class RolloutEngine:
    """Plays episode specs with one policy per agent, batching every pending turn.

    Args:
        env: an env id (built with `optima_envs.make(env, **env_kwargs)`), an `EnvFactory`, or
            a ready env.
        policies: one `Policy` for all agents, or a mapping agent -> `Policy` covering every agent.
        env_kwargs (dict, *optional*): options for `optima_envs.make` when `env` is an id.
        max_live (int, *optional*): the most episodes in flight at once (None: all of them in
            lock step; see `max_inflight` for continuous). A finished episode's slot goes to the
            next spec.
        progress (bool, *optional*, defaults to True): show a progress bar (episodes, tokens/s).
        scheduling (str, *optional*, defaults to `"auto"`): `"lock-step"` (one `act` call per
            policy per step), `"continuous"` (each turn submitted as soon as its episode is
            ready; needs policies declaring `PolicyCapabilities.submit`) or `"auto"` (continuous
            when every policy can). See `optima_agents.rollout.scheduling`.
        max_inflight (int, *optional*): the most turn requests outstanding at once, one per live
            episode, so it also bounds the live episodes (with `max_live`, the smaller wins).
            None: no bound in lock step (every episode joins the first batch), and
            `DEFAULT_MAX_INFLIGHT` in continuous mode.

    Attributes:
        resolved_scheduling (str): the mode `run` uses, "lock-step" or "continuous".

    Raises:
        ConfigError: the policy mapping misses an agent or names one the env does not have; a bad
            `max_live`, `max_inflight` or `scheduling`, or "continuous" with a policy that cannot
            submit.
        TypeError: the env cannot snapshot/restore.
    """

    def __init__(self, env: str | EnvFactory | Any, policies: Policy | Mapping[str, Policy], *,
                 env_kwargs: Mapping[str, Any] | None = None, max_live: int | None = None, progress: bool = True,
                 scheduling: Scheduling = "auto", max_inflight: int | None = None):
        if isinstance(env, str):
            import optima_envs

            env = optima_envs.make(env, **dict(env_kwargs or {}))
        elif env_kwargs:
            raise ConfigError("env_kwargs is only used with an env id; pass them to your factory instead")
        elif callable(env) and not hasattr(env, "step"):
            env = env()
        for attr in ("reset", "step", "snapshot", "restore", "state"):
            if not hasattr(type(env), attr):
                raise TypeError(
                    f"RolloutEngine needs an env with reset/step/snapshot/restore/state (a DialogueEnv); "
                    f"{type(env).__name__} has no {attr!r}"
                )
        if max_live is not None and max_live < 1:
            raise ConfigError(f"max_live must be >= 1 or None, got {max_live}")
        check_max_inflight(max_inflight)
        self.env = env
        self.agents = tuple(env.possible_agents)
        self.policies = _policy_map(policies, self.agents)
        self.max_live = max_live
        self.max_inflight = max_inflight
        self.scheduling = scheduling
        self.resolved_scheduling = resolve_scheduling(scheduling, self.policies)
        self.progress = progress
        self.last_stats = RolloutStats()
        self._answering = answering_agents(env)

    def run(self, episodes: Sequence[EpisodeSpec] | int, *, on_record: RecordHook | None = None) -> list[EpisodeRecord]:
        """Play every spec (an int n means `episode_specs(n)`); records come back in spec order.

        `on_record` sees each record as its episode finishes, so the finished ones can be kept
        even when a policy raises and the run stops."""
        specs = episode_specs(episodes) if isinstance(episodes, int) else list(episodes)
        if any(spec.constrain_answers for spec in specs):
            self._check_constraints()
        identities = {a: dict(p.identity()) for a, p in self.policies.items()}
        sampling = {a: p.sampling.to_dict() for a, p in self.policies.items()}
        stats = self.last_stats = RolloutStats(scheduling=self.resolved_scheduling)
        results: list[EpisodeRecord | None] = [None] * len(specs)
        queue = deque(enumerate(specs))
        start = time.perf_counter()
        with ProgressBar(self.progress, len(specs), str(getattr(self.env, "env_id", "rollout"))) as bar:

            def finish(item: _Live, record: EpisodeRecord) -> None:
                record = results[item.position] = _with_policies(record, identities, sampling, item.spec,
                                                                 self._answering)
                stats.episodes += 1
                stats.infra_failures += record.infra_failure
                if stats.first_episode_s is None:
                    stats.first_episode_s = time.perf_counter() - start
                if on_record is not None:
                    on_record(record)
                bar.update(1, stats.tokens_per_s)

            def tick() -> None:
                stats.wall_s = time.perf_counter() - start
                bar.update(0, stats.tokens_per_s)

            limit = self._limit(len(specs))
            try:
                self._play(queue, limit, stats, finish, tick)
            finally:
                stats.dead_urls = self._dead_urls()
            tick()
        return results  # type: ignore[return-value]

    def _play(self, queue: deque, limit: int, stats: RolloutStats,
              finish: Callable[[_Live, EpisodeRecord], None], tick: Callable[[], None]) -> None:
        """Play the queue with the resolved scheduling."""
        if self.resolved_scheduling == "continuous":
            def woke(submitted: int) -> None:
                stats.steps += 1
                stats.policy_calls = submitted
                tick()

            run_continuous(queue, limit, start=self._start, next_turn=self._next_turn,
                           apply=lambda item, request, action: self._apply(item, request, action, stats),
                           finish=finish, on_wake=woke)
        else:
            self._run_lock_step(queue, limit, stats, finish, tick)

    def _dead_urls(self) -> list[str]:
        """The base URLs the run's replicated policies have marked down; logged when any are."""
        distinct = {id(p): p for p in self.policies.values()}.values()
        dead = sorted({url for p in distinct if capabilities_of(p).replicas for url in p.dead_urls})
        if dead:
            logger.warning("%d server(s) were down when the rollout ended: %s", len(dead), ", ".join(dead))
        return dead

    # ------------------------------------------------------------------ internals
    def _check_constraints(self) -> None:
        """Constrained turns need a task with a turn or answer pattern and policies that honour it."""
        task = getattr(self.env, "task", None)
        if task is None or (task.answer_pattern is None and task.turn_pattern is None):
            name = getattr(task, "name", type(self.env).__name__)
            raise ConfigError(f"{name} declares no answer_pattern or turn_pattern, so its turns cannot be sampled "
                              "constrained; set constrain_answers only for tasks that have one (the games, "
                              "synth-hop-ia)")
        unable = sorted({type(self.policies[a]).__name__ for a in self._answering
                         if not capabilities_of(self.policies[a]).constraints})
        if unable:
            raise ConfigError(f"constrained answers need policies that declare the constraints capability (vllm, "
                              f"openai); {', '.join(unable)} does not")

    def _start(self, position: int, spec: EpisodeSpec) -> _Live:
        observations, _ = self.env.reset(seed=spec.seed, options=spec.reset_options())
        return _Live(position, spec, self.env.snapshot(), observations)

    def _limit(self, count: int) -> int:
        """The most live episodes: `max_live` and `max_inflight`, the smaller; unbounded in lock
        step without either, `DEFAULT_MAX_INFLIGHT` in continuous mode."""
        bounds = [b for b in (self.max_live, self.max_inflight) if b is not None]
        if not bounds and self.resolved_scheduling == "continuous":
            bounds = [DEFAULT_MAX_INFLIGHT]
        return max(1, min(bounds, default=count))

    def _run_lock_step(self, queue: deque, limit: int, stats: RolloutStats,
                       finish: Callable[[_Live, EpisodeRecord], None], tick: Callable[[], None]) -> None:
        live: list[_Live] = []
        while queue or live:
            while queue and len(live) < limit:
                live.append(self._start(*queue.popleft()))
            for item, record in self._step(live, stats):
                live.remove(item)
                finish(item, record)
            tick()

    def _next_turn(self, item: _Live) -> tuple[Policy, TurnRequest]:
        """The policy and request of a live episode's next turn (seeded from episode seed and turn)."""
        speaker = next(iter(item.observations.values()))["speaker"]
        observation = item.observations[speaker]
        seed = None if item.spec.seed is None else derive_seed(item.spec.seed, observation["turn"])
        constraint = None
        if item.spec.constrain_answers and speaker in self._answering:
            task, instance = self.env.task, item.snapshot.state.instance
            heard = tuple(m["text"] for m in observation["transcript"] if m["speaker"] != speaker)
            constraint = (task.answer_pattern(instance) if task.turn_pattern is None
                          else task.turn_pattern(instance, observation["evidence"], heard))
        return self.policies[speaker], TurnRequest(agent=speaker, observation=observation, seed=seed,
                                                   sampling_seed=item.spec.sampling_seed, constraint=constraint)

    def _step(self, live: list[_Live], stats: RolloutStats) -> list[tuple[_Live, EpisodeRecord]]:
        """One turn of every live episode: one `act` call per distinct policy."""
        groups: dict[int, tuple[Policy, list[_Live], list[TurnRequest]]] = {}
        for item in live:
            policy, request = self._next_turn(item)
            group = groups.setdefault(id(policy), (policy, [], []))
            group[1].append(item)
            group[2].append(request)
        stats.steps += 1
        finished = []
        for policy, items, requests in groups.values():
            actions = policy.act(requests)
            stats.policy_calls += 1
            if len(actions) != len(requests):
                raise RuntimeError(
                    f"policy {type(policy).__name__} returned {len(actions)} actions for {len(requests)} requests"
                )
            for item, request, action in zip(items, requests, actions):
                done = self._apply(item, request, action, stats)
                if done is not None:
                    finished.append((item, done))
        return finished

    def _apply(self, item: _Live, request: TurnRequest, action: Action, stats: RolloutStats) -> EpisodeRecord | None:
        env = self.env
        env.restore(item.snapshot)
        where = f"turn {request.observation['turn']} ({request.agent})"
        if action.failed:
            return _record(env, item, error=f"{where}: {action.error or 'policy error'}")
        try:
            observations, *_ = env.step({request.agent: action.to_env_action()})
        except InvalidActionError as error:
            return _record(env, item, error=f"{where}: the env rejected the action: {error}")
        item.produced[request.observation["turn"]] = action
        item.snapshot, item.observations = env.snapshot(), observations
        stats.turns += 1
        stats.generated_tokens += int(action.meta.get("generated_tokens", len(action.token_ids)))
        return _record(env, item) if not env.agents else None


def rollout(env: str | EnvFactory | Any, policies: Policy | Mapping[str, Policy],
            episodes: Sequence[EpisodeSpec] | int, **kwargs: Any) -> list[EpisodeRecord]:
    """One-call form: `RolloutEngine(env, policies, **kwargs).run(episodes)`."""
    return RolloutEngine(env, policies, **kwargs).run(episodes)


def _policy_map(policies: Policy | Mapping[str, Policy], agents: Sequence[str]) -> dict[str, Policy]:
    if not isinstance(policies, Mapping):
        if not hasattr(policies, "act"):
            raise TypeError(f"policies must be a Policy or a mapping agent -> Policy, got {type(policies).__name__}")
        return {a: policies for a in agents}
    missing = [a for a in agents if a not in policies]
    unknown = [a for a in policies if a not in agents]
    if missing or unknown:
        raise ConfigError(
            f"the policy mapping must name every agent {list(agents)} exactly; "
            f"missing {missing}, unknown {unknown}"
        )
    return {a: policies[a] for a in agents}


def turn_logprobs(action: Action | None, stored_ids: Sequence[int] | None) -> tuple[float, ...] | None:
    """The log-probs of the ids the env stored for a turn: the action's, for the stored ids when
    they are the action's ids or a prefix of them; None when the action has none, the env stored
    no ids, or stored ids the action did not produce."""
    if action is None or action.logprobs is None or stored_ids is None:
        return None
    return align_logprobs(action.token_ids, action.logprobs, stored_ids)


def answering_agents(env: Any) -> frozenset[str]:
    """The agents whose role gives answers (the ones `EpisodeSpec.constrain_answers` applies to);
    every agent for an env without a composed task."""
    task = getattr(env, "task", None)
    if task is None:
        return frozenset(env.possible_agents)
    roles = task.prompts.roles(len(env.possible_agents))
    return frozenset(a for a, role in zip(env.possible_agents, roles) if role.gives_answer)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _record(env: Any, item: _Live, *, error: str | None = None) -> EpisodeRecord:
    """Build the record from the env's current state (restored to this episode)."""
    state = env.state
    turns = []
    for m in state.messages:
        action = item.produced.get(m.turn)
        turns.append(TurnRecord(
            turn=m.turn, speaker=m.speaker, text=m.text, token_ids=tuple(m.token_ids or ()),
            num_tokens=m.num_tokens, tokens_exact=m.token_ids is not None, answer=m.answer,
            finish_reason=action.finish_reason if action else "stop",
            prompt_tokens=action.prompt_tokens if action else 0, truncated=m.truncated,
            logprobs=turn_logprobs(action, m.token_ids),
        ))
    outcome = state.outcome
    failed = error is not None
    score = None if failed else outcome.get("score")
    components = {} if failed else {"tokens": float(state.total_tokens)}
    if score is not None:
        components = {"score": float(score), **components}
    return EpisodeRecord(
        env_id=str(env.env_id), env_version=int(env.metadata.get("version", 1)), seed=item.spec.seed,
        index=item.spec.index, options=_jsonable(dict(item.spec.options)), instance_id=state.instance.instance_id,
        question=state.instance.question, gold=_jsonable(instance_gold_for_info(state.instance)),
        agents=tuple(env.possible_agents), roles=tuple(r.name for r in state.roles),
        system_prompts=tuple(state.system_prompts), format_instruction=state.format_instruction,
        turns=tuple(turns), final_answer=None if failed else outcome.get("answer"), score=score,
        score_ok=False if failed else bool(outcome.get("score_ok", True)),
        score_error=None if failed else outcome.get("score_error"),
        end_reason="infra_failure" if failed else str(state.end_reason),
        total_tokens=int(state.total_tokens),
        agent_tokens={a: int(t) for a, t in zip(env.possible_agents, state.agent_tokens)},
        reward_components=components, infra_failure=failed, error=error,
        plain_system_prompts=_plain_prompts(state),
    )


def _plain_prompts(state: Any) -> tuple[str, ...] | None:
    """The system prompts without the format instruction, as the env kept them at reset: its
    prompts themselves when it added none; None when it added one but an env's state does not
    keep the plain prompts (training then rebuilds them by resetting the env without the instruction)."""
    plain = getattr(state, "plain_system_prompts", None)
    if plain is not None:
        return tuple(plain)
    return None if state.format_instruction else tuple(state.system_prompts)


def _with_policies(record: EpisodeRecord, identities: Mapping[str, Any], sampling: Mapping[str, Any],
                   spec: EpisodeSpec, answering: frozenset[str]) -> EpisodeRecord:
    """The record with its policies and the sampling it was played with: an episode's own
    `sampling_seed` stands in the place of each policy's seed, so the record can be replayed, and
    agents whose answers were constrained say so (`constrained_answers`)."""
    if spec.sampling_seed is not None:
        sampling = {agent: {**settings, "seed": spec.sampling_seed} for agent, settings in sampling.items()}
    if spec.constrain_answers:
        sampling = {agent: {**settings, "constrained_answers": True} if agent in answering else settings
                    for agent, settings in sampling.items()}
    return replace(record, policies=_jsonable(identities), sampling=_jsonable(sampling))
