"""Chat formatting from each agent's point of view, output cleaning, and token-id consistency."""

from __future__ import annotations

import pytest

import optima_envs
from optima_envs.core.dialogue_env import DEFAULT_AGENT_NAMES
from optima_agents.chat import (
    KICKOFF_MESSAGE,
    ChatFormat,
    chat_messages,
    clean_output,
    encode_text,
    prompt_ids,
)


def obs(agent: str, transcript: list[tuple[str, str]], system: str = "SYS", agents=None) -> dict:
    out = {"agent": agent, "system_prompt": system,
           "transcript": tuple({"speaker": s, "text": t} for s, t in transcript)}
    if agents is not None:
        out["agents"] = tuple(agents)
    return out


def roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages]


class TestChatMessages:
    def test_first_speaker_gets_the_kickoff(self):
        assert chat_messages(obs("alice", [])) == [
            {"role": "system", "content": "SYS"}, {"role": "user", "content": KICKOFF_MESSAGE}]

    def test_own_turns_are_assistant_the_partners_are_user(self):
        transcript = [("alice", "I know A."), ("bob", "I know B."), ("alice", "<A>x</A>")]
        assert chat_messages(obs("bob", transcript)) == [
            {"role": "system", "content": "SYS"},
            {"role": "user", "content": "I know A."},
            {"role": "assistant", "content": "I know B."},
            {"role": "user", "content": "<A>x</A>"},
        ]
        assert chat_messages(obs("alice", transcript)) == [
            {"role": "system", "content": "SYS"},
            {"role": "user", "content": KICKOFF_MESSAGE},
            {"role": "assistant", "content": "I know A."},
            {"role": "user", "content": "I know B."},
            {"role": "assistant", "content": "<A>x</A>"},
        ]

    def test_three_agents_merge_consecutive_user_turns(self):
        transcript = [("alice", "a0"), ("bob", "b1"), ("carol", "c2"), ("alice", "a3"), ("bob", "b4")]
        assert chat_messages(obs("carol", transcript)) == [
            {"role": "system", "content": "SYS"},
            {"role": "user", "content": "Alice: a0\n\nBob: b1"},
            {"role": "assistant", "content": "c2"},
            {"role": "user", "content": "Alice: a3\n\nBob: b4"},
        ]

    def test_names_from_the_agents_key_or_the_names_seen(self):
        two = [("alice", "a0")]
        assert chat_messages(obs("bob", two))[1]["content"] == "a0"
        assert chat_messages(obs("bob", two, agents=["alice", "bob", "carol"]))[1]["content"] == "Alice: a0"
        # without the key, a third agent is known once it has spoken (or is the current speaker)
        assert chat_messages({**obs("bob", two), "speaker": "carol"})[1]["content"] == "Alice: a0"

    def test_format_options(self):
        fmt = ChatFormat(name_speakers="always", speaker_prefix="[{name}] ", kickoff="Go.")
        assert chat_messages(obs("bob", [("alice", "hi")]), fmt)[1:] == [{"role": "user", "content": "[Alice] hi"}]
        assert chat_messages(obs("alice", []), fmt)[1:] == [{"role": "user", "content": "Go."}]
        never = ChatFormat(name_speakers="never")
        transcript = [("alice", "a0"), ("bob", "b1")]
        assert chat_messages(obs("carol", transcript), never)[1] == {"role": "user", "content": "a0\n\nb1"}
        with pytest.raises(ValueError, match="name_speakers must be"):
            ChatFormat(name_speakers="sometimes")  # type: ignore[arg-type]

    @pytest.mark.parametrize("num_agents", [2, 3, 5])
    def test_roles_alternate_and_views_grow_by_prefix(self, num_agents):
        agents = DEFAULT_AGENT_NAMES[:num_agents]
        transcript: list[tuple[str, str]] = []
        previous: dict[str, list[dict]] = {}
        for turn in range(3 * num_agents):
            speaker = agents[turn % num_agents]
            messages = chat_messages(obs(speaker, transcript, agents=agents))
            assert roles(messages)[0] == "system" and roles(messages)[1] == "user"
            assert all(a != b for a, b in zip(roles(messages)[1:], roles(messages)[2:])), roles(messages)
            if speaker in previous:  # the earlier view is a prefix (last user message may have grown)
                before = previous[speaker]
                assert messages[: len(before)] == before
            previous[speaker] = messages + [{"role": "assistant", "content": f"{speaker}{turn}"}]
            transcript.append((speaker, f"{speaker}{turn}"))


@pytest.mark.model
class TestCleanOutput:
    def test_cuts_at_eos_strips_and_reencodes(self, smollm_tokenizer):
        tok = smollm_tokenizer
        raw = encode_text(tok, "\n  Hello there.  ") + [tok.eos_token_id, tok.eos_token_id]
        out = clean_output(tok, raw, max_new_tokens=32)
        assert out.text == "Hello there." and out.finish_reason == "stop"
        assert list(out.token_ids) == encode_text(tok, "Hello there.")
        assert out.reencoded and out.generated_tokens == len(raw) - 2

    def test_canonical_generation_is_kept_verbatim(self, smollm_tokenizer):
        ids = encode_text(smollm_tokenizer, "Zoravi was founded by Kelo. <A>Kelo</A>")
        out = clean_output(smollm_tokenizer, ids + [smollm_tokenizer.eos_token_id], max_new_tokens=64)
        assert list(out.token_ids) == ids and not out.reencoded

    def test_stop_strings_and_length(self, smollm_tokenizer):
        ids = encode_text(smollm_tokenizer, "first line\nsecond line")
        out = clean_output(smollm_tokenizer, ids, max_new_tokens=len(ids), stop=("\n",))
        assert (out.text, out.finish_reason) == ("first line", "stop")
        out = clean_output(smollm_tokenizer, ids, max_new_tokens=len(ids))
        assert (out.text, out.finish_reason) == ("first line\nsecond line", "length")

    def test_empty_reply(self, smollm_tokenizer):
        out = clean_output(smollm_tokenizer, [smollm_tokenizer.eos_token_id], max_new_tokens=8)
        assert (out.text, out.token_ids, out.finish_reason) == ("", (), "stop")


def _contains(haystack: list[int], needle: list[int]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


@pytest.mark.model
class TestTokenIdConsistency:
    """The ids stored for each assistant turn reappear verbatim in that agent's later prompts."""

    TRICKY = ["\n\nI know: Zoravi was founded by Kelo.  ", "  12,345 and 6.7% -- ok?\n", "é中😀 <A>Kelo</A>",
              "Table:\n| a | b |\n|---|---|", "  ", "<A>Zoravi</A>", "\tTabs\tand  double  spaces ."]

    def test_cleaned_replies_survive_retokenisation_turn_after_turn(self, smollm_tokenizer):
        tok = smollm_tokenizer
        env = optima_envs.make("synth-hop-ia", max_turns=len(self.TRICKY))
        observations, _ = env.reset(seed=3)
        last: dict[str, list[int]] = {}  # agent -> its previous prompt + reply + end-of-turn tokens
        own: dict[str, list[list[int]]] = {"alice": [], "bob": []}
        for raw in self.TRICKY:
            speaker = env.current_speaker
            prompt = prompt_ids(observations[speaker], tok)
            if speaker in last:
                assert prompt[: len(last[speaker])] == last[speaker]
            for ids in own[speaker]:
                assert not ids or _contains(prompt, ids)
            out = clean_output(tok, encode_text(tok, raw) + [tok.eos_token_id], max_new_tokens=64)
            assert tok.decode(list(out.token_ids)) == out.text and encode_text(tok, out.text) == list(out.token_ids)
            end = encode_text(tok, "<|im_end|>\n")
            last[speaker] = prompt + list(out.token_ids) + end
            own[speaker].append(list(out.token_ids))
            observations, *_ = env.step({speaker: {"text": out.text, "token_ids": list(out.token_ids)}})
            assert env.state.messages[-1].num_tokens == len(out.token_ids)

    def test_real_model_dialogue(self, hf_policy, smollm_tokenizer):
        """Greedy SmolLM2 replies, as the engine stored them, reappear verbatim in later prompts."""
        from optima_agents.rollout import RolloutEngine, episode_specs

        tok = smollm_tokenizer
        records = RolloutEngine("synth-hop-ia", hf_policy, env_kwargs={"max_turns": 4}, progress=False).run(
            episode_specs(2))
        end = encode_text(tok, "<|im_end|>\n")
        for record in records:
            assert len(record.turns) == 4 and all(t.tokens_exact for t in record.turns)

            def prompt_at(turn: int, agent: str) -> list[int]:
                view = {"agent": agent, "system_prompt": record.system_prompts[record.agents.index(agent)],
                        "transcript": tuple({"speaker": t.speaker, "text": t.text} for t in record.turns[:turn])}
                return prompt_ids(view, tok)

            for t in record.turns:
                ids = list(t.token_ids)
                assert tok.decode(ids) == t.text and encode_text(tok, t.text) == ids
                prompt = prompt_at(t.turn, t.speaker)
                assert t.prompt_tokens == len(prompt)  # the policy saw exactly this prompt
                nxt = next((u.turn for u in record.turns if u.turn > t.turn and u.speaker == t.speaker), None)
                if nxt is not None:
                    later = prompt_at(nxt, t.speaker)
                    assert later[: len(prompt) + len(ids) + len(end)] == prompt + ids + end
