"""Answer pairs for `math_equivalent`, and a busy machine on demand to score them under.

Optima's math tests and its reliability benchmark's scoring probe both use these, so both try the
same pairs under the same load; a scorer of your own can be checked on them too. `busy_cores` and
`crowd_in` pin processes to cores, so they run on Linux only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = ["EQUIVALENT", "NON_ANSWERS", "NOT_EQUIVALENT", "busy_cores", "crowd_in"]

#: (prediction, gold) pairs math-verify finds equivalent.
EQUIVALENT = [
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
]

#: (prediction, gold) pairs it finds different.
NOT_EQUIVALENT = [("\\frac{1}{3}", "0.5"), ("B", "A"), ("x^2", "x^3"), ("3.0001", "3"), ("", "3")]

#: Predictions that cannot be a number or an expression: nothing left once whitespace, control
#: characters and lone surrogates are dropped, or no digit, letter, LaTeX command or value symbol.
NON_ANSWERS = ["", "  \n", "\ud800", "\udc80 \x00", "\u200b", "?", "...", "—", "%", "∞", "()", "$"]

#: How far `crowd_in` lowers a process's priority: among the burners it gets a twentieth of a core.
CROWDED_NICE = 10


@contextmanager
def busy_cores(per_core: int = 2) -> Iterator[set[int]]:
    """`per_core` CPU-burning processes on each of (at most) two cores; yields those cores.
    Linux only (`os.sched_setaffinity`)."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(per_core * len(cores))]
    try:
        for k, burner in enumerate(burners):
            os.sched_setaffinity(burner.pid, {cores[k % len(cores)]})
        time.sleep(0.5)  # the burners are past start-up and spinning
        yield set(cores)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def crowd_in(pids: Iterable[int], cores: set[int]) -> None:
    """Move processes onto the burners' `cores` at a lower priority: a machine far busier than
    two cores alone would make, the same on any machine."""
    for pid in pids:
        os.sched_setaffinity(pid, cores)
        os.setpriority(os.PRIO_PROCESS, pid, CROWDED_NICE)
