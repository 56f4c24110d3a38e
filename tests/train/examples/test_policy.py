"""Policy-gradient rows: each agent's own replies carry loss, with the sampler's log-probs where
the row's tokens are the sampled ones, and the end-of-turn token only where the model emitted it."""

from __future__ import annotations

import math

import pytest

from optima_agents.rollout.records import EpisodeRecord, TurnRecord
from optima_train.examples import policy_examples


def _turn(tok, k, speaker, text, finish="stop", logprobs=True, ids=None, truncated=False):
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"]) if ids is None else ids
    lps = tuple(-0.01 * (k + 1) * (i + 1) for i in range(len(ids))) if logprobs else None
    return TurnRecord(turn=k, speaker=speaker, text=text, token_ids=ids, num_tokens=len(ids), tokens_exact=True,
                      answer=None, finish_reason=finish, truncated=truncated, logprobs=lps)


def _record(turns, agents=("alice", "bob")):
    return EpisodeRecord(env_id="t", env_version=1, seed=0, index=0, options={}, instance_id="q0", question="?",
                         gold=None, agents=tuple(agents), roles=tuple(agents),
                         system_prompts=tuple(f"You are {a}." for a in agents), format_instruction=None,
                         turns=tuple(turns), final_answer=None, score=1.0, score_ok=True, score_error=None,
                         end_reason="max_turns", total_tokens=0, agent_tokens={})


def _loss_text(tok, ex):
    return tok.decode([i for i, m in zip(ex.input_ids, ex.loss_mask) if m])


class TestPolicyExamples:
    def test_each_agent_trains_on_its_own_replies_with_the_sampler_logprobs(self, char_tokenizer):
        tok = char_tokenizer
        turns = [_turn(tok, 0, "alice", "hi bob"), _turn(tok, 1, "bob", "hello", finish="length"),
                 _turn(tok, 2, "alice", "bye")]
        alice, bob = policy_examples(_record(turns), 0.5, tok, episode=3, max_length=4096)
        assert (alice.agent, bob.agent, alice.advantage, alice.episode) == ("alice", "bob", 0.5, 3)
        assert _loss_text(tok, alice) == "hi bob<|im_end|>bye<|im_end|>"
        assert _loss_text(tok, bob) == "hello"  # cut at max_new_tokens: no end-of-turn was sampled
        assert tok.decode(alice.input_ids).startswith("<|im_start|>system\nYou are alice.<|im_end|>")
        given = [v for v, m in zip(alice.old_logprobs, alice.loss_mask) if m and not math.isnan(v)]
        assert given == pytest.approx(list(turns[0].logprobs) + list(turns[2].logprobs))
        missing = [k for k, (v, m) in enumerate(zip(alice.old_logprobs, alice.loss_mask)) if m and math.isnan(v)]
        assert [tok.decode([alice.input_ids[k]]) for k in missing] == ["<|im_end|>", "<|im_end|>"]

    def test_replies_whose_ids_were_not_sampled_get_no_backend_logprobs(self, char_tokenizer):
        tok = char_tokenizer
        turns = [_turn(tok, 0, "alice", "abc", ids=(5, 6, 7)), _turn(tok, 1, "bob", "xyz", logprobs=False)]
        alice, bob = policy_examples(_record(turns), 1.0, tok, episode=0, max_length=4096)
        assert all(math.isnan(v) for v, m in zip(alice.old_logprobs + bob.old_logprobs,
                                                  alice.loss_mask + bob.loss_mask) if m)

    def test_consecutive_own_turns_skip_the_separator_and_cut_keeps_the_start(self, char_tokenizer):
        tok = char_tokenizer
        turns = [_turn(tok, 0, "alice", "one"), _turn(tok, 1, "alice", "two"), _turn(tok, 2, "bob", "ok")]
        alice, _ = policy_examples(_record(turns, agents=("alice", "bob", "carol")), 1.0, tok, episode=0,
                                   max_length=4096)
        assert _loss_text(tok, alice) == "onetwo<|im_end|>"
        assert not alice.cut
        start = next(k for k, m in enumerate(alice.loss_mask) if m)
        short, _ = policy_examples(_record(turns, agents=("alice", "bob", "carol")), 1.0, tok, episode=0,
                                   max_length=start + 2)
        assert short.cut and len(short.input_ids) == start + 2 and _loss_text(tok, short) == "on"

    def test_agents_that_never_spoke_give_no_sequence(self, char_tokenizer):
        examples = policy_examples(_record([_turn(char_tokenizer, 0, "alice", "x")]), 1.0, char_tokenizer,
                                   episode=0, max_length=4096)
        assert [e.agent for e in examples] == ["alice"]
