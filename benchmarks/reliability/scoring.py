"""Probe (e): math scoring on a busy machine (Linux: it pins processes to cores).

Two CPU-burning processes run on each of two cores, and the math-verify workers are crowded onto
those cores at a lower priority (`optima_envs.test.math_cases`), so a comparison that needs a
few hundredths of a second of CPU takes seconds on the clock. Each answer pair is scored with a
1 s limit, a fifth of the default, which counts the worker's CPU time: it holds when the pair
gets its score (1.0 for an equivalent pair, 0.0 for a different one); a TimeoutError or any
other error fails. A prediction that cannot be math (a lone surrogate, punctuation, nothing)
holds when it scores 0.0 without a request to math-verify. A comparison that needs seconds of
CPU (expanding `(x+y)^{60}`) must still be stopped: it holds on a TimeoutError saying that the
CPU time ran out.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from benchmarks.reliability.tally import Tally

LIMIT_S = 1.0
SLOW_PAIR = ("(x+y)^{60}+1", "(x+y+1)^{60}")
SLOW_LIMIT_S = 0.3


def _timed(score: Callable[[], float]) -> tuple[float | str, float, float | None]:
    """(the score, or the error it raised; wall seconds; the worker's CPU seconds, when known)."""
    from optima_envs.scoring import _math_client

    pid = _math_client._idle[-1].proc.pid if _math_client._idle else None  # the worker it will use
    cpu = _math_client.cpu_seconds(pid) if pid is not None else None
    start = time.monotonic()
    try:
        got: float | str = score()
    except Exception as error:  # the probe's point: every error is judged by the caller
        got = f"{type(error).__name__}: {error}"
    wall = time.monotonic() - start
    after = _math_client.cpu_seconds(pid) if pid is not None else None
    return got, wall, None if cpu is None or after is None else after - cpu


def _pairs_row(pairs: list[tuple[str, str, float]], cores: set[int]) -> Tally:
    from optima_envs.scoring import _math_client, math_equivalent
    from optima_envs.test.math_cases import crowd_in

    row = Tally("e", f"answer pairs scored, {LIMIT_S:g} s of CPU each")
    walls, cpus = [], []
    for prediction, gold, expected in pairs:
        crowd_in([w.proc.pid for w in _math_client._idle], cores)
        got, wall, cpu = _timed(lambda: math_equivalent(prediction, gold, timeout_s=LIMIT_S))
        walls.append(wall)
        cpus += [cpu] if cpu is not None else []
        row.check(got == expected, f"{prediction!r} vs {gold!r}: expected {expected}, got {got} after {wall:.1f} s")
    row.notes.update(median_wall_s=round(statistics.median(walls), 2), max_wall_s=round(max(walls), 2),
                     max_cpu_s=round(max(cpus), 2) if cpus else None)
    return row


def _non_answers_row() -> Tally:
    from optima_envs.scoring import _math_client, math_equivalent
    from optima_envs.test.math_cases import NON_ANSWERS

    row = Tally("e", "non-answers decided without math-verify")
    asked: list[Any] = []
    original = _math_client.equivalent
    _math_client.equivalent = lambda *args: asked.append(args) or original(*args)
    try:
        for prediction in NON_ANSWERS:
            got, wall, _ = _timed(lambda: math_equivalent(prediction, "3", timeout_s=LIMIT_S))
            row.check(got == 0.0 and not asked, f"{prediction!r}: got {got} after {wall:.1f} s, "
                                                f"{len(asked)} request(s) to math-verify")
            asked.clear()
    finally:
        _math_client.equivalent = original
    return row


def _slow_row(cores: set[int]) -> Tally:
    from optima_envs.scoring import _math_client, math_equivalent
    from optima_envs.test.math_cases import crowd_in

    row = Tally("e", f"a slow comparison is still stopped at {SLOW_LIMIT_S:g} s of CPU")
    crowd_in([w.proc.pid for w in _math_client._idle], cores)
    got, wall, _ = _timed(lambda: math_equivalent(*SLOW_PAIR, timeout_s=SLOW_LIMIT_S))
    stopped = isinstance(got, str) and got.startswith("TimeoutError") and "of CPU time" in got
    row.check(stopped, f"{SLOW_PAIR}: got {got} after {wall:.1f} s")
    row.notes["wall_s"] = round(wall, 2)
    return row


def run(pairs: int) -> list[Tally]:
    """`pairs` answer pairs (all of them, or that many spread over the equivalent and the
    different ones), the non-answers, and the slow comparison, all under load."""
    from optima_envs.scoring import _math_client, math_equivalent
    from optima_envs.test.math_cases import EQUIVALENT, NOT_EQUIVALENT, busy_cores

    cases = [(p, g, 1.0) for p, g in EQUIVALENT] + [(p, g, 0.0) for p, g in NOT_EQUIVALENT]
    picked = cases if pairs >= len(cases) else [cases[k * len(cases) // pairs] for k in range(pairs)]
    # A warm worker: sympy imports what it needs for fractions and polynomials on first use.
    math_equivalent("\\frac{1}{2}", "0.5")
    math_equivalent("x^2+2x+1", "(x+1)^2")
    try:
        with busy_cores() as cores:
            return [_pairs_row(picked, cores), _non_answers_row(), _slow_row(cores)]
    finally:
        _math_client.shutdown()  # the crowded workers go; later scoring starts fresh ones
