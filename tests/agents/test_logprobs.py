"""Per-token log-probs without a model: alignment and parsing (pure functions), the OpenAI-compatible
backend against HTTP doubles answering with replies in vLLM 0.32's and OpenAI's formats, and
rollout records carrying them (and, without them, staying exactly as they were)."""

from __future__ import annotations

import copy
import json
import math
import re
from types import SimpleNamespace

import pytest

from optima_agents.policies import Action, SamplingParams, ScriptedPolicy, TurnRequest
from optima_agents.policies.logprobs import align_logprobs, check_logprob, sampled_logprobs
from optima_agents.policies.openai_compat import OpenAIPolicy
from optima_agents.policies.openai_reply import MalformedReplyError, parse_reply
from optima_agents.rollout import EpisodeRecord, rollout
from optima_agents.rollout.engine import turn_logprobs
from tests.agents.conftest_servers import Reply, completion, stub_server  # noqa: F401  (fixture)

# A chat completion as vLLM 0.32 serialises it (made with its ChatCompletionResponse model) for a
# request with "logprobs": true, "return_token_ids": true: one content entry per generated id,
# the end-of-turn token (2) included.
VLLM_REPLY = {
    "id": "chatcmpl-81af952bbd466840", "object": "chat.completion", "created": 1796101319, "model": "stub-model",
    "choices": [{
        "index": 0,
        "message": {"role": "assistant", "content": "Paris.", "refusal": None, "annotations": None, "audio": None,
                    "function_call": None, "reasoning": None},
        "logprobs": {"content": [
            {"token": "Paris", "logprob": -0.3125, "bytes": [80, 97, 114, 105, 115], "top_logprobs": []},
            {"token": ".", "logprob": -0.046875, "bytes": [46], "top_logprobs": []},
            {"token": "", "logprob": -0.0009765625, "bytes": [], "top_logprobs": []},
        ]},
        "finish_reason": "stop", "stop_reason": None, "token_ids": [4154, 30, 2], "routed_experts": None,
    }],
    "service_tier": None, "system_fingerprint": None,
    "usage": {"prompt_tokens": 31, "total_tokens": 34, "completion_tokens": 3, "prompt_tokens_details": None,
              "completion_tokens_details": None},
    "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None,
    "ec_transfer_params": None, "metrics": None,
}

# The OpenAI API's format: no token ids, top alternatives per token.
OPENAI_REPLY = {
    "id": "chatcmpl-123", "object": "chat.completion", "created": 1702685778, "model": "gpt-4o-mini",
    "choices": [{
        "index": 0, "message": {"role": "assistant", "content": "Hello!"},
        "logprobs": {"content": [
            {"token": "Hello", "logprob": -0.31725305, "bytes": [72, 101, 108, 108, 111],
             "top_logprobs": [{"token": "Hello", "logprob": -0.31725305, "bytes": [72, 101, 108, 108, 111]},
                              {"token": "Hi", "logprob": -1.3190403, "bytes": [72, 105]}]},
            {"token": "!", "logprob": -0.02380986, "bytes": [33],
             "top_logprobs": [{"token": "!", "logprob": -0.02380986, "bytes": [33]}]},
        ], "refusal": None},
        "finish_reason": "stop",
    }],
    "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
}
VLLM_LOGPROBS = (-0.3125, -0.046875, -0.0009765625)


def _with(body: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(body)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def ask(question: str = "?", seed: int | None = 0) -> TurnRequest:
    return TurnRequest("alice", {"agent": "alice", "system_prompt": "You help.",
                                 "transcript": ({"speaker": "bob", "text": question},)}, seed=seed)


def fast_policy(url: str, **kwargs) -> OpenAIPolicy:
    options = {"timeout_s": 2.0, "max_retries": 1, "backoff_s": 0.01, "tokenizer": None, **kwargs}
    return OpenAIPolicy("stub-model", base_urls=[url], **options)


class TestAlign:
    def test_a_prefix_of_the_generated_ids_keeps_their_logprobs(self):
        assert align_logprobs([5, 6, 7, 2], [-0.1, -0.2, -0.3, -0.4], [5, 6, 7]) == (-0.1, -0.2, -0.3)
        assert align_logprobs((5, 6), (-0.1, -0.2), (5, 6)) == (-0.1, -0.2)
        assert align_logprobs([2], [-0.5], []) == ()

    def test_reencoded_ids_get_none(self):
        assert align_logprobs([5, 6, 7], [-0.1, -0.2, -0.3], [5, 8]) is None
        assert align_logprobs([5, 6], [-0.1, -0.2], [5, 6, 7]) is None  # longer than what was generated

    def test_a_count_mismatch_is_a_backend_bug(self):
        with pytest.raises(ValueError, match="got 2 log-probs for 3 generated token ids"):
            align_logprobs([5, 6, 7], [-0.1, -0.2], [5])


class TestSampledLogprobs:
    def test_reads_the_sampled_tokens_entry_of_each_position(self):
        positions = [{4: SimpleNamespace(logprob=-0.25), 9: SimpleNamespace(logprob=-2.0)}, {7: -1.5}]
        assert sampled_logprobs([4, 7], positions) == (-0.25, -1.5)

    def test_vllm_flat_logprobs_read_like_a_list(self):
        vllm_logprobs = pytest.importorskip("vllm.logprobs")
        flat = vllm_logprobs.FlatLogprobs()
        flat.append({4: vllm_logprobs.Logprob(-0.25, rank=1)})
        flat.append({7: vllm_logprobs.Logprob(-1.5, rank=3), 1: vllm_logprobs.Logprob(-0.1, rank=1)})
        assert sampled_logprobs([4, 7], flat) == (-0.25, -1.5)

    @pytest.mark.parametrize(("ids", "positions", "message"), [
        ([4, 7], [{4: -0.1}], "got log-probs for 1 positions but 2 generated tokens"),
        ([4], [{5: -0.1}], "position 0 has no log-prob for its sampled token 4 (has [5])"),
        ([4], [None], "position 0 has no log-prob for its sampled token 4 (has none)"),
        ([4], [{4: 0.5}], "must be a log-probability (<= 0), got 0.5"),
        ([4], [{4: float("nan")}], "must be a log-probability (<= 0), got nan"),
        ([4], [{4: "x"}], "must be a number, got str 'x'"),
    ])
    def test_bad_input_says_what(self, ids, positions, message):
        with pytest.raises(ValueError, match=re.escape(message)):
            sampled_logprobs(ids, positions)

    def test_rounding_above_zero_and_minus_inf_pass(self):
        assert check_logprob(1e-6, "x") == 1e-6 and check_logprob(float("-inf"), "x") == float("-inf")
        with pytest.raises(ValueError, match="x must be a number, got bool True"):
            check_logprob(True, "x")


class TestSettings:
    def test_sampling_to_dict_names_logprobs_only_when_on(self):
        assert "logprobs" not in SamplingParams().to_dict()
        assert SamplingParams(logprobs=True).to_dict()["logprobs"] is True
        with pytest.raises(ValueError, match="SamplingParams.logprobs must be True or False, got 1"):
            SamplingParams(logprobs=1)

    def test_action_logprobs_are_one_per_token_id(self):
        assert Action("hi", token_ids=(1, 2)).logprobs is None
        assert Action("hi", token_ids=(1, 2), logprobs=(-0.1, -0.2)).logprobs == (-0.1, -0.2)
        with pytest.raises(ValueError, match="got 1 log-probs for 2 token ids"):
            Action("hi", token_ids=(1, 2), logprobs=(-0.1,))

    def test_scripted_replies_have_none(self):
        assert ScriptedPolicy(lambda o: "hi").act([ask()])[0].logprobs is None


class TestParseReply:
    def test_vllm_reply(self):
        reply = parse_reply(VLLM_REPLY, logprobs=True)
        assert reply.logprobs == VLLM_LOGPROBS and reply.token_ids == (4154, 30, 2)

    def test_openai_reply(self):
        reply = parse_reply(OPENAI_REPLY, logprobs=True)
        assert reply.logprobs == (-0.31725305, -0.02380986) and reply.token_ids is None

    def test_not_asked_for_they_are_not_read(self):
        assert parse_reply(VLLM_REPLY).logprobs is None
        assert parse_reply(_with(VLLM_REPLY, ("choices", 0, "logprobs"), "garbage")).logprobs is None

    @pytest.mark.parametrize("block", [None, {"content": None}, {"content": None, "refusal": None}])
    def test_a_server_without_them_gives_none(self, block):
        assert parse_reply(_with(VLLM_REPLY, ("choices", 0, "logprobs"), block), logprobs=True).logprobs is None
        body = copy.deepcopy(VLLM_REPLY)
        del body["choices"][0]["logprobs"]
        assert parse_reply(body, logprobs=True).logprobs is None

    @pytest.mark.parametrize(("path", "value", "message"), [
        (("choices", 0, "logprobs"), "x", "choices[0].logprobs must be an object, got str 'x'"),
        (("choices", 0, "logprobs", "content"), {"a": 1}, "choices[0].logprobs.content must be a list of token "
                                                          "log-probs or null, got dict"),
        (("choices", 0, "logprobs", "content", 1), -0.5, "choices[0].logprobs.content[1] must be an object, got float"),
        (("choices", 0, "logprobs", "content", 1), {"token": "."}, "choices[0].logprobs.content[1] has no 'logprob'"),
        (("choices", 0, "logprobs", "content", 0, "logprob"), "-0.3", "content[0].logprob must be a number, got str"),
        (("choices", 0, "logprobs", "content", 0, "logprob"), None, "logprob must be a number, got NoneType"),
        (("choices", 0, "logprobs", "content", 2, "logprob"), 0.25, "content[2].logprob must be a log-probability "
                                                                    "(<= 0), got 0.25"),
        (("choices", 0, "logprobs", "content", 2, "logprob"), math.nan, "must be a log-probability (<= 0), got nan"),
    ])
    def test_a_malformed_block_says_which_field(self, path, value, message):
        with pytest.raises(MalformedReplyError, match=re.escape(message)):
            parse_reply(_with(VLLM_REPLY, path, value), logprobs=True)


class TestOpenAIPolicy:
    def test_requested_only_when_asked(self, stub_server):
        stub = stub_server(default=Reply(body=VLLM_REPLY))
        fast_policy(stub.base_url).act([ask()])
        fast_policy(stub.base_url, sampling=SamplingParams(logprobs=True)).act([ask()])
        plain, asked = stub.received
        assert "logprobs" not in plain and "top_logprobs" not in plain
        assert (asked["logprobs"], asked["top_logprobs"]) == (True, 0)

    def test_server_ids_without_a_tokenizer_keep_their_logprobs(self, stub_server):
        stub = stub_server(default=Reply(body=VLLM_REPLY))
        action = fast_policy(stub.base_url, sampling=SamplingParams(logprobs=True)).act([ask()])[0]
        assert not action.failed and action.token_ids == (4154, 30, 2) and action.logprobs == VLLM_LOGPROBS
        assert "logprobs_missing" not in action.meta
        plain = fast_policy(stub.base_url).act([ask()])[0]  # not asked: none, and no note
        assert plain.logprobs is None and "logprobs_missing" not in plain.meta

    def test_a_server_that_returns_none_is_not_an_error(self, stub_server):
        stub = stub_server(default=Reply(body=completion("Hi.", token_ids=[5, 6])))
        action = fast_policy(stub.base_url, sampling=SamplingParams(logprobs=True)).act([ask()])[0]
        assert not action.failed and action.logprobs is None and action.token_ids == (5, 6)
        assert action.meta["logprobs_missing"] == "the server returned no log-probs"

    def test_logprobs_without_ids_cannot_be_aligned(self, stub_server):
        stub = stub_server(default=Reply(body=OPENAI_REPLY))
        action = fast_policy(stub.base_url, sampling=SamplingParams(logprobs=True)).act([ask()])[0]
        assert not action.failed and action.text == "Hello!" and action.logprobs is None
        assert action.meta["logprobs_missing"] == "the server returned no token ids to align the log-probs with"

    def test_a_malformed_block_is_retried_then_an_infra_failure(self, stub_server):
        bad = _with(VLLM_REPLY, ("choices", 0, "logprobs", "content", 0, "logprob"), "high")
        stub = stub_server([Reply(body=bad)], default=Reply(body=VLLM_REPLY))
        policy = fast_policy(stub.base_url, sampling=SamplingParams(logprobs=True))
        action = policy.act([ask()])[0]
        assert not action.failed and action.meta["attempts"] == 2 and action.logprobs == VLLM_LOGPROBS
        stub = stub_server(default=Reply(body=bad))
        action = fast_policy(stub.base_url, sampling=SamplingParams(logprobs=True)).act([ask()])[0]
        assert action.failed and "malformed response" in action.error
        assert "choices[0].logprobs.content[0].logprob must be a number, got str 'high'" in action.error

    def test_a_count_that_differs_from_the_ids_is_malformed(self, stub_server):
        short = _with(VLLM_REPLY, ("choices", 0, "token_ids"), [4154, 30])
        stub = stub_server(default=Reply(body=short))
        action = fast_policy(stub.base_url, max_retries=0, sampling=SamplingParams(logprobs=True)).act([ask()])[0]
        assert action.failed
        assert "choices[0].logprobs.content has 3 entries but choices[0].token_ids has 2 ids" in action.error

    @pytest.mark.model  # the embedded model's tokenizer
    def test_cleaned_ids_keep_the_logprobs_of_the_tokens_they_are(self, stub_server, smollm_tokenizer):
        from optima_agents.chat import encode_text

        eos = smollm_tokenizer.eos_token_id
        ids = encode_text(smollm_tokenizer, "Paris is the answer.") + [eos]
        lps = [-0.5 - k / 10 for k in range(len(ids))]
        body = _with(_with(VLLM_REPLY, ("choices", 0, "token_ids"), ids), ("choices", 0, "logprobs", "content"),
                     [{"token": "t", "logprob": v, "bytes": [], "top_logprobs": []} for v in lps])
        stub = stub_server(default=Reply(body=body))
        policy = fast_policy(stub.base_url, tokenizer=smollm_tokenizer, sampling=SamplingParams(logprobs=True))
        action = policy.act([ask()])[0]
        assert action.token_ids == tuple(ids[:-1]) and action.logprobs == tuple(lps[:-1])
        # Leading spaces are stripped: the stored ids are a re-encoding, never sampled as such.
        ids = encode_text(smollm_tokenizer, "  Paris.") + [eos]
        body = _with(_with(body, ("choices", 0, "token_ids"), ids), ("choices", 0, "logprobs", "content"),
                     [{"token": "t", "logprob": -0.5, "bytes": [], "top_logprobs": []} for _ in ids])
        stub = stub_server(default=Reply(body=body))
        action = fast_policy(stub.base_url, tokenizer=smollm_tokenizer,
                             sampling=SamplingParams(logprobs=True)).act([ask()])[0]
        assert action.meta["reencoded"] and action.logprobs is None
        assert "re-encoded" in action.meta["logprobs_missing"]


class TestRecords:
    def test_turn_logprobs(self):
        action = Action("a b", token_ids=(1, 2, 3), logprobs=(-0.1, -0.2, -0.3))
        assert turn_logprobs(action, [1, 2, 3]) == (-0.1, -0.2, -0.3)
        assert turn_logprobs(action, (1, 2)) == (-0.1, -0.2)
        assert turn_logprobs(action, [1, 9]) is None and turn_logprobs(action, None) is None
        assert turn_logprobs(Action("a", token_ids=(1,)), [1]) is None and turn_logprobs(None, [1]) is None

    @staticmethod
    def _script(with_logprobs: bool):
        def script(observation):
            ids = tuple(range(10, 14 + observation["turn"]))
            logprobs = tuple(-1.0 / (k + 1) for k in range(len(ids))) if with_logprobs else None
            return Action(text=f"turn {observation['turn']} <A>Kelo</A>", token_ids=ids, logprobs=logprobs)
        return script

    def test_rollout_records_carry_them_and_round_trip(self):
        records = rollout("synth-hop-ia", ScriptedPolicy(self._script(True)), 2, env_kwargs={"max_turns": 3},
                          progress=False)
        for record in records:
            for turn in record.turns:
                assert len(turn.logprobs) == len(turn.token_ids) == 4 + turn.turn
                assert turn.logprobs[0] == -1.0
            data = record.to_dict()
            assert all("logprobs" in t for t in data["turns"])
            assert EpisodeRecord.from_dict(json.loads(json.dumps(data))) == record

    def test_without_them_records_have_no_new_key(self):
        records = rollout("synth-hop-ia", ScriptedPolicy(self._script(False)), 2, env_kwargs={"max_turns": 3},
                          progress=False)
        keys = ["turn", "speaker", "text", "token_ids", "num_tokens", "tokens_exact", "answer", "finish_reason",
                "prompt_tokens", "truncated"]  # the keys, in order, from before log-probs existed
        for record in records:
            assert all(t.logprobs is None for t in record.turns)
            data = record.to_dict()
            assert all(list(t) == keys for t in data["turns"])
            assert EpisodeRecord.from_dict(data) == record
            assert not any("logprobs" in json.dumps(s) for s in data["sampling"].values())

    def test_a_record_checks_the_count(self):
        from optima_agents.rollout import TurnRecord

        with pytest.raises(ValueError, match="turn 0: 1 log-probs for 2 token ids"):
            TurnRecord(turn=0, speaker="a", text="x", token_ids=(1, 2), num_tokens=2, tokens_exact=True,
                       answer=None, finish_reason="stop", logprobs=(-0.1,))
        assert math.isinf(TurnRecord.from_dict({
            "turn": 0, "speaker": "a", "text": "x", "token_ids": [1], "num_tokens": 1, "tokens_exact": True,
            "answer": None, "finish_reason": "stop", "logprobs": [float("-inf")]}).logprobs[0])
