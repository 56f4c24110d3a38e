"""Tests for `optima_envs.scoring.extract`: exact extractions, fallbacks and their logging."""

from __future__ import annotations

import logging
import re

import pytest

from optima_envs.errors import ConfigError
from optima_envs.scoring import Extraction, extract_boxed, extract_tag

LOGGER = "optima_envs.scoring"


class TestExtraction:
    def test_is_frozen(self) -> None:
        extraction = Extraction(answer="x", method="tag", fallback=False)
        with pytest.raises(AttributeError):
            extraction.answer = "y"  # type: ignore[misc]

    def test_rejects_unknown_method(self) -> None:
        with pytest.raises(ValueError, match=re.escape("got 'regex'")):
            Extraction(answer="x", method="regex", fallback=False)  # type: ignore[arg-type]

    @pytest.mark.parametrize("answer", ["", "  \n"])
    def test_rejects_blank_answer(self, answer: str) -> None:
        with pytest.raises(ValueError, match="use answer=None"):
            Extraction(answer=answer, method="tag", fallback=False)

    def test_answer_none_exactly_when_method_none(self) -> None:
        with pytest.raises(ValueError, match="exactly when method is 'none'"):
            Extraction(answer=None, method="tag", fallback=False)
        with pytest.raises(ValueError, match="exactly when method is 'none'"):
            Extraction(answer="x", method="none", fallback=False)


class TestExtractTag:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("We agree. <A>Paris</A>", "Paris"),
            ("<A> first </A> then <A>second</A>", "second"),  # the last pair wins
            ("<a>lower</a>", "lower"),  # case-insensitive
            ("<A>Mixed</a>", "Mixed"),
            ("<A>\n  line one\n  line two\n</A>", "line one\n  line two"),  # multi-line, stripped
            ("<A>x<A>inner</A>", "inner"),  # a second opener replaces the first
            ("</A><A>ok</A></A>", "ok"),  # stray closers ignored
            ("<A>Zürich 🙂</A>", "Zürich 🙂"),
        ],
    )
    def test_last_well_formed_tag(self, text: str, expected: str) -> None:
        assert extract_tag(text) == Extraction(answer=expected, method="tag", fallback=False)

    @pytest.mark.parametrize(
        "text",
        ["<A></A>", "<A> \n </A>",
         "<A>old</A> <A>  </A>",  # an empty last answer does not resurrect an old one
         "<A></A> Answer: Paris"],  # nor does a fallback replace it
    )
    def test_empty_tag_is_no_answer(self, text: str) -> None:
        assert extract_tag(text) == Extraction(None, "none", False)

    def test_custom_tag(self) -> None:
        assert extract_tag("<A>no</A><ans>yes</ans>", tag="ans") == Extraction("yes", "tag", False)

    def test_invalid_tag_name(self) -> None:
        with pytest.raises(ConfigError, match=re.escape("got '<A>'")):
            extract_tag("text", tag="<A>")

    def test_missing_tag(self) -> None:
        assert extract_tag("I think it is Paris.") == Extraction(None, "none", False)

    def test_unclosed_tag_fallback(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, logger=LOGGER)
        result = extract_tag("Agreed, the answer is <A> Paris, France")
        assert result == Extraction("Paris, France", "unclosed_tag", True)
        assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
            (LOGGER, logging.INFO,
             "no tag answer found; fallback 'unclosed_tag' extracted 'Paris, France'")
        ]

    def test_well_formed_tag_beats_later_unclosed_tag(self) -> None:
        assert extract_tag("<A>Rome</A> or maybe <A>Paris") == Extraction("Rome", "tag", False)

    def test_empty_unclosed_tag_is_no_answer(self) -> None:
        assert extract_tag("text <A>   ") == Extraction(None, "none", False)
        assert extract_tag("text <A> </A") == Extraction(None, "none", False)

    @pytest.mark.parametrize("text", ["<A>Paris</A", "<A>Paris</", "<A>Paris<", "<a>Paris</a",
                                      "<A>Paris </A  "])
    def test_closing_tag_cut_off(self, text: str) -> None:
        # The token limit can stop a message inside its closing tag.
        assert extract_tag(text) == Extraction("Paris", "unclosed_tag", True)

    def test_partial_closer_of_another_tag_is_kept(self) -> None:
        assert extract_tag("<A>x </B") == Extraction("x </B", "unclosed_tag", True)
        assert extract_tag("<ans>x</an", tag="ans") == Extraction("x", "unclosed_tag", True)

    def test_answer_line_fallback(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, logger=LOGGER)
        text = "Answer: Rome\nLet me check again.\n**Final Answer:** Paris\nThanks!"
        assert extract_tag(text) == Extraction("Paris", "answer_line", True)
        assert [r.getMessage() for r in caplog.records] == [
            "no tag answer found; fallback 'answer_line' extracted 'Paris'"
        ]

    @pytest.mark.parametrize(
        ("line", "expected"),
        [("Answer: 42", "42"), ("final answer: x = 3", "x = 3"), ("The answer is Paris.", "Paris."),
         ("> Answer： 東京", "東京"), ("## Final answer: **B**", "B")],
    )
    def test_answer_line_forms(self, line: str, expected: str) -> None:
        assert extract_tag(f"reasoning\n{line}\n") == Extraction(expected, "answer_line", True)

    @pytest.mark.parametrize("text", ["Answer the question.", "Answers: 3", "Answer:   "])
    def test_not_answer_lines(self, text: str) -> None:
        assert extract_tag(text) == Extraction(None, "none", False)

    def test_strict_disables_fallbacks(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, logger=LOGGER)
        assert extract_tag("<A>Paris", strict=True) == Extraction(None, "none", False)
        assert extract_tag("Answer: Paris", strict=True) == Extraction(None, "none", False)
        assert extract_tag("<A>Paris</A>", strict=True) == Extraction("Paris", "tag", False)
        assert caplog.records == []

    def test_long_answer_is_truncated_in_log(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, logger=LOGGER)
        extract_tag("<A>" + "x" * 500)
        assert caplog.records[0].getMessage().endswith("'" + "x" * 77 + "...'")


class TestExtractBoxed:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("so the answer is \\boxed{42}.", "42"),
            ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
            ("$\\boxed{\\frac{3}{4}}$", "\\frac{3}{4}"),
            ("\\boxed{\\sqrt{\\frac{a^{2}}{b}}}", "\\sqrt{\\frac{a^{2}}{b}}"),  # deeper nesting
            ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are content
            ("\\boxed{1} then \\boxed{2}", "2"),  # the last box wins
            ("\\boxed{1} then \\boxed{2", "1"),  # an unbalanced last box is skipped
            ("\\fbox{7}", "7"),
            ("\\boxed {  8 }", "8"),
            ("\\boxed 5$", "5"),  # brace-less form
            ("\\boxed{\\boxed{9}}", "9"),  # the innermost box starts last
        ],
    )
    def test_last_balanced_box(self, text: str, expected: str) -> None:
        assert extract_boxed(text) == Extraction(expected, "boxed", False)

    def test_tag_fallback(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, logger=LOGGER)
        assert extract_boxed("so <A>3/4</A>") == Extraction("3/4", "tag", True)
        assert [r.getMessage() for r in caplog.records] == [
            "no boxed answer found; fallback 'tag' extracted '3/4'"
        ]

    def test_answer_line_fallback(self) -> None:
        assert extract_boxed("work\nFinal answer: 12") == Extraction("12", "answer_line", True)

    def test_strict_disables_fallbacks(self) -> None:
        assert extract_boxed("<A>3</A>", strict=True) == Extraction(None, "none", False)

    @pytest.mark.parametrize("text", ["\\boxed{}", "\\boxed{ }", "\\boxed{1} \\boxed{}",
                                      "\\boxed{} <A>3</A>"])
    def test_empty_box_is_no_answer(self, text: str) -> None:
        assert extract_boxed(text) == Extraction(None, "none", False)

    def test_missing_box(self) -> None:
        assert extract_boxed("just text {with} braces") == Extraction(None, "none", False)
