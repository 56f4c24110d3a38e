"""Parent side of `math_equivalent`: a small pool of worker processes with a hard deadline.

Why processes: math-verify's own timeouts use `signal.alarm`, which fails outside the main
thread and cannot stop C-level work (see `_math_worker`). A worker that overruns is killed,
so the deadline holds from any thread, and the caller gets a `TimeoutError` instead of the
silent `False` math-verify would return. Idle workers are reused (start-up, mostly importing
sympy, takes about half a second) and closed at exit. POSIX only (`select` on pipes).

The deadline counts the worker's own CPU time (read from `/proc/<pid>/stat` while waiting), not
the clock: a busy machine only slows a comparison down, and must not turn a right answer into
a scoring failure. A worker that hangs without using CPU is still killed by a generous
wall-clock backstop (`wall_backstop`). Where `/proc` is missing (e.g. macOS) the limit is wall
time, as the only clock there is.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from optima_envs.errors import ScoringError

START_TIMEOUT_S = 60.0  # CPU seconds a worker may take to start (import sympy, math-verify)
MAX_IDLE_WORKERS = max(1, os.cpu_count() or 1)
POLL_S = 0.05  # how often a waiting parent reads the worker's CPU time
WALL_BACKSTOP_FACTOR = 10.0
WALL_BACKSTOP_MIN_S = 60.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding optima_envs/


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time that process `pid` has used, or None where it cannot be read
    (no `/proc`, or no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after "pid (name)"; the name may hold spaces
    try:
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    except (IndexError, ValueError):
        return None


def wall_backstop(cpu_s: float) -> float:
    """Wall seconds after which a worker allowed `cpu_s` of CPU time is killed anyway."""
    return max(WALL_BACKSTOP_MIN_S, WALL_BACKSTOP_FACTOR * cpu_s)


def overrun(cpu_used: float | None, wall_used: float, cpu_s: float) -> str | None:
    """Why a worker has had too long on a message, or None while it has not: more than `cpu_s`
    of its CPU time, or more than `wall_backstop(cpu_s)` on the clock; where its CPU time is
    unknown (`cpu_used` None), more than `cpu_s` on the clock."""
    if cpu_used is None:
        return f"took longer than {cpu_s:g} s" if wall_used > cpu_s else None
    if cpu_used > cpu_s:
        return f"used more than {cpu_s:g} s of CPU time"
    backstop = wall_backstop(cpu_s)
    if wall_used > backstop:
        return f"gave no answer within {backstop:g} s of wall time, though it used less than {cpu_s:g} s of CPU time"
    return None


class _Worker:
    """One `python -m optima_envs.scoring._math_worker` process and its line protocol."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "optima_envs.scoring._math_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        if self.proc.stdin is None or self.proc.stdout is None:  # cannot happen with PIPE
            raise ScoringError("math_equivalent: the worker process has no pipes.")
        self._stdin: IO[bytes] = self.proc.stdin
        self._fd = self.proc.stdout.fileno()
        self._buffer = b""
        try:
            ready = self.read(START_TIMEOUT_S, (0.0, time.monotonic()))
        except TimeoutError as error:
            ready = {"crash": f"no ready message: it {error}"}
        if ready is None or "ready" not in ready:
            self.kill()
            raise ScoringError(f"math_equivalent: the math-verify worker failed to start: {ready}")

    def clock(self) -> tuple[float | None, float]:
        """(the worker's CPU time, the monotonic clock) now: where a request's time starts."""
        return cpu_seconds(self.proc.pid), time.monotonic()

    def read(self, cpu_s: float, started: tuple[float | None, float]) -> dict[str, Any] | None:
        """The next message, or None on end of file. Raises TimeoutError, saying why, once the
        worker has had too long on it since `started` (see `overrun`)."""
        while b"\n" not in self._buffer:
            if not select.select([self._fd], [], [], POLL_S)[0]:
                cpu_now, wall_now = self.clock()
                used = None if cpu_now is None or started[0] is None else cpu_now - started[0]
                why = overrun(used, wall_now - started[1], cpu_s)
                if why is not None:
                    raise TimeoutError(why)
                continue
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def ask(self, request: dict[str, str], timeout_s: float) -> dict[str, Any] | None:
        """The worker's answer to `request`, allowed `timeout_s` of its CPU time (see `read`)."""
        started = self.clock()
        try:
            self._stdin.write(json.dumps(request).encode() + b"\n")
            self._stdin.flush()
        except BrokenPipeError:
            return None
        return self.read(timeout_s, started)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


_idle: list[_Worker] = []
_lock = threading.Lock()


def _acquire() -> _Worker:
    with _lock:
        while _idle:
            worker = _idle.pop()
            if worker.proc.poll() is None:
                return worker
            worker.kill()
    return _Worker()


def _release(worker: _Worker) -> None:
    with _lock:
        if len(_idle) < MAX_IDLE_WORKERS:
            _idle.append(worker)
            return
    worker.kill()


def _forget_parent_workers() -> None:
    """In a forked child the idle workers belong to the parent: never talk to them."""
    global _lock
    _lock = threading.Lock()
    _idle.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_workers)


@atexit.register
def shutdown() -> None:
    """Stop every idle worker (also runs at interpreter exit)."""
    with _lock:
        workers, _idle[:] = list(_idle), []
    for worker in workers:
        worker.kill()


def check_dependency() -> None:
    """Fail loudly (not as a per-sample ScoringError) when math-verify is not installed."""
    for module in ("math_verify", "latex2sympy2_extended", "antlr4"):
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(
                f"math_equivalent needs the math-verify package with its LaTeX parser; "
                f"`{module}` is missing. Install it with: pip install 'math-verify[antlr4_13_2]'"
            )


def equivalent(prediction: str, gold: str, timeout_s: float) -> bool:
    """Ask a worker whether `prediction` equals `gold`; see `metrics.math_equivalent`."""
    check_dependency()
    worker = _acquire()
    try:
        reply = worker.ask({"prediction": prediction, "gold": gold}, timeout_s)
    except TimeoutError as error:
        worker.kill()
        raise TimeoutError(f"math_equivalent: math-verify {error} (timeout_s={timeout_s:g}) comparing "
                           f"prediction {prediction[:80]!r} with gold {gold[:80]!r}; the worker was "
                           f"killed.") from None
    if reply is None or "crash" in reply:
        worker.kill()
        detail = reply["crash"] if reply else f"exit code {worker.proc.returncode}"
        raise ScoringError(f"math_equivalent: the math-verify worker failed on prediction "
                           f"{prediction[:80]!r}, gold {gold[:80]!r}: {detail}")
    _release(worker)
    if "error" in reply and reply["side"] == "prediction":
        # An answer the model wrote that is not math is a wrong answer, like a badly formatted
        # number in numeric_match; only a gold we cannot read is a scoring failure.
        return False
    if "error" in reply:
        value = gold
        raise ScoringError(f"math_equivalent: could not parse the {reply['side']} answer "
                           f"{value[:80]!r} as math ({reply['error']}).")
    return bool(reply["equal"])
