"""SFT rows: the agent's own view, the plain prompt the env kept at sampling, and exactly which
tokens carry loss."""

from __future__ import annotations

from dataclasses import replace

import pytest

import optima_envs
from optima_agents.chat import KICKOFF_MESSAGE
from optima_agents.policies import ScriptedPolicy
from optima_agents.rollout import EpisodeSpec, RolloutEngine
from optima_train.examples import (
    TemplateMaskError,
    agent_view,
    assistant_mask,
    build_sft_examples,
    keep_start,
    plain_prompts,
    rebuild_plain_prompts,
)
from tests.train.examples.conftest import TURNS
from tests.train.examples.conftest import decoded_runs as loss_segments

class TestAgentView:
    def test_first_speaker_gets_the_kickoff_and_own_turns_as_assistant(self):
        messages = agent_view("alice", "SYS-A", TURNS, agents=("alice", "bob"))
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
        assert messages[0]["content"] == "SYS-A" and messages[1]["content"] == KICKOFF_MESSAGE
        assert messages[2]["content"] == TURNS[0]["text"] and messages[4]["content"] == "<A>Drai</A>"
        assert messages[3]["content"].endswith(TURNS[1]["text"])

    def test_same_messages_as_the_policy_sees(self):
        from optima_agents.chat import chat_messages

        observation = {"agent": "alice", "system_prompt": "SYS-A", "transcript": tuple(TURNS[:2]),
                       "agents": ("alice", "bob", "carol")}
        seen = chat_messages(observation)
        view = agent_view("alice", "SYS-A", TURNS, agents=("alice", "bob", "carol"))
        assert view[: len(seen)] == seen and view[len(seen)] == {"role": "assistant", "content": "<A>Drai</A>"}

    def test_trailing_messages_of_others_are_dropped(self):
        messages = agent_view("bob", "SYS-B", TURNS)
        assert [m["role"] for m in messages] == ["system", "user", "assistant"]
        assert messages[-1]["content"] == TURNS[1]["text"]


@pytest.mark.model
class TestAssistantMask:
    def test_chatml_loss_is_on_own_replies_and_their_end_token_only(self, smollm_tokenizer):
        tok = smollm_tokenizer
        ids, mask = assistant_mask(tok, agent_view("alice", "SYS-A", TURNS))
        assert ids == tok(tok.apply_chat_template(agent_view("alice", "SYS-A", TURNS), tokenize=False),
                          add_special_tokens=False)["input_ids"]
        assert loss_segments(tok, ids, mask) == ["I know Zoravi was founded by Kelo.<|im_end|>", "<A>Drai</A><|im_end|>"]
        # nothing of the system prompt, the kickoff, Bob's turn, role headers or the newline after <|im_end|>
        assert sum(mask) == len(tok.encode("I know Zoravi was founded by Kelo.<|im_end|><A>Drai</A><|im_end|>"))
        ids_b, mask_b = assistant_mask(tok, agent_view("bob", "SYS-B", TURNS))
        assert loss_segments(tok, ids_b, mask_b) == ["Kelo was born in Drai. <A>Drai</A><|im_end|>"]

    def test_mask_follows_the_template_not_token_ids(self, smollm_tokenizer):
        tok = smollm_tokenizer
        zephyr = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
        ids, mask = assistant_mask(_with_template(tok, zephyr), agent_view("alice", "SYS-A", TURNS))
        assert loss_segments(tok, ids, mask) == ["I know Zoravi was founded by Kelo.</s>", "<A>Drai</A></s>"]

    def test_empty_reply_still_learns_to_stop(self, smollm_tokenizer):
        messages = agent_view("bob", "S", [{"speaker": "alice", "text": "hi"}, {"speaker": "bob", "text": ""}])
        ids, mask = assistant_mask(smollm_tokenizer, messages)
        assert loss_segments(smollm_tokenizer, ids, mask) == ["<|im_end|>"]

    def test_template_that_is_not_prefix_preserving_is_refused(self, smollm_tokenizer):
        bad = ("{% for m in messages %}{% if loop.last %}[LAST]{% endif %}{{ m['role'] }}: {{ m['content'] }}\n"
               "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
        with pytest.raises(TemplateMaskError, match="not prefix-preserving at message 2"):
            assistant_mask(_with_template(smollm_tokenizer, bad), agent_view("alice", "S", TURNS))


def _with_template(tokenizer, template):
    import copy

    other = copy.copy(tokenizer)
    other.chat_template = template
    return other


def scripted(observation):
    return "Kelo founded it. <A>Drai</A>" if observation["turn"] >= 1 else "What do you know, partner?"


class TestFromEpisodes:
    def episode(self, options):
        env = optima_envs.make("synth-hop-ia", max_turns=3)
        engine = RolloutEngine(env, ScriptedPolicy(scripted), progress=False)
        return env, engine.run([EpisodeSpec(seed=11, index=4, options=options)])[0]

    def test_the_record_keeps_the_prompts_without_the_format_instruction(self):
        _, record = self.episode({"format_instruction": "sample"})
        assert record.format_instruction and all(record.format_instruction in p for p in record.system_prompts)
        fresh, _ = optima_envs.make("synth-hop-ia", max_turns=3).reset(seed=11, options={"index": 4})
        assert record.plain_system_prompts == tuple(fresh[a]["system_prompt"] for a in record.agents)
        assert [p + "\n" + record.format_instruction for p in record.plain_system_prompts] == \
            list(record.system_prompts)
        assert plain_prompts(record) == record.plain_system_prompts  # no env needed

    def test_prompts_without_instruction_are_the_plain_prompts(self):
        _, record = self.episode({})
        assert record.plain_system_prompts == record.system_prompts == plain_prompts(record)

    def test_an_older_record_is_rebuilt_from_its_env(self):
        env, record = self.episode({"format_instruction": "sample"})
        old = replace(record, plain_system_prompts=None)
        assert plain_prompts(old, env) == rebuild_plain_prompts(env, old) == record.plain_system_prompts
        with pytest.raises(ValueError, match="pass the env it was sampled from"):
            plain_prompts(old)
        unformatted = replace(self.episode({})[1], plain_system_prompts=None)
        assert plain_prompts(unformatted) == unformatted.system_prompts

    def test_wrong_env_is_refused(self):
        _, record = self.episode({"format_instruction": "sample"})
        other = optima_envs.make("synth-hop-ia", split="validation")
        with pytest.raises(ValueError, match="pass the env"):
            plain_prompts(replace(record, plain_system_prompts=None), other)

    @pytest.mark.model
    def test_one_example_per_agent(self, smollm_tokenizer):
        env, record = self.episode({"format_instruction": "sample"})
        examples = build_sft_examples(record, plain_prompts(record), smollm_tokenizer, episode_id="0:0")
        assert [e.agent for e in examples] == ["alice", "bob"]
        alice = examples[0]
        assert alice.messages[0]["content"] == record.plain_system_prompts[0]
        assert loss_segments(smollm_tokenizer, alice.input_ids, alice.assistant_masks) == [
            "What do you know, partner?<|im_end|>", "Kelo founded it. <A>Drai</A><|im_end|>"]
        assert alice.to_row()["instance_id"] == record.instance_id


def test_keep_start_cuts_ids_and_loss_mask_at_the_same_token():
    row = {"input_ids": [5, 6, 7, 8, 9], "assistant_masks": [0, 0, 1, 1, 1]}
    assert keep_start(row, 3) == {"input_ids": [5, 6, 7], "assistant_masks": [0, 0, 1]}
    assert keep_start(row, 10) == row
    with pytest.raises(ValueError, match="max_length must be >= 1"):
        keep_start(row, 0)

