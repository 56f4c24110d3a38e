"""Tests for `math_equivalent`: symbolic equivalence through math-verify in a worker process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from optima_envs.errors import ConfigError, ScoringError
from optima_envs.scoring import _math_client, math_equivalent
from optima_envs.test.math_cases import EQUIVALENT, NON_ANSWERS, NOT_EQUIVALENT, busy_cores, crowd_in

pytest.importorskip("math_verify", reason="needs: pip install 'math-verify[antlr4_13_2]'")


class TestMathEquivalent:
    @pytest.mark.parametrize(("prediction", "gold"), EQUIVALENT)
    def test_equivalent(self, prediction: str, gold: str) -> None:
        assert math_equivalent(prediction, gold) == 1.0

    @pytest.mark.parametrize(("prediction", "gold"), NOT_EQUIVALENT)
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
                "math_equivalent: math-verify used more than 0.3 s of CPU time (timeout_s=0.3) comparing")):
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


class TestNonAnswers:
    @pytest.mark.parametrize("prediction", NON_ANSWERS)
    def test_decided_without_math_verify(self, prediction: str, monkeypatch: pytest.MonkeyPatch) -> None:
        def asked(*args: Any) -> bool:
            raise AssertionError(f"math-verify was asked about {prediction!r}")

        monkeypatch.setattr(_math_client, "equivalent", asked)
        assert math_equivalent(prediction, "3") == 0.0
        assert math_equivalent(prediction, "\\emptyset", timeout_s=1e-9) == 0.0

    @pytest.mark.parametrize("prediction", NON_ANSWERS)
    def test_math_verify_agrees(self, prediction: str) -> None:
        for gold in ("3", "\\emptyset", "\\infty"):
            assert _math_client.equivalent(prediction, gold, 5.0) is False

    @pytest.mark.parametrize("prediction", ["{}", "∅", "\\{\\}", "π", "½", "٣", "\\pi", "x"])
    def test_symbols_that_name_a_value_are_still_compared(self, prediction: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
        asked: list[str] = []
        monkeypatch.setattr(_math_client, "equivalent", lambda p, g, t: asked.append(p) or True)
        assert math_equivalent(prediction, "\\emptyset") == 1.0 and asked == [prediction]

    def test_the_empty_set_without_letters_is_right(self) -> None:
        assert math_equivalent("{}", "\\emptyset") == 1.0
        assert math_equivalent("∅", "\\emptyset") == 1.0


class TestCpuTimeLimit:
    """The limit counts the worker's CPU time, so a busy machine slows scoring but never fails it."""

    def test_cpu_seconds_of_a_process(self) -> None:
        if _math_client.cpu_seconds(os.getpid()) is None:
            pytest.skip("no /proc on this system: the limit falls back to wall time")
        start = _math_client.cpu_seconds(os.getpid())
        spin = time.process_time() + 0.2
        while time.process_time() < spin:
            pass
        used = _math_client.cpu_seconds(os.getpid()) - start
        assert 0.15 <= used <= 0.5
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        assert _math_client.cpu_seconds(child.pid) is None  # reaped: no such process

    @pytest.mark.parametrize(("cpu_used", "wall_used", "why"), [
        (0.1, 30.0, None),
        (0.6, 0.7, "used more than 0.5 s of CPU time"),
        (0.1, 61.0, "gave no answer within 60 s of wall time, though it used less than 0.5 s of CPU time"),
        (None, 0.4, None),
        (None, 0.6, "took longer than 0.5 s"),
    ])
    def test_overrun(self, cpu_used: float | None, wall_used: float, why: str | None) -> None:
        assert _math_client.overrun(cpu_used, wall_used, 0.5) == why

    def test_the_wall_backstop_is_generous(self) -> None:
        assert _math_client.wall_backstop(0.5) == 60.0 and _math_client.wall_backstop(30.0) == 300.0

    def test_a_busy_machine_does_not_fail_a_normal_comparison(self) -> None:
        """Each comparison needs at most 0.03 s of CPU time; under this load it takes about half
        a second to a few seconds of wall time. A 0.25 s wall-clock limit fails it; a CPU-time
        limit scores it."""
        if _math_client.cpu_seconds(os.getpid()) is None or not hasattr(os, "sched_setaffinity"):
            pytest.skip("needs /proc and sched_setaffinity (Linux)")
        # A warm worker: sympy imports what it needs for fractions and polynomials on first use.
        assert math_equivalent("\\frac{1}{2}", "0.5") == math_equivalent("x^2+2x+1", "(x+1)^2") == 1.0
        started = time.monotonic()
        try:
            with busy_cores() as cores:
                crowd_in([w.proc.pid for w in _math_client._idle], cores)
                assert math_equivalent("\\frac{\\sqrt{2}}{2}", "\\sqrt2/2", timeout_s=0.25) == 1.0
                assert math_equivalent("x^2+2x+2", "(x+1)^2", timeout_s=0.25) == 0.0
        finally:
            _math_client.shutdown()  # the slowed workers go; later tests start fresh ones
        assert time.monotonic() - started < 30.0

    def test_a_worker_that_hangs_without_cpu_is_killed_by_the_wall_clock(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        if _math_client.cpu_seconds(os.getpid()) is None:
            pytest.skip("no /proc on this system: the limit is wall time already")
        _math_client.shutdown()
        assert math_equivalent("2", "2.0") == 1.0  # now the only idle worker
        [worker] = _math_client._idle
        os.kill(worker.proc.pid, signal.SIGSTOP)  # it uses no CPU from now on
        monkeypatch.setattr(_math_client, "WALL_BACKSTOP_MIN_S", 1.0)
        monkeypatch.setattr(_math_client, "WALL_BACKSTOP_FACTOR", 1.0)
        started = time.monotonic()
        try:
            with pytest.raises(TimeoutError, match=re.escape("gave no answer within 1 s of wall time")):
                math_equivalent("1/2", "0.5", timeout_s=0.3)
            assert time.monotonic() - started < 5.0
            assert math_equivalent("1/2", "0.5") == 1.0  # a fresh worker replaces the killed one
        finally:
            _math_client.shutdown()
