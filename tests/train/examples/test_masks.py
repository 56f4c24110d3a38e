"""The one mask builder: a token carries loss exactly when it starts inside a span, and the SFT
and policy-gradient rows of a dialogue mask the same tokens where the model ended every turn."""

from __future__ import annotations

import copy
import re

import pytest

from optima_agents.rollout.records import EpisodeRecord, TurnRecord
from optima_train.examples import (
    TemplateMaskError,
    agent_view,
    assistant_mask,
    assistant_spans,
    build_sft_examples,
    policy_examples,
    token_mask,
)
from tests.train.examples.conftest import TURNS, decoded_runs

class TestTokenMask:
    def test_a_token_carries_loss_when_it_starts_inside_a_span(self, char_tokenizer):
        tokens = token_mask(char_tokenizer, "abcdef", [(1, 3), (4, 5)])
        assert tokens.mask == [0, 1, 1, 0, 1, 0]
        assert tokens.offsets == [(k, k + 1) for k in range(6)] and len(tokens.input_ids) == 6

    def test_assistant_spans_hold_each_reply_and_its_end_marker(self, char_tokenizer):
        full, spans = assistant_spans(char_tokenizer, agent_view("alice", "SYS-A", TURNS))
        assert [full[a:b] for a, b in spans] == ["I know Zoravi was founded by Kelo.<|im_end|>",
                                                 "<A>Drai</A><|im_end|>"]
        ids, mask = assistant_mask(char_tokenizer, agent_view("alice", "SYS-A", TURNS))
        assert decoded_runs(char_tokenizer, ids, mask) == [full[a:b] for a, b in spans]

    def test_a_template_that_is_not_prefix_preserving_is_refused(self, char_tokenizer):
        other = copy.copy(char_tokenizer)
        other.chat_template = ("{% for m in messages %}{% if loop.last %}[LAST]{% endif %}{{ m['role'] }}: "
                               "{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
        with pytest.raises(TemplateMaskError, match=re.escape("not prefix-preserving at message 2")):
            assistant_mask(other, agent_view("alice", "S", TURNS))


def _record(tokenizer, finish: str = "stop") -> EpisodeRecord:
    turns = tuple(TurnRecord(turn=k, speaker=t["speaker"], text=t["text"],
                             token_ids=tuple(tokenizer(t["text"], add_special_tokens=False)["input_ids"]),
                             num_tokens=len(t["text"]), tokens_exact=True, answer=None, finish_reason=finish)
                  for k, t in enumerate(TURNS))
    return EpisodeRecord(env_id="t", env_version=1, seed=0, index=0, options={}, instance_id="q0", question="?",
                         gold=None, agents=("alice", "bob"), roles=("a", "b"), system_prompts=("SYS-A", "SYS-B"),
                         format_instruction=None, turns=turns, final_answer=None, score=1.0, score_ok=True,
                         score_error=None, end_reason="agreed", total_tokens=0, agent_tokens={},
                         plain_system_prompts=("SYS-A", "SYS-B"))


def test_sft_and_policy_rows_mask_the_same_tokens_when_every_turn_stopped(char_tokenizer):
    record = _record(char_tokenizer)
    sft = build_sft_examples(record, record.plain_system_prompts, char_tokenizer, episode_id="0:0")
    policy = policy_examples(record, 1.0, char_tokenizer, episode=0, max_length=4096)
    assert [(e.input_ids, e.assistant_masks) for e in sft] == [(e.input_ids, e.loss_mask) for e in policy]


def test_policy_rows_leave_out_end_markers_the_model_did_not_emit(char_tokenizer):
    record = _record(char_tokenizer, finish="length")
    sft = build_sft_examples(record, record.plain_system_prompts, char_tokenizer, episode_id="0:0")
    policy = policy_examples(record, 1.0, char_tokenizer, episode=0, max_length=4096)
    for s, p in zip(sft, policy):
        assert decoded_runs(char_tokenizer, p.input_ids, p.loss_mask) == \
            [run.removesuffix("<|im_end|>") for run in decoded_runs(char_tokenizer, s.input_ids, s.assistant_masks)]
