"""The exchange split puts each held-out question where its answer is written, and scores each part."""

from __future__ import annotations

from benchmarks.exchange_split import answer_place, gold_in_text, split_scores
from optima_envs.core.types import Evidence


def test_the_gold_is_matched_as_whole_words_without_case_or_final_stop():
    assert gold_in_text("Kabaix.", "Dakith was born in kabaix.")
    assert not gold_in_text("Kab", "Dakith was born in Kabaix.")
    assert not gold_in_text("", "anything")


def test_an_answer_is_alone_partner_or_named():
    own = (Evidence("Dakith was born in Kabaix."),)
    assert answer_place("In which city was the founder of Truleikoux born?", "Kabaix", own) == "alone"
    assert answer_place("In which city was the founder of Truleikoux born?", "Zobar", own) == "partner"
    # The first speaker holds Reku's year, but which of the two is older needs the other's.
    assert answer_place("Who was born first, Dodos or Reku?", "Reku", (Evidence("Reku was born in 1950."),)) == "named"


def test_unscored_questions_are_left_out_not_counted_wrong():
    places = {0: "alone", 1: "alone", 2: "partner", 3: "named"}
    outcomes = [{"position": 0, "score": 1.0}, {"position": 1, "score": 0.0},
                {"position": 2, "score": None, "infra_failure": True}, {"position": 3, "score": 0.5}]
    parts = split_scores(outcomes, places)
    assert parts["alone"] == {"n": 2, "score": 0.5}
    assert parts["partner"] == {"n": 0, "score": None}
    assert parts["named"] == {"n": 1, "score": 0.5}
