"""Robustness: extraction and parsing never raise on any text and stay linear on 1 MB inputs."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optima_envs.scoring import (
    Extraction,
    choice_match,
    exact_match,
    extract_boxed,
    extract_tag,
    normalize_answer,
    parse_number,
    token_f1,
    word_match,
)

# Arbitrary Unicode, plus texts assembled from the tokens the filters look for.
TOKENS = ["<A>", "</A>", "<a>", "\\boxed{", "\\boxed ", "\\fbox{", "{", "}", "\\{", "\\", "\\\\",
          "Answer:", "Final answer:", "The answer is", "\n", "$", "1,000", "-", "1/2", "\\frac",
          " ", "é", "🙂", "\u0663", "\u2212", "%", "e5", ".", "*"]
TEXTS = st.one_of(st.text(), st.lists(st.sampled_from(TOKENS), max_size=40).map("".join))
EXTRACTORS: list[Callable[[str], Extraction]] = [
    extract_tag, partial(extract_tag, strict=True),
    extract_boxed, partial(extract_boxed, strict=True),
]
PRIMARY = ["tag", "tag", "boxed", "boxed"]


class TestExtractionNeverRaises:
    @settings(max_examples=150, deadline=None)
    @given(text=TEXTS)
    def test_any_text(self, text: str) -> None:
        for extract, primary in zip(EXTRACTORS, PRIMARY):
            result = extract(text)
            assert result.answer is None or result.answer in text
            assert result.fallback == (result.method not in (primary, "none"))

    @settings(max_examples=150, deadline=None)
    @given(text=TEXTS)
    def test_parsers_and_metrics_on_any_prediction(self, text: str) -> None:
        normalize_answer(text)
        value = parse_number(text)
        assert value is None or isinstance(value, float)
        assert 0.0 <= token_f1(text, "the gold answer") <= 1.0
        assert exact_match(text, "$1,000") in (0.0, 1.0)
        assert choice_match(text, "B", {"A": "x", "B": "y"}) in (0.0, 1.0)
        assert word_match(text, "king", ["king", "queen"]) in (0.0, 1.0)


MEGABYTE = 1_000_000
HUGE = {
    "openers": "<A>" * (MEGABYTE // 3),
    "closers": "</A>" * (MEGABYTE // 4),
    "box_openers": "\\boxed{" * (MEGABYTE // 7),
    "braces": "{" * MEGABYTE,
    "backslashes": "\\" * MEGABYTE,
    "spaces": "Answer:" + " " * MEGABYTE + "x",
    "sign_spaces": "-" + " " * MEGABYTE,
    "digits": "1,000" * (MEGABYTE // 5),
    "emoji": "é🙂\n" * (MEGABYTE // 3),
    "answer_at_end": "x " * (MEGABYTE // 2) + "\\boxed{\\frac{1}{2}} <A>1/2</A>",
}


class TestHugeInputs:
    @pytest.mark.parametrize("name", sorted(HUGE))
    def test_one_megabyte_is_fast(self, name: str) -> None:
        text = HUGE[name]
        started = time.perf_counter()
        extract_tag(text)
        extract_boxed(text)
        parse_number(text)
        normalize_answer(text)
        # about 0.5 s here; quadratic behaviour would take minutes. The bound leaves room for a loaded machine.
        assert time.perf_counter() - started < 30.0

    def test_answer_after_a_megabyte(self) -> None:
        text = HUGE["answer_at_end"]
        assert extract_tag(text) == Extraction("1/2", "tag", False)
        assert extract_boxed(text) == Extraction("\\frac{1}{2}", "boxed", False)
