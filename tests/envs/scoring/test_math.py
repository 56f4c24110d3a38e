"""Tests for `math_equivalent`: symbolic equivalence through math-verify in a worker process."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest

from optima_envs.errors import ConfigError, ScoringError
from optima_envs.scoring import _math_client, math_equivalent

pytest.importorskip("math_verify", reason="needs: pip install 'math-verify[antlr4_13_2]'")


class TestMathEquivalent:
    @pytest.mark.parametrize(
        ("prediction", "gold"),
        [
            ("\\frac{1}{2}", "0.5"),
            ("0.5", "\\frac{1}{2}"),
            ("\\dfrac12", "1/2"),
            ("x=3", "3"),
            ("3", "x = 3"),
            ("\\text{(A)}", "A"),
            ("(A)", "A"),
            ("\\frac{\\sqrt{2}}{2}", "\\sqrt2/2"),
            ("x^2+2x+1", "(x+1)^2"),
            ("1,000", "1000"),
            ("\\$29.00", "29"),
            ("50\\%", "0.5"),
            ("\\{1, 2\\}", "\\{2, 1\\}"),
            ("\\frac{3}{4}", "0.75"),
        ],
    )
    def test_equivalent(self, prediction: str, gold: str) -> None:
        assert math_equivalent(prediction, gold) == 1.0

    @pytest.mark.parametrize(
        ("prediction", "gold"),
        [("\\frac{1}{3}", "0.5"), ("B", "A"), ("x^2", "x^3"), ("3.0001", "3"), ("", "3")],
    )
    def test_not_equivalent(self, prediction: str, gold: str) -> None:
        assert math_equivalent(prediction, gold) == 0.0

    def test_unparseable_prediction_is_wrong_not_a_failure(self) -> None:
        assert math_equivalent("\\frac{", "3") == 0.0

    def test_unparseable_gold_raises(self) -> None:
        with pytest.raises(ScoringError, match=re.escape(
                "math_equivalent: could not parse the gold answer '\\\\frac{' as math")):
            math_equivalent("3", "\\frac{")

    def test_empty_gold_raises(self) -> None:
        with pytest.raises(ScoringError,
                           match=re.escape("math_equivalent: the gold answer is empty")):
            math_equivalent("3", " ")

    @pytest.mark.parametrize("timeout_s", [0, -1.0, float("inf"), float("nan")])
    def test_bad_timeout_is_a_config_error(self, timeout_s: float) -> None:
        with pytest.raises(ConfigError, match="`timeout_s` must be a positive number of seconds"):
            math_equivalent("1", "1", timeout_s=timeout_s)

    def test_timeout_kills_slow_comparison(self) -> None:
        # sympy needs about 3 s to expand this; the deadline stops it at 0.3 s.
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=re.escape(
                "math_equivalent: math-verify took longer than 0.3 s (timeout_s)")):
            math_equivalent("(x+y)^{60}+1", "(x+y+1)^{60}", timeout_s=0.3)
        assert time.monotonic() - started < 2.0
        assert math_equivalent("2", "2.0") == 1.0  # a fresh worker replaces the killed one

    def test_works_outside_the_main_thread(self) -> None:
        # math-verify's own signal.alarm timeouts would raise ValueError here; ours do not.
        results: list[float] = []
        thread = threading.Thread(target=lambda: results.append(math_equivalent("1/2", "0.5")))
        thread.start()
        thread.join()
        assert results == [1.0]

    def test_worker_crash_is_a_scoring_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def crash(self: Any, request: dict[str, str], timeout_s: float) -> dict[str, str]:
            return {"crash": "MemoryError"}

        monkeypatch.setattr(_math_client._Worker, "ask", crash)
        with pytest.raises(ScoringError, match=re.escape(
                "math_equivalent: the math-verify worker failed on prediction '1', gold '2': "
                "MemoryError")):
            math_equivalent("1", "2")

    def test_missing_dependency_names_the_pip_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_math_client.importlib.util, "find_spec", lambda name: None)
        with pytest.raises(ModuleNotFoundError, match=re.escape(
                "pip install 'math-verify[antlr4_13_2]'")):
            math_equivalent("1", "2")


class TestLatexThousands:
    def test_thousands_separators_in_gold(self) -> None:
        assert math_equivalent("\\frac{12}{5525}", "\\frac{12}{5,\\!525}") == 1.0
        assert math_equivalent("5525", "5{,}525") == 1.0
