"""`OpenAIPolicy.submit` and continuous rollouts through real sockets (HTTP doubles)."""

from __future__ import annotations

from collections import Counter

from optima_agents.policies import OpenAIPolicy, SamplingParams, TurnRequest
from optima_agents.policies.base import SubmittingPolicy
from optima_agents.rollout import RolloutEngine, episode_specs
from tests.agents.conftest_servers import Reply, completion, stub_server  # noqa: F401  (fixture)


def ask(question: str, seed: int | None) -> TurnRequest:
    observation = {"agent": "alice", "system_prompt": "You are a helpful assistant.",
                   "transcript": ({"speaker": "bob", "text": question},)}
    return TurnRequest("alice", observation, seed=seed)


def fast_policy(*urls: str, **kwargs) -> OpenAIPolicy:
    options = {"timeout_s": 2.0, "max_retries": 1, "backoff_s": 0.01, "tokenizer": None, **kwargs}
    return OpenAIPolicy("stub-model", base_urls=list(urls), **options)


class TestSubmit:
    def test_submit_sends_what_act_sends(self, stub_server):
        stub = stub_server(default=Reply(body=completion("Hi.", token_ids=[5, 6])))
        policy = fast_policy(stub.base_url, sampling=SamplingParams(temperature=0.7, max_new_tokens=9))
        assert isinstance(policy, SubmittingPolicy) and policy.capabilities.submit
        request = ask("Hello?", seed=11)
        submitted = policy.submit(request).result(timeout=10)
        acted = policy.act([request])[0]
        assert submitted == acted and submitted.token_ids == (5, 6)
        first, second = stub.received
        assert first == second  # same messages, sampling and seed
        policy.close()

    def test_continuous_rollout_spreads_over_urls_and_equals_lock_step(self, stub_server):
        reply = Reply(body=completion("I agree.", token_ids=[40, 41, 42]), delay_s=0.01)
        stubs = [stub_server(default=reply), stub_server(default=reply)]
        policy = fast_policy(*(s.base_url for s in stubs), concurrency=8)
        specs = episode_specs(8)
        continuous = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 3}, progress=False)
        assert continuous.resolved_scheduling == "continuous"
        records = continuous.run(specs)
        received = [len(s.received) for s in stubs]
        assert sum(received) == 24 and min(received) > 0
        seeds = Counter(body["seed"] for s in stubs for body in s.received)
        lock_step = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 3}, progress=False,
                                  scheduling="lock-step").run(specs)
        assert records == lock_step
        assert Counter(body["seed"] for s in stubs for body in s.received) == seeds + seeds  # same seeds again
        policy.close()

    def test_a_failed_request_is_an_infra_failure_record(self, stub_server):
        stub = stub_server(script=[Reply(), Reply(status=400, body={"error": "bad request"})])
        policy = fast_policy(stub.base_url, concurrency=1)
        records = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 2}, progress=False,
                                scheduling="continuous", max_inflight=1).run(episode_specs(2))
        failed = [r for r in records if r.infra_failure]
        assert len(failed) == 1 and failed[0] is records[0] and failed[0].num_turns == 1
        assert failed[0].error.startswith("turn 1 (bob): request failed after 1 attempt: ")
        assert "HTTP 400" in failed[0].error and failed[0].score is None and not failed[0].scored
        assert not records[1].infra_failure and records[1].num_turns == 2
        policy.close()
