"""Tests for `score_response` and `ScoreResult`: wrong answers vs. recorded scoring failures."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pytest

import optima_envs
from optima_envs.core.dialogue_env import DialogueEnv
from optima_envs.errors import ScoringError
from optima_envs.scoring import (
    ScoreResult,
    choice_match,
    extract_boxed,
    extract_tag,
    max_over_aliases,
    numeric_match,
    score_response,
    token_f1,
)


def _timeout(prediction: str, gold: Any) -> float:
    raise TimeoutError("math_equivalent: math-verify took longer than 5 s")


class TestScoreResponse:
    def test_scored_answer(self) -> None:
        result = score_response("Bob: <A>J. S. Bach</A>", ["Johann Sebastian Bach", "J. S. Bach"],
                                extractor=extract_tag, metric=partial(max_over_aliases, token_f1))
        assert result == ScoreResult(score=1.0, ok=True, answer="J. S. Bach",
                                     extraction_method="tag", fallback=False, error=None)

    def test_fallback_is_recorded(self) -> None:
        result = score_response("Answer: 72", "72", extractor=extract_boxed, metric=numeric_match)
        assert result == ScoreResult(score=1.0, ok=True, answer="72",
                                     extraction_method="answer_line", fallback=True, error=None)

    def test_missing_answer_is_a_wrong_answer(self) -> None:
        def never(prediction: str, gold: Any) -> float:
            raise AssertionError("the metric must not run without an answer")

        result = score_response("I am not sure.", "72", extractor=extract_boxed, metric=never)
        assert result == ScoreResult(score=0.0, ok=True, answer=None, extraction_method="none",
                                     fallback=False, error=None)

    def test_empty_answer_is_no_answer(self) -> None:
        result = score_response("<A> </A>", "72", extractor=extract_tag, metric=numeric_match)
        assert result == ScoreResult(score=0.0, ok=True, answer=None, extraction_method="none",
                                     fallback=False, error=None)

    def test_equation_in_box_scores_its_result(self) -> None:
        result = score_response("\\boxed{5 + 3 = 18}", "18", extractor=extract_boxed,
                                metric=numeric_match)
        assert (result.answer, result.score) == ("5 + 3 = 18", 1.0)

    def test_scoring_error_is_recorded_not_zero(self) -> None:
        result = score_response("\\boxed{5}", "five", extractor=extract_boxed, metric=numeric_match)
        assert result == ScoreResult(
            score=None, ok=False, answer="5", extraction_method="boxed", fallback=False,
            error="ScoringError: numeric_match: the gold answer 'five' has no number.")

    def test_choice_without_options_is_recorded(self) -> None:
        result = score_response("<A>B</A>", "B", extractor=extract_tag,
                                metric=partial(choice_match, options={}))
        assert (result.score, result.ok, result.error) == (
            None, False,
            "ScoringError: choice_match: the options mapping is empty; the task must list them.")

    def test_timeout_is_recorded(self) -> None:
        result = score_response("\\boxed{x}", "x", extractor=extract_boxed, metric=_timeout)
        assert (result.score, result.ok, result.error) == (
            None, False, "TimeoutError: math_equivalent: math-verify took longer than 5 s")

    def test_other_errors_propagate(self) -> None:
        def buggy(prediction: str, gold: Any) -> float:
            raise KeyError("bug")

        with pytest.raises(KeyError):
            score_response("<A>x</A>", "x", extractor=extract_tag, metric=buggy)


class TestDialogueEnvScoring:
    """The env scores its final answer with `score_response`, so both agree on every case."""

    @staticmethod
    def _end(messages: list[str]) -> dict[str, Any]:
        env = optima_envs.make("synth-hop-ia", max_turns=len(messages))
        env.reset(seed=0, options={"index": 0})
        for text in messages:
            infos = env.step({env.current_speaker: text})[4]
        return {key: infos["alice"][key] for key in ("answer", "score", "score_ok", "score_error")}

    def test_empty_last_answer_does_not_replace_an_answer(self) -> None:
        gold = optima_envs.make("synth-hop-ia").task.source.get(0).gold
        assert self._end([f"<A>{gold}</A>", "<A></A>"]) == {
            "answer": gold, "score": 1.0, "score_ok": True, "score_error": None}

    def test_only_empty_answers_score_zero(self) -> None:
        assert self._end(["<A> </A>", "hi"]) == {
            "answer": None, "score": 0.0, "score_ok": True, "score_error": None}

    def test_scoring_failure_is_recorded(self) -> None:
        env = optima_envs.make("synth-hop-ia")

        def unscorable(answer: str, instance: Any) -> float:
            raise ScoringError("token_f1: the gold answer is empty ('')")

        failing = DialogueEnv(replace(env.task, metric=unscorable), max_turns=1)
        failing.reset(seed=0)
        infos = failing.step({"alice": "<A>x</A>"})[4]["alice"]
        assert (infos["answer"], infos["score"], infos["score_ok"], infos["score_error"]) == (
            "x", None, False, "ScoringError: token_f1: the gold answer is empty ('')")


class TestScoreResult:
    def test_to_info_is_plain_scalars(self) -> None:
        result = ScoreResult(score=0.5, ok=True, answer="x", extraction_method="tag",
                             fallback=False, error=None)
        assert result.to_info() == {"score": 0.5, "ok": True, "answer": "x",
                                    "extraction_method": "tag", "fallback": False, "error": None}

    def test_to_info_of_failure(self) -> None:
        info = score_response("<A>1</A>", "none", extractor=extract_tag,
                              metric=numeric_match).to_info()
        assert info == {"score": None, "ok": False, "answer": "1", "extraction_method": "tag",
                        "fallback": False,
                        "error": "ScoringError: numeric_match: the gold answer 'none' "
                                 "has no number."}
        assert all(v is None or type(v) in (float, bool, str) for v in info.values())

    def test_is_frozen(self) -> None:
        result = ScoreResult(score=None, ok=False, answer=None, extraction_method="none",
                             fallback=False, error="x")
        with pytest.raises(AttributeError):
            result.score = 1.0  # type: ignore[misc]
