"""Tests for `optima_envs.scoring.normalize`: one class per function, exact outputs."""

from __future__ import annotations

from fractions import Fraction

import pytest

from optima_envs.scoring import normalize_answer, normalize_triviaqa, parse_bare_number, parse_number
from optima_envs.scoring.normalize import Number, read_number


class TestNormalizeAnswer:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("The Eiffel Tower", "eiffel tower"),  # case and article
            ("an apple a day", "apple day"),  # all three articles
            ("Theatre, then", "theatre then"),  # articles only as whole words
            ("U.S.A.!", "usa"),  # punctuation removed, not replaced
            ("  many \t spaces\n\nhere ", "many spaces here"),  # whitespace collapsed
            ("Paris.", "paris"),
            ("The", ""),
            ("", ""),
            ("Café Ünïcode", "café ünïcode"),  # non-ASCII letters kept
            ("«quoted»", "«quoted»"),  # only ASCII punctuation, as the official scripts do
        ],
    )
    def test_squad_normalisation(self, raw: str, expected: str) -> None:
        assert normalize_answer(raw) == expected


class TestNormalizeTriviaQA:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("David_Seville", "david seville"),  # underscores become spaces
            ("The Eiffel Tower", "eiffel tower"),
            ("U.S.A.!", "u s"),  # punctuation becomes a space, then "a" is an article
            ("Lewis, (Harry) Sinclair", "lewis harry sinclair"),
            ("\u2018quoted\u2019 x\u00b4y`z", "quoted x y z"),  # the quotes the script adds
            ("«quoted»", "«quoted»"),
            ("  many \t spaces ", "many spaces"),
            ("The", ""),
        ],
    )
    def test_official_triviaqa_normalisation(self, raw: str, expected: str) -> None:
        assert normalize_triviaqa(raw) == expected


class TestParseNumber:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("29", 29.0),
            ("$29.00", 29.0),
            ("\\$29", 29.0),
            ("$\\$29.50$", 29.5),
            ("1,000", 1000.0),
            ("1{,}000", 1000.0),
            ("1\\,000", 1000.0),
            ("1,234,567.89", 1234567.89),
            ("-3.5", -3.5),
            ("\u22122", -2.0),  # Unicode minus
            ("+4", 4.0),
            ("50%", 50.0),  # a percentage is its number, not divided by 100
            ("50\\%", 50.0),
            ("1/2", 0.5),
            ("3 / 4", 0.75),
            ("\\frac{1}{2}", 0.5),
            ("\\dfrac12", 0.5),
            ("\\tfrac{3}{4}", 0.75),
            ("-\\frac{3}{4}", -0.75),
            ("1e3", 1000.0),
            ("2.5E-2", 0.025),
            (".5", 0.5),
            ("3.", 3.0),
            ("29 dollars", 29.0),
            ("about 12 apples", 12.0),
            ("5 - 2 = 3", 5.0),  # the first number wins
            ("1,0000", 1.0),  # not a thousands separator
            ("1,000, then 2", 1000.0),
            ("COVID-19", 19.0),  # a hyphen glued to a word is not a sign
            ("\u0663", 3.0),  # Arabic-Indic digit three
        ],
    )
    def test_reads_first_number(self, raw: str, expected: float) -> None:
        assert parse_number(raw) == expected

    @pytest.mark.parametrize("raw", ["", "no digits here", "$", "\\frac{a}{b}", "1/0", "a/b"])
    def test_none_without_number(self, raw: str) -> None:
        assert parse_number(raw) is None


class TestParseBareNumber:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [("$29.00", 29.0), ("50%", 50.0), ("\\frac{1}{2}", 0.5), ("  -7 ", -7.0), ("1,000", 1000.0),
         ("29.", 29.0), ("1e3", 1000.0)],
    )
    def test_decorated_numbers(self, raw: str, expected: float) -> None:
        assert parse_bare_number(raw) == expected

    @pytest.mark.parametrize(
        "raw",
        ["Route 66", "x = 3", "3 or 4", "1,000, then 2", "none", "29 dollars", "22 December",
         "3.5 billion", "2nd Infantry Division", "1990s"],
    )
    def test_numbers_in_text_are_not_bare(self, raw: str) -> None:
        assert parse_bare_number(raw) is None


class TestReadNumber:
    @pytest.mark.parametrize(
        ("raw", "exact"),
        [("1450001", Fraction(1450001)), ("12345678901234567", Fraction(12345678901234567)),
         ("0.1", Fraction(1, 10)), ("-\\frac{3}{4}", Fraction(-3, 4)), ("1.5e3", Fraction(1500)),
         ("1,000.5", Fraction(2001, 2))],
    )
    def test_exact_value(self, raw: str, exact: Fraction) -> None:
        assert read_number(raw) == Number(value=float(exact), exact=exact)

    def test_huge_number_has_no_exact_value(self) -> None:
        assert read_number("1e999999") == Number(value=float("inf"), exact=None)
        assert read_number("9" * 5000).exact is None

    def test_bare(self) -> None:
        assert read_number("22 December", bare=True) is None
        assert read_number("22 December") == Number(22.0, Fraction(22))
