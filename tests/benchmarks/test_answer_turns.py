"""The first answer's turn in a dialogue, and a board transcript read as answered messages."""

from __future__ import annotations

from benchmarks.answer_turns import first_answer_turn, tagged_messages


def test_the_first_tagged_message_counts_and_none_when_nobody_answered():
    assert first_answer_turn(["Zorp was founded by Bami.", "Bami was born in Krelo. <A>Krelo</A>", "<A>Krelo</A>"]) == 1
    assert first_answer_turn(["<A>Zorp</A>", "<A>Zorp</A>"]) == 0
    assert first_answer_turn(["Zorp was founded by Bami.", "Bami was born in Krelo."]) is None


def test_a_transcript_becomes_seat_text_answered_triples():
    transcript = [{"speaker": "alice", "text": "Bami was born in Krelo."}, {"speaker": "bob", "text": "<A>Krelo</A>"},
                  {"speaker": "judge", "text": "ignored"}]
    assert tagged_messages(transcript, {"alice": 0, "bob": 1}) == [(0, "Bami was born in Krelo.", False),
                                                                   (1, "<A>Krelo</A>", True)]
