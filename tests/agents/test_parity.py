"""Backend parity: transformers, vLLM in-process and the OpenAI-compatible server agree greedily.

The rule and its measurements are in `optima_agents.policies.parity`: exact token ids without a
reference; with the fp32 reference, every generated token within 0.75 nats of the reference's
greedy choice (bf16 drift measured up to 0.40 nats in about 500 replies; broken models 1.4-4.8).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from optima_agents.policies import Action, HFPolicy, SamplingParams, ScriptedPolicy
from optima_agents.policies.parity import (
    PARITY_OBSERVATIONS,
    BackendParityError,
    ParityTolerance,
    check_parity,
    parity_requests,
)
from tests.agents.conftest_servers import reference_scorer, server_policy, vllm_policy, vllm_server  # noqa: F401

PARITY_MAX_NEW_TOKENS = 24


def scripted(replies: list[str], name: str, prompt_tokens: int = 10) -> ScriptedPolicy:
    answers = iter(replies * 10)
    return ScriptedPolicy(lambda obs: Action(text=next(answers), token_ids=(1, 2, len(replies)), prompt_tokens=prompt_tokens),
                          name=name)


class TestRuleWithoutModel:
    def test_identical_outputs_pass(self):
        report = check_parity({"a": ScriptedPolicy(lambda o: "same", name="a"),
                               "b": ScriptedPolicy(lambda o: "same", name="b")})
        assert report.ok and report.exact_matches("b") == len(PARITY_OBSERVATIONS)
        assert report.rule == "identical token ids; equal prompt lengths"

    def test_different_ids_fail_without_reference(self):
        a = ScriptedPolicy(lambda o: Action(text="yes", token_ids=(5, 6)), name="a")
        b = ScriptedPolicy(lambda o: Action(text="no", token_ids=(5, 7)), name="b")
        report = check_parity({"a": a, "b": b}, parity_requests()[:2])
        assert not report.ok and report.prompts[0].first_divergence["b"] == 1
        assert report.failures[0] == "prompt 0: b differs from a at token 1: 'no' vs 'yes'"
        with pytest.raises(BackendParityError, match=re.escape("backend parity failed (identical token ids")):
            report.raise_for_failures()

    def test_prompt_lengths_must_match(self):
        report = check_parity({"a": scripted(["x"], "a", prompt_tokens=10), "b": scripted(["x"], "b", prompt_tokens=11)},
                              parity_requests()[:1])
        assert report.failures == ("prompt 0: prompt lengths differ {'a': 10, 'b': 11} "
                                   "(chat template or BOS/special tokens differ)",)

    def test_error_actions_fail(self):
        broken = ScriptedPolicy(lambda o: Action(text="", finish_reason="error", error="refused"), name="broken")
        report = check_parity({"broken": broken}, parity_requests()[:1])
        assert report.failures == ("prompt 0: broken returned an infrastructure error: refused",)

    def test_sampling_policies_are_refused(self):
        hot = ScriptedPolicy(lambda o: "x", name="hot")
        hot.sampling = SamplingParams(temperature=0.7)
        with pytest.raises(ValueError, match=re.escape("policy 'hot' has temperature 0.7")):
            check_parity({"hot": hot})

    def test_tolerance_is_checked(self):
        with pytest.raises(ValueError, match=re.escape("max_gap_nats must be >= 0, got -1")):
            ParityTolerance(max_gap_nats=-1)


class FakeReference:
    """A reference scorer double: records what it was asked to score, returns scripted gaps."""

    dtype = "float32"
    eos_token_id = 2
    tokenizer = SimpleNamespace(decode=lambda ids: f"<{ids[0]}>")

    def __init__(self, gap: float = 0.0, at: int = 0):
        self.gap, self.at, self.calls = gap, at, []

    def gaps(self, observation, token_ids, *, ended):
        self.calls.append((list(token_ids), ended))
        out = [0.0] * (len(token_ids) + ended)
        out[self.at] = self.gap
        return out


class TestScoredIds:
    def test_raw_ids_are_scored_not_the_canonical_ones(self):
        reply = Action(text="ab", token_ids=(5, 6), meta={"raw_token_ids": (5, 7, 2, 2), "reencoded": True})
        reference = FakeReference()
        report = check_parity({"p": ScriptedPolicy(lambda o: reply)}, parity_requests()[:1], reference=reference)
        assert reference.calls == [([5, 7], True)] and report.ok  # cut at the first end-of-turn id

    def test_reencoded_reply_without_raw_ids_is_not_scored(self):
        reply = Action(text="ab", token_ids=(5, 6), meta={"reencoded": True})
        reference = FakeReference()
        report = check_parity({"p": ScriptedPolicy(lambda o: reply)}, parity_requests()[:2], reference=reference)
        assert reference.calls == [] and report.unscored("p") == 2 and report.ok
        assert "2 not scored" in report.summary()

    def test_stored_ids_are_scored_when_not_reencoded(self):
        reply = Action(text="ab", token_ids=(4,), finish_reason="length")
        reference = FakeReference()
        check_parity({"p": ScriptedPolicy(lambda o: reply)}, parity_requests()[:1], reference=reference)
        assert reference.calls == [([4], False)]

    def test_a_large_gap_fails_with_the_token_and_limit(self):
        reply = Action(text="ab", token_ids=(4, 9), prompt_tokens=3)
        report = check_parity({"p": ScriptedPolicy(lambda o: reply)}, parity_requests()[:1],
                              reference=FakeReference(gap=2.0, at=1))
        assert report.failures == ("prompt 0: p token 1 ('<9>') is 2.00 nats below the reference's greedy "
                                   "choice (allowed 0.75); reply 'ab'",)
        assert report.rule == ("every token within 0.75 nats of the float32 reference's greedy choice; "
                               "equal prompt lengths")


@pytest.mark.model
class TestReferenceRule:
    def test_reference_scores_its_own_greedy_output_at_zero(self, reference_scorer, smollm_tokenizer):
        fp32 = HFPolicy(reference_scorer.model, tokenizer=smollm_tokenizer, num_threads=1,
                        sampling=SamplingParams(max_new_tokens=PARITY_MAX_NEW_TOKENS))
        report = check_parity({"hf-fp32": fp32}, reference=reference_scorer)
        assert report.ok, report.summary()
        assert report.largest_gap("hf-fp32") < 1e-3

    def test_a_broken_model_is_caught(self, reference_scorer, smollm_tokenizer, embedded_model_dir):
        """Weights with 5% noise (measured: 5 of the 8 probe prompts over 0.75 nats, up to 4.8) fail."""
        broken = HFPolicy(str(embedded_model_dir), tokenizer=smollm_tokenizer, dtype="float32", num_threads=1,
                          sampling=SamplingParams(max_new_tokens=PARITY_MAX_NEW_TOKENS))
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for param in broken.model.parameters():
                if param.dim() == 2:
                    param.add_(torch.randn(param.shape, generator=generator) * param.std() * 0.05)
        report = check_parity({"broken": broken}, reference=reference_scorer)
        assert not report.ok and report.largest_gap("broken") > 0.75
        assert any("nats below the reference's greedy choice" in f for f in report.failures)


@pytest.mark.model
@pytest.mark.server
def test_all_backends_agree(hf_policy, vllm_policy, server_policy, reference_scorer, record_property):
    """transformers, vLLM compiled in float32 (in-process) and vLLM eager at dtype auto (server)."""
    greedy = SamplingParams(max_new_tokens=PARITY_MAX_NEW_TOKENS)
    policies = {
        "hf": hf_policy.with_sampling(greedy),
        "vllm-compiled": vllm_policy.with_sampling(greedy),
        "server-eager": server_policy.with_sampling(greedy),
    }
    report = check_parity(policies, reference=reference_scorer)
    record_property("parity_summary", report.summary())
    print(report.summary())
    assert report.ok, report.summary()
    for name in policies:
        assert report.largest_gap(name) <= 0.75
    # The vLLM backends report the ids they generated, so every reply of theirs is scored.
    assert report.unscored("vllm-compiled") == report.unscored("server-eager") == 0
