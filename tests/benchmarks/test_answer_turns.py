"""The first answer's turn in a dialogue."""

from __future__ import annotations

from benchmarks.answer_turns import first_answer_turn


def test_the_first_tagged_message_counts_and_none_when_nobody_answered():
    assert first_answer_turn(["Zorp was founded by Bami.", "Bami was born in Krelo. <A>Krelo</A>", "<A>Krelo</A>"]) == 1
    assert first_answer_turn(["<A>Zorp</A>", "<A>Zorp</A>"]) == 0
    assert first_answer_turn(["Zorp was founded by Bami.", "Bami was born in Krelo."]) is None
