"""Continuous scheduling in the rollout engine: same records as lock step, bounded in-flight
requests, failures, mode selection, and the MCTS planner left as it was.

The backend double (`AsyncReplies`) answers `submit` on a thread pool after a random delay, so
replies complete in another order than they were submitted; its replies depend only on the
request (observation and seed), as a backend with per-request seeds does.
"""

from __future__ import annotations

import random
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import pytest

import optima_envs
from optima_agents.mcts import MCTSConfig, MCTSPlanner, TreeTask
from optima_agents.policies import Action, PolicyCapabilities, SamplingParams, ScriptedPolicy, TurnRequest
from optima_agents.policies.base import SubmittingPolicy
from optima_agents.rollout import DEFAULT_MAX_INFLIGHT, EpisodeSpec, RolloutEngine, episode_specs
from optima_envs.errors import ConfigError
from optima_envs.test import share_evidence_then

from optima_agents.testing import first_utterance_reward

ENV_KWARGS = {"max_turns": 6}


def gold_answers(specs: Sequence[EpisodeSpec]) -> dict[str, str]:
    env = optima_envs.make("synth-hop-ia")
    gold = {}
    for spec in specs:
        env.reset(seed=spec.seed, options=spec.reset_options())
        gold[env.state.instance.question] = env.state.instance.gold_text
    return gold


class SeededReplies:
    """A reply per request from the request alone: a request whose seed is divisible by 3 shares
    evidence then answers (so the episode can end early), any other chats on; `fail` (seed ->
    error text) turns a request into an infrastructure failure, `boom` into a raised error."""

    def __init__(self, gold: Mapping[str, str], *, fail: Mapping[int, str] | None = None,
                 boom: set[int] | None = None):
        self.gold, self.fail, self.boom = gold, dict(fail or {}), set(boom or ())

    def __call__(self, request: TurnRequest) -> Action:
        seed = request.seed or 0
        if seed in self.boom:
            raise RuntimeError(f"backend bug on seed {seed}")
        if seed in self.fail:
            return Action(text="", finish_reason="error", error=self.fail[seed])
        observation = request.observation
        if seed % 3 == 0:
            text = share_evidence_then(self.gold[observation["question"]])(observation)
        else:
            text = f"{observation['agent']} wonders ({seed % 997}) at turn {observation['turn']}."
        return Action(text=text, meta={"seed": seed})


class AsyncReplies:
    """A submitting policy over `reply`: `act` answers in order; `submit` answers on a pool of
    `threads` after a random delay (up to `max_delay_s`, drawn from `delay_seed`). Records the
    requests it saw, the order replies completed in and the most requests outstanding at once."""

    capabilities = PolicyCapabilities(submit=True)

    def __init__(self, reply: SeededReplies, *, delay_seed: int = 0, max_delay_s: float = 0.004, threads: int = 8):
        self.reply = reply
        self.sampling = SamplingParams(temperature=0.7, max_new_tokens=32)
        self.requests: list[TurnRequest] = []
        self.submitted: list[int] = []
        self.completed: list[int] = []
        self.outstanding = self.max_outstanding = self.act_calls = 0
        self._rng = random.Random(delay_seed)
        self._max_delay_s = max_delay_s
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads)

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        self.act_calls += 1
        self.requests += requests
        return [self.reply(r) for r in requests]

    def submit(self, request: TurnRequest) -> Future[Action]:
        self.requests.append(request)
        ticket = len(self.submitted)
        self.submitted.append(ticket)
        delay = self._rng.random() * self._max_delay_s
        with self._lock:
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)

        def answer() -> Action:
            time.sleep(delay)
            try:
                return self.reply(request)
            finally:
                with self._lock:
                    self.outstanding -= 1
                    self.completed.append(ticket)

        return self._pool.submit(answer)

    def identity(self) -> dict[str, Any]:
        return {"backend": "async-double", "model": "seeded", "sampling": self.sampling.to_dict()}

    def seen(self) -> list[tuple]:
        return sorted((r.agent, r.observation["question"], r.observation["turn"], r.seed) for r in self.requests)


def run(policy: Any, specs: Sequence[EpisodeSpec], **kwargs: Any) -> tuple[list, RolloutEngine]:
    engine = RolloutEngine("synth-hop-ia", policy, env_kwargs=ENV_KWARGS, progress=False, **kwargs)
    return engine.run(specs), engine


class TestSameRecords:
    def test_continuous_equals_lock_step_with_out_of_order_replies(self):
        specs = episode_specs(24, seed=100)
        gold = gold_answers(specs)
        lock_step_policy = AsyncReplies(SeededReplies(gold))
        lock_step, engine = run(lock_step_policy, specs, scheduling="lock-step")
        assert engine.resolved_scheduling == "lock-step" and engine.last_stats.scheduling == "lock-step"
        continuous_policy = AsyncReplies(SeededReplies(gold), delay_seed=1)
        continuous, engine = run(continuous_policy, specs, scheduling="continuous", max_inflight=6)
        assert engine.last_stats.scheduling == "continuous" and continuous_policy.act_calls == 0
        assert continuous_policy.completed != continuous_policy.submitted  # replies overtook each other
        assert continuous == lock_step
        assert continuous_policy.seen() == lock_step_policy.seen()  # the same requests with the same seeds
        assert len({r.num_turns for r in continuous}) > 1 and any(r.score == 1.0 for r in continuous)

    def test_continuous_runs_repeat_exactly(self):
        specs = episode_specs(16, seed=7)
        gold = gold_answers(specs)
        first, _ = run(AsyncReplies(SeededReplies(gold), delay_seed=2), specs, scheduling="continuous", max_inflight=5)
        second, _ = run(AsyncReplies(SeededReplies(gold), delay_seed=3), specs, scheduling="continuous", max_inflight=5)
        assert [r.to_dict() for r in first] == [r.to_dict() for r in second]

    def test_auto_runs_continuous_for_a_submitting_policy(self):
        specs = episode_specs(6)
        policy = AsyncReplies(SeededReplies(gold_answers(specs)))
        assert isinstance(policy, SubmittingPolicy)
        records, engine = run(policy, specs)
        assert engine.scheduling == "auto" and engine.resolved_scheduling == "continuous"
        stats = engine.last_stats
        assert stats.policy_calls == stats.turns == sum(r.num_turns for r in records) == len(policy.requests)
        assert stats.episodes == 6 and 0 < stats.first_episode_s <= stats.wall_s and stats.steps >= 1
        assert stats.generated_tokens == 0  # the double reports no token ids


class TestInflightBound:
    def test_outstanding_requests_never_exceed_max_inflight(self):
        specs = episode_specs(20)
        policy = AsyncReplies(SeededReplies(gold_answers(specs)))
        records, _ = run(policy, specs, scheduling="continuous", max_inflight=4)
        assert policy.max_outstanding == 4 and len(records) == 20 and all(r is not None for r in records)

    def test_max_live_and_max_inflight_the_smaller_wins(self):
        specs = episode_specs(10)
        policy = AsyncReplies(SeededReplies(gold_answers(specs)))
        run(policy, specs, scheduling="continuous", max_inflight=5, max_live=3)
        assert policy.max_outstanding == 3

    def test_default_bound_in_continuous_mode(self):
        engine = RolloutEngine("synth-hop-ia", AsyncReplies(SeededReplies({})), progress=False)
        assert engine._limit(10_000) == DEFAULT_MAX_INFLIGHT
        lock_step = RolloutEngine("synth-hop-ia", ScriptedPolicy(lambda o: "hi"), progress=False)
        assert lock_step._limit(10_000) == 10_000  # lock step batches every episode, as before

    def test_lock_step_batches_are_bounded_by_max_inflight(self):
        specs = episode_specs(7)
        policy = AsyncReplies(SeededReplies(gold_answers(specs)))
        calls: list[int] = []
        act = policy.act
        policy.act = lambda requests: (calls.append(len(requests)), act(requests))[1]  # type: ignore[method-assign]
        run(policy, specs, scheduling="lock-step", max_inflight=3)
        assert max(calls) == 3


class TestFailures:
    def test_error_action_is_the_same_infra_failure_record_in_both_modes(self):
        specs = episode_specs(9, seed=30)
        gold = gold_answers(specs)
        lock_step_probe = AsyncReplies(SeededReplies(gold))
        run(lock_step_probe, specs, scheduling="lock-step")
        failing_seed = next(r.seed for r in lock_step_probe.requests if r.observation["turn"] == 1)
        fail = {failing_seed: "HTTP 503 after 3 retries"}
        lock_step, _ = run(AsyncReplies(SeededReplies(gold, fail=fail)), specs, scheduling="lock-step")
        continuous, engine = run(AsyncReplies(SeededReplies(gold, fail=fail), delay_seed=5), specs,
                                 scheduling="continuous", max_inflight=4)
        assert continuous == lock_step
        failed = [r for r in continuous if r.infra_failure]
        assert len(failed) == 1 and engine.last_stats.infra_failures == 1
        record = failed[0]
        assert record.error.endswith("HTTP 503 after 3 retries") and record.error.startswith("turn 1 (bob): ")
        assert record.score is None and not record.scored and record.end_reason == "infra_failure"
        assert record.reward_components == {}

    def test_a_raised_error_stops_the_run_and_finished_episodes_are_kept(self):
        specs = episode_specs(12, seed=50)
        gold = gold_answers(specs)
        probe = AsyncReplies(SeededReplies(gold))
        records, _ = run(probe, specs, scheduling="continuous", max_inflight=3)
        last_spec = specs[-1]
        boom_seed = next(r.seed for r in probe.requests
                         if r.observation["turn"] == 2 and r.observation["question"] == records[-1].question)
        policy = AsyncReplies(SeededReplies(gold, boom={boom_seed}))
        finished: list = []
        engine = RolloutEngine("synth-hop-ia", policy, env_kwargs=ENV_KWARGS, progress=False, scheduling="continuous",
                               max_inflight=3)
        with pytest.raises(RuntimeError, match=re.escape(f"backend bug on seed {boom_seed}")):
            engine.run(specs, on_record=finished.append)
        assert finished and all(r.seed != last_spec.seed for r in finished)
        assert all(r == records[specs.index(EpisodeSpec(seed=r.seed, index=r.index))] for r in finished)


class TestSchedulingChoice:
    def test_auto_keeps_lock_step_unless_every_policy_submits(self):
        submitting = AsyncReplies(SeededReplies({}))
        scripted = ScriptedPolicy(lambda o: "hi")
        assert RolloutEngine("synth-hop-ia", scripted, progress=False).resolved_scheduling == "lock-step"
        mixed = RolloutEngine("synth-hop-ia", {"alice": submitting, "bob": scripted}, progress=False)
        assert mixed.resolved_scheduling == "lock-step"
        both = RolloutEngine("synth-hop-ia", {"alice": submitting, "bob": submitting}, progress=False)
        assert both.resolved_scheduling == "continuous"

    def test_continuous_needs_a_submitting_policy(self):
        message = ("scheduling='continuous' needs policies that take requests one at a time "
                   "(PolicyCapabilities.submit); ScriptedPolicy does not. Use scheduling='auto' or 'lock-step', "
                   "or a backend that submits (vllm, openai)")
        with pytest.raises(ConfigError, match=re.escape(message)):
            RolloutEngine("synth-hop-ia", ScriptedPolicy(lambda o: "hi"), scheduling="continuous")

    def test_bad_values(self):
        with pytest.raises(ConfigError, match=re.escape(
                "scheduling must be one of ['auto', 'lock-step', 'continuous'], got 'eager'")):
            RolloutEngine("synth-hop-ia", ScriptedPolicy(lambda o: "hi"), scheduling="eager")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=re.escape("max_inflight must be an integer >= 1 or None, got 0")):
            RolloutEngine("synth-hop-ia", ScriptedPolicy(lambda o: "hi"), max_inflight=0)


class SeededPick:
    """A seeded sampler stand-in for MCTS (one of `options` by request seed), with `submit` too."""

    capabilities = PolicyCapabilities(submit=True)

    def __init__(self, options: Sequence[str]):
        self.options = options
        self.sampling = SamplingParams(temperature=0.7, max_new_tokens=256)
        self.submits = 0

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        return [Action(text=self.options[r.seed % len(self.options)]) for r in requests]

    def submit(self, request: TurnRequest) -> Future[Action]:
        self.submits += 1
        raise AssertionError("the MCTS planner submits nothing: it batches each step with act")

    def identity(self) -> dict[str, Any]:
        return {"backend": "seeded-pick"}


class TestMCTSUnchanged:
    def test_planner_output_does_not_depend_on_the_submit_capability(self):
        options = ["I say <A>good</A>", "I say <A>bad one</A>", "I say <A>bad two</A>", "<A>good</A>"]
        values = {options[0]: 1.0, options[1]: 0.0, options[2]: 0.25}
        config = MCTSConfig(iterations=3, seed=4)
        tasks = [TreeTask("q0", seed=0), TreeTask("q1", seed=1)]

        def search(policy: Any) -> list:
            planner = MCTSPlanner(policy, first_utterance_reward(values), config)
            return planner.search(optima_envs.make("synth-hop-ia"), tasks).trees

        class Plain:  # the same sampler without the capability
            sampling = SamplingParams(temperature=0.7, max_new_tokens=256)
            act = SeededPick.act

            def __init__(self) -> None:
                self.options = options

            def identity(self) -> dict[str, Any]:
                return {"backend": "seeded-pick"}

        submitting = SeededPick(options)
        with_capability, without = search(submitting), search(Plain())
        assert submitting.submits == 0
        shape = [[(n.node_id, n.parent_id, n.text, n.visits, n.value) for n in tree] for tree in with_capability]
        assert shape == [[(n.node_id, n.parent_id, n.text, n.visits, n.value) for n in tree] for tree in without]
        assert sum(len(t) for t in shape) > 2


class TestRolloutCommand:
    def test_scheduling_and_max_inflight_reach_the_engine(self, tmp_path, monkeypatch):
        from optima_agents import policies
        from optima_train.cli.rollout import run_rollout

        specs = [EpisodeSpec(seed=i, index=i) for i in range(6)]
        policy = AsyncReplies(SeededReplies(gold_answers(specs)))
        monkeypatch.setattr(policies, "make_policy", lambda *a, **k: policy)
        records, stats, _ = run_rollout(env_id="synth-hop-ia", model="x", backend="openai", episodes=6, out=None,
                                        env_kwargs=ENV_KWARGS, progress=False, base_urls=["http://127.0.0.1:9/v1"],
                                        scheduling="continuous", max_inflight=2)
        assert stats.scheduling == "continuous" and policy.max_outstanding == 2 and len(records) == 6

    def test_bad_flags_fail_before_the_model_loads(self, tmp_path):
        from typer.testing import CliRunner

        from optima_train.cli import app

        base = ["rollout", "--env", "synth-hop-ia", "--out", str(tmp_path / "buf")]
        result = CliRunner().invoke(app, [*base, "--scheduling", "eager"])
        assert result.exit_code == 2
        assert "--scheduling must be one of ['auto', 'lock-step', 'continuous'], got 'eager'" in result.output
        result = CliRunner().invoke(app, [*base, "--backend", "hf", "--scheduling", "continuous"])
        assert result.exit_code == 2 and "--scheduling continuous needs a backend that takes requests one at a time" \
            in result.output


class TestConfigFields:
    @pytest.mark.parametrize("config", ["isft", "grpo"])
    def test_generation_sections_parse_and_check_them(self, config):
        from optima_train.config.io import from_dict
        from optima_train.grpo.grpo_config import GRPOConfig
        from optima_train.isft.isft_config import ISFTConfig

        cls = {"isft": ISFTConfig, "grpo": GRPOConfig}[config]
        default = from_dict(cls, {}).generation
        assert (default.scheduling, default.max_inflight) == ("auto", None)
        chosen = from_dict(cls, {"generation": {"scheduling": "continuous", "max_inflight": 8}}).generation
        assert (chosen.scheduling, chosen.max_inflight) == ("continuous", 8)
        with pytest.raises(ConfigError, match=re.escape(
                "generation.scheduling: 'eager' is not one of ['auto', 'lock-step', 'continuous']")):
            from_dict(cls, {"generation": {"scheduling": "eager"}})
        with pytest.raises(ConfigError, match=re.escape(
                "generation.max_inflight must be an integer >= 1 or None, got 0")):
            from_dict(cls, {"generation": {"max_inflight": 0}})
        # they change how fast dialogues are sampled, never which: a run may resume with others
        assert {"generation.scheduling", "generation.max_inflight"} <= set(cls.RESUMABLE)
