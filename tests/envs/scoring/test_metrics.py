"""Tests for the text and number metrics of `optima_envs.scoring` (math is in test_math.py)."""

from __future__ import annotations

import re
from functools import partial

import pytest

from optima_envs.errors import ScoringError
from optima_envs.scoring import (
    choice_match,
    exact_match,
    max_over_aliases,
    numeric_match,
    token_f1,
    triviaqa_f1,
    word_match,
)


class TestTokenF1:
    @pytest.mark.parametrize(
        ("prediction", "gold", "expected"),
        [
            ("Paris", "paris", 1.0),
            ("the Eiffel Tower!", "Eiffel tower", 1.0),  # articles, punctuation, case
            ("cat sat", "the cat sat down", 0.8),  # P=1, R=2/3
            ("an b c d", "the b", 0.5),  # articles dropped; P=1/3, R=1
            ("Rome", "Paris", 0.0),
            ("x x y", "x y y", 2 / 3),  # multiset overlap
        ],
    )
    def test_squad_f1(self, prediction: str, gold: str, expected: float) -> None:
        assert token_f1(prediction, gold) == pytest.approx(expected, abs=1e-12)

    @pytest.mark.parametrize(
        ("prediction", "gold", "expected"),
        [
            ("yes", "yes it is", 0.0),  # would be 0.67 without the special case
            ("yes it is", "yes", 0.0),
            ("no answer", "noanswer", 0.0),
            ("Yes.", "yes", 1.0),
            ("no", "No", 1.0),
            ("noanswer", "yes", 0.0),
        ],
    )
    def test_yes_no_special_case(self, prediction: str, gold: str, expected: float) -> None:
        assert token_f1(prediction, gold) == expected

    def test_both_normalise_to_nothing(self) -> None:
        assert token_f1("the", "The The") == 1.0
        assert token_f1("a", "Blur") == 0.0

    def test_empty_gold_raises(self) -> None:
        with pytest.raises(ScoringError, match=re.escape(
                "token_f1: the gold answer is empty ('  '); fix the dataset row.")):
            token_f1("x", "  ")


class TestExactMatch:
    @pytest.mark.parametrize(
        ("prediction", "gold", "expected"),
        [
            ("The Beatles", "beatles", 1.0),
            ("  paris. ", "Paris", 1.0),
            ("Paris France", "Paris", 0.0),
            ("$29.00", "29", 1.0),  # currency and trailing zeros
            ("1,000", "1000", 1.0),  # thousands separators
            ("50%", "50", 1.0),
            ("\\frac{1}{2}", "0.5", 1.0),  # LaTeX fraction vs decimal
            ("1/2", "0.5", 1.0),
            ("0.3333333", "1/3", 1.0),  # a non-integer may differ by 1e-6 relative
            ("0.333", "1/3", 0.0),
            ("Route 66", "66", 0.0),  # a number inside text is compared as text
            ("29", "30", 0.0),
            ("0", "-0", 1.0),
        ],
    )
    def test_exact_match(self, prediction: str, gold: str, expected: float) -> None:
        assert exact_match(prediction, gold) == expected

    @pytest.mark.parametrize(
        ("prediction", "gold"),
        [
            ("22 December", "22 November"),
            ("3.5 billion", "3.5 million"),
            ("2nd Infantry Division", "2nd Armored Division"),
            ("29 dollars", "$29"),  # a number followed by words compares as text (as SQuAD does)
            ("1990s", "1990"),
        ],
    )
    def test_number_followed_by_words_compares_whole_text(self, prediction: str, gold: str) -> None:
        assert exact_match(prediction, gold) == 0.0
        assert exact_match(prediction, prediction.upper()) == 1.0

    @pytest.mark.parametrize(
        ("prediction", "gold", "expected"),
        [
            ("1450001", "1450000", 0.0),  # integers compare exactly: no tolerance
            ("1450000.0", "1450001", 0.0),  # an integer value written as a decimal too
            ("12345678901234567", "12345678901234568", 0.0),  # beyond float precision
            ("1e3", "1000", 1.0),
            ("3.6", "36", 0.0),  # numbers compare by value, not by SQuAD text (it drops the dot)
        ],
    )
    def test_numbers_compare_by_value(self, prediction: str, gold: str, expected: float) -> None:
        assert exact_match(prediction, gold) == expected

    def test_empty_gold_raises(self) -> None:
        with pytest.raises(ScoringError, match=re.escape("exact_match: the gold answer is empty")):
            exact_match("x", "")


class TestTriviaQAF1:
    """The official triviaqa_evaluation.py F1 (its own normaliser, no yes/no rule)."""

    @pytest.mark.parametrize(
        ("prediction", "gold", "expected"),
        [
            ("David_Seville", "David Seville", 1.0),  # underscores are spaces
            ("Lewis, (Harry) Sinclair", "lewis harry sinclair", 1.0),
            ("U.S.A.", "U S", 1.0),  # punctuation becomes a space; then "a" is an article
            ("rock\u2019n\u2019roll", "rock n roll", 1.0),
            ("cat sat", "the cat sat down", 0.8),
            ("yes", "yes it is", 0.5),  # no HotpotQA yes/no rule
        ],
    )
    def test_official_f1(self, prediction: str, gold: str, expected: float) -> None:
        assert triviaqa_f1(prediction, gold) == pytest.approx(expected, abs=1e-12)

    def test_no_common_token_is_zero(self) -> None:
        assert triviaqa_f1("the", "The") == 0.0  # the official script: no overlap, no credit
        assert triviaqa_f1("Rome", "Paris") == 0.0

    def test_squad_normaliser_differs(self) -> None:
        assert token_f1("David_Seville", "David Seville") == 0.0

    def test_empty_gold_raises(self) -> None:
        with pytest.raises(ScoringError, match=re.escape(
                "triviaqa_f1: the gold answer is empty (''); fix the dataset row.")):
            triviaqa_f1("x", "")


class TestMaxOverAliases:
    ALIASES = ["Johann Sebastian Bach", "J. S. Bach", "Bach"]  # a TriviaQA-style alias list

    def test_best_alias_wins(self) -> None:
        assert max_over_aliases(exact_match, "bach", self.ALIASES) == 1.0
        assert max_over_aliases(token_f1, "Sebastian Bach", self.ALIASES) == pytest.approx(0.8)
        assert max_over_aliases(exact_match, "Handel", self.ALIASES) == 0.0

    def test_as_partial_metric(self) -> None:
        metric = partial(max_over_aliases, token_f1)
        assert metric("J S Bach", self.ALIASES) == 1.0

    def test_empty_aliases_raise(self) -> None:
        with pytest.raises(ScoringError, match=re.escape(
                "max_over_aliases: the list of gold aliases is empty.")):
            max_over_aliases(token_f1, "x", [])

    def test_single_string_is_a_type_error(self) -> None:
        with pytest.raises(TypeError, match=re.escape("pass ['Bach']")):
            max_over_aliases(token_f1, "x", "Bach")


class TestNumericMatch:
    @pytest.mark.parametrize(
        ("prediction", "gold", "expected"),
        [
            ("72", "72", 1.0),
            ("The total is $72.00", "72", 1.0),  # the first number of the prediction
            ("1,000", "1000", 1.0),
            ("-3.5", "-7/2", 1.0),
            ("1e3", "1000", 1.0),
            ("1000.0005", "1000", 1.0),  # a decimal may differ by 1e-6 relative
            ("1000.01", "1000", 0.0),
            ("1450001", "1450000", 0.0),  # integers compare exactly
            ("1450000.0", "1450001", 0.0),
            ("12345678901234567", "12345678901234568", 0.0),
            ("$18.00", "18", 1.0),  # by value, where GSM8K's reference compares strings
            ("71", "72", 0.0),
            ("seventy-two", "72", 0.0),  # no number in the prediction: wrong, not an error
            ("", "72", 0.0),
        ],
    )
    def test_numeric_match(self, prediction: str, gold: str, expected: float) -> None:
        assert numeric_match(prediction, gold) == expected

    def test_gold_without_number_raises(self) -> None:
        with pytest.raises(ScoringError, match=re.escape(
                "numeric_match: the gold answer 'seventy' has no number.")):
            numeric_match("70", "seventy")

    @pytest.mark.parametrize(
        ("prediction", "expected"),
        [("5 + 3 = 18", 1.0), ("x = 18", 1.0), ("2 \\times 9 = 18 dollars", 1.0),
         ("18 = 5 + 3", 0.0), ("a = 18 = 19", 0.0)],
    )
    def test_reads_the_right_side_of_a_final_equation(self, prediction: str,
                                                      expected: float) -> None:
        assert numeric_match(prediction, "18") == expected

    @pytest.mark.parametrize(
        ("prediction", "gold", "expected"),
        [("2 * 17 + 32", "66", 1.0), ("2 * 17 + 32", "2", 0.0),  # its value, not its first operand
         ("2 * 17 + 32 stickers.", "66", 1.0), ("(2 + 3) * 4 dollars", "20", 1.0),
         ("1,000 + 5", "1005", 1.0), ("2 \\times 9", "18", 1.0), ("3 ÷ 4", "0.75", 1.0),
         ("0.1 + 0.2", "0.3", 1.0),  # exact fractions, no float drift
         ("x = 5 - 2 apples", "3", 1.0), ("18 - that is my answer", "18", 1.0),  # no second number
         ("2 * (3", "2", 1.0), ("5/0 + 1", "1", 0.0)],  # malformed: the first number, or none
    )
    def test_evaluates_an_unevaluated_expression(self, prediction: str, gold: str, expected: float) -> None:
        assert numeric_match(prediction, gold) == expected


class TestChoiceMatch:
    OPTIONS = {"A": "Paris", "B": "London", "C": "A dog", "D": "Rome"}

    @pytest.mark.parametrize(
        "prediction",
        ["B", "b", "(B)", "B)", "B.", "[B]", "**B**", "Option B", "option b", "The answer is (B)",
         "Answer: B", "B) London", "(b) london", "London", "  london. ", "B because of the map"],
    )
    def test_designates_gold(self, prediction: str) -> None:
        assert choice_match(prediction, "B", self.OPTIONS) == 1.0

    @pytest.mark.parametrize(
        "prediction",
        ["A", "Paris", "B) Rome", "E", "I think B", "", "Londres", "A dog"],
    )
    def test_does_not_designate_gold(self, prediction: str) -> None:
        assert choice_match(prediction, "B", self.OPTIONS) == 0.0

    @pytest.mark.parametrize(
        "prediction",
        ["B or C", "B and C", "B. Actually C.", "B, then (C)", "Option B or option C", "B or A",
         "(B) London, or D"],
    )
    def test_two_options_named_is_wrong(self, prediction: str) -> None:
        assert choice_match(prediction, "B", self.OPTIONS) == 0.0
        assert choice_match(prediction, "C", self.OPTIONS) == 0.0

    @pytest.mark.parametrize("prediction", ["B or B", "B. A map shows it", "B, I am sure",
                                            "B because a dog would not", "B) London. Not C.",
                                            "B: vitamin C is not it"])
    def test_one_option_named(self, prediction: str) -> None:
        assert choice_match(prediction, "B", self.OPTIONS) == 1.0

    def test_option_text_beats_letter_reading(self) -> None:
        # "A dog" is option C's text, not the letter A followed by "dog".
        assert choice_match("A dog", "C", self.OPTIONS) == 1.0
        assert choice_match("a", "A", self.OPTIONS) == 1.0

    def test_numeric_labels(self) -> None:
        assert choice_match("(2)", "2", {"1": "red", "2": "blue"}) == 1.0
        assert choice_match("2 or 1", "2", {"1": "red", "2": "blue"}) == 0.0
        assert choice_match("2 because 1 is red", "2", {"1": "red", "2": "blue"}) == 1.0

    def test_empty_options_raise(self) -> None:
        with pytest.raises(ScoringError, match=re.escape(
                "choice_match: the options mapping is empty; the task must list them.")):
            choice_match("A", "A", {})

    def test_gold_not_an_option_raises(self) -> None:
        with pytest.raises(ScoringError, match=re.escape(
                "choice_match: the gold label 'E' is not an option label (['A', 'B', 'C', 'D']).")):
            choice_match("A", "E", self.OPTIONS)


class TestChoiceAlikeOptions:
    """Options that the SQuAD normaliser makes equal (MMLU: "36"/"3.6", "-36m"/"36m")."""

    OPTIONS = {"A": "36", "B": "3.6", "C": "-36m", "D": "36m"}

    @pytest.mark.parametrize(
        ("prediction", "gold"),
        [("36", "A"), ("3.6", "B"), ("-36m", "C"), ("36m", "D"), ("(B) 3.6", "B"), ("C) -36m", "C"),
         (" 3.6 ", "B"), ("36M", "D")],
    )
    def test_exact_option_text_wins(self, prediction: str, gold: str) -> None:
        assert choice_match(prediction, gold, self.OPTIONS) == 1.0

    @pytest.mark.parametrize("gold", ["A", "B"])
    def test_ambiguous_text_is_wrong(self, gold: str) -> None:
        assert choice_match("3,6", gold, self.OPTIONS) == 0.0
        assert choice_match("(A) 3,6", gold, self.OPTIONS) == 0.0


class TestWordMatch:
    CANDIDATES = ["king", "kingdom", "queen", "Mr. Fox"]

    @pytest.mark.parametrize(
        ("prediction", "expected"),
        [
            ("king", 1.0),
            ("The King.", 1.0),
            ("I think it is the king", 1.0),  # exactly one candidate in the sentence
            ("kingdom", 0.0),  # whole words only
            ("the king or the queen", 0.0),  # two candidates: no choice made
            ("queen", 0.0),
            ("nobody", 0.0),
        ],
    )
    def test_word_match(self, prediction: str, expected: float) -> None:
        assert word_match(prediction, "king", self.CANDIDATES) == expected

    def test_multi_word_candidate(self) -> None:
        assert word_match("it was mr fox", "Mr. Fox", self.CANDIDATES) == 1.0

    def test_empty_candidates_raise(self) -> None:
        with pytest.raises(ScoringError,
                           match=re.escape("word_match: the candidate list is empty.")):
            word_match("king", "king", [])

    def test_gold_not_a_candidate_raises(self) -> None:
        with pytest.raises(ScoringError, match=re.escape(
                "word_match: the gold word 'prince' is not among the candidates")):
            word_match("king", "prince", self.CANDIDATES)


class TestChoiceBareLabelFirst:
    """Options whose text looks like a label (MMLU college_physics, formal_logic; ARC Mercury_402547)."""

    OPTIONS = {"A": "2c", "B": "c", "C": "0.8c", "D": "0.5c"}

    def test_bare_label_wins_over_option_text(self) -> None:
        assert choice_match("C", "C", self.OPTIONS) == 1.0
        assert choice_match("(C)", "C", self.OPTIONS) == 1.0

    def test_option_text_still_accepted(self) -> None:
        assert choice_match("0.8c", "C", self.OPTIONS) == 1.0
        assert choice_match("(B) c", "B", self.OPTIONS) == 1.0

    def test_punctuation_only_text_is_not_a_label(self) -> None:
        options = {"A": "A", "B": "~~C", "C": "B", "D": "~B"}
        assert choice_match("C", "C", options) == 1.0
        assert choice_match("~~C", "B", options) == 1.0
