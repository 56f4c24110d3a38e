"""Parent side of `math_equivalent`: a small pool of worker processes with a hard deadline.

Why processes: math-verify's own timeouts use `signal.alarm`, which fails outside the main
thread and cannot stop C-level work (see `_math_worker`). A worker that overruns is killed,
so the deadline holds from any thread, and the caller gets a `TimeoutError` instead of the
silent `False` math-verify would return. Idle workers are reused (start-up, mostly importing
sympy, takes about half a second) and closed at exit. POSIX only (`select` on pipes).
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

START_TIMEOUT_S = 60.0
MAX_IDLE_WORKERS = max(1, os.cpu_count() or 1)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding optima_envs/


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
            ready = self.read(START_TIMEOUT_S)
        except TimeoutError:
            ready = {"crash": f"no ready message within {START_TIMEOUT_S:g} s"}
        if ready is None or "ready" not in ready:
            self.kill()
            raise ScoringError(f"math_equivalent: the math-verify worker failed to start: {ready}")

    def read(self, timeout_s: float) -> dict[str, Any] | None:
        """The next message, or None on end of file. Raises TimeoutError past `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                raise TimeoutError(f"no answer within {timeout_s:g} s")
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def ask(self, request: dict[str, str], timeout_s: float) -> dict[str, Any] | None:
        try:
            self._stdin.write(json.dumps(request).encode() + b"\n")
            self._stdin.flush()
        except BrokenPipeError:
            return None
        return self.read(timeout_s)

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
    except TimeoutError:
        worker.kill()
        raise TimeoutError(f"math_equivalent: math-verify took longer than {timeout_s:g} s "
                           f"(timeout_s) comparing prediction {prediction[:80]!r} "
                           f"with gold {gold[:80]!r}; the worker was killed.") from None
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
