"""Tests for `optima_envs.core.termination`: the stop rules, on concrete transcripts."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import optima_envs
from optima_envs.core.termination import answer_repeats_last_answer, answer_repeats_previous_turn
from optima_envs.core.types import Message
from optima_envs.scoring import extract_tag

SPEAKERS = ("alice", "bob")


def transcript(texts: Sequence[str]) -> list[Message]:
    """Messages as the env records them: every message's `<A>` answer parsed."""
    return [Message(turn=i, speaker=SPEAKERS[i % 2], text=text, token_ids=None, num_tokens=1,
                    answer=extract_tag(text).answer) for i, text in enumerate(texts)]


def end_reasons(rule, texts: Sequence[str]) -> list[str | None]:
    messages = transcript(texts)
    return [rule(messages[:i], message) for i, message in enumerate(messages)]


def play_until_end(env_id: str, texts: Sequence[str]) -> list[str | None]:
    """The `end_reason` after each message, until the env ends the dialogue."""
    env = optima_envs.make(env_id, max_turns=len(texts) + 1)
    env.reset(seed=0, options={"index": 0})
    reasons = []
    for text in texts:
        if not env.agents:
            break
        reasons.append(env.step({env.current_speaker: text})[4]["alice"].get("end_reason"))
    return reasons


class TestAnswerRepeatsLastAnswer:
    """The reference Optima rule: stop when an answer equals the last non-empty answer given."""

    @pytest.mark.parametrize(
        ("texts", "expected"),
        [
            (["<A>x</A>", "no answer here", "<A>x</A>"], [None, None, "agreed"]),
            (["<A>x</A>", "<A>x</A>"], [None, "agreed"]),
            (["<A>x</A>", "<A>y</A>", "<A>x</A>", "<A>x</A>"], [None, None, None, "agreed"]),
            (["<A>x</A>", "<A></A>", "<A>x</A>"], [None, None, "agreed"]),  # empty: no answer
            (["<A> </A>", "<A> </A>", "<A></A>"], [None, None, None]),
            (["hi", "<A>x</A>", "hello", "there", "<A>x</A>"], [None, None, None, None, "agreed"]),
            (["<A>Paris</A>", "<A>paris.</A>"], [None, "agreed"]),  # compared normalised
            (["<A>Paris</A", "<A>Paris</A>"], [None, "agreed"]),  # a cut-off closing tag
        ],
    )
    def test_transcripts(self, texts: list[str], expected: list[str | None]) -> None:
        assert end_reasons(answer_repeats_last_answer, texts) == expected


class TestAnswerRepeatsPreviousTurn:
    """The stricter option: the answer must equal the answer of the message right before it."""

    @pytest.mark.parametrize(
        ("texts", "expected"),
        [
            (["<A>x</A>", "no answer here", "<A>x</A>"], [None, None, None]),
            (["<A>x</A>", "<A>x</A>"], [None, "agreed"]),
            (["<A>x</A>", "<A></A>", "<A>x</A>"], [None, None, None]),
            (["<A> </A>", "<A></A>"], [None, None]),  # two empty answers do not agree
        ],
    )
    def test_transcripts(self, texts: list[str], expected: list[str | None]) -> None:
        assert end_reasons(answer_repeats_previous_turn, texts) == expected


class TestTaskRules:
    """The registered tasks stop by the reference rule."""

    def test_information_asymmetric_task(self) -> None:
        assert play_until_end("synth-hop-ia", ["<A>x</A>", "no answer here", "<A>x</A>"]) == [
            None, None, "agreed"]
        assert play_until_end("synth-hop-ia", ["<A>x</A>", "<A></A>", "<A>x</A>"]) == [
            None, None, "agreed"]
        assert play_until_end("synth-hop-ia", ["<A></A>", "<A></A>", "hi"]) == [None, None, None]

    def test_debate_task_ignores_the_critic(self) -> None:
        texts = ["\\boxed{3}", "I think \\boxed{4}", "\\boxed{3}"]
        assert play_until_end("synth-arith-debate", texts) == [None, None, "agreed"]
        texts = ["\\boxed{3}", "no", "\\boxed{}", "ok", "\\boxed{3}"]
        assert play_until_end("synth-arith-debate", texts) == [None, None, None, None, "agreed"]
