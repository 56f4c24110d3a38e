"""Child process behind `math_equivalent`: runs math-verify where a hang can be killed.

math-verify enforces its own timeouts with `signal.alarm`, which only works in the main thread
(it raises ValueError elsewhere), has whole-second resolution, cannot interrupt C-level work
such as a huge integer power, and turns a timeout into a silent `False`. So we disable its
timeouts and run it here instead; the parent kills this process when a request overruns
(by its CPU time, see `_math_client`).

Protocol (one JSON object per line): the worker first writes `{"ready": true}`; then for each
request `{"prediction": str, "gold": str}` it answers `{"equal": bool}` or
`{"error": str, "side": "gold"|"prediction"}` when a side does not parse. An unexpected
exception is reported as `{"crash": str}` by the exception hook, and the process exits.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import traceback
from types import TracebackType
from typing import IO, Any

MEMORY_LIMIT_BYTES = 4 * 1024**3  # a runaway expression fails with MemoryError, not OOM-kill


def _send(out: IO[bytes], message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


# "5,\!525" and "5{,}525" are LaTeX thousands separators (MATH writes them); math-verify
# would read the comma as a tuple separator.
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:,\\!|\{,\})(?=\d)")


def _limit_memory() -> None:
    try:
        import resource
    except ImportError:  # not POSIX: run without the limit
        return
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = MEMORY_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(hard, MEMORY_LIMIT_BYTES)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _serve(out: IO[bytes]) -> None:
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout is disabled" warning
    from sympy import Basic, MatrixBase

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    config = (LatexExtractionConfig(), ExprExtractionConfig())

    def parsed(answer: str) -> list[Any] | None:
        answer = _LATEX_THOUSANDS.sub("", answer)
        # Wrapping the bare answer in \boxed{} makes math-verify read it as one LaTeX answer.
        result = parse("\\boxed{" + answer + "}", extraction_config=config, parsing_timeout=None)
        return result if any(isinstance(r, (Basic, MatrixBase)) for r in result) else None

    _send(out, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        gold = parsed(request["gold"])
        if gold is None:
            _send(out, {"error": "math-verify could not parse it", "side": "gold"})
            continue
        prediction = parsed(request["prediction"])
        if prediction is None:
            _send(out, {"error": "math-verify could not parse it", "side": "prediction"})
            continue
        # verify is not symmetric: the gold comes first (it decides how `x=3` vs `3` is read).
        equal = verify(gold, prediction, timeout_seconds=None, raise_on_error=False)
        _send(out, {"equal": bool(equal)})


def main() -> None:
    """Serve requests on stdin until it closes; the protocol uses a private copy of stdout."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints from libraries go to stderr, never into the protocol

    def report(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        text = "".join(traceback.format_exception_only(kind, error)).strip()
        _send(out, {"crash": text})

    # A process boundary: whatever escapes is reported to the parent, which then restarts us.
    sys.excepthook = report
    _limit_memory()
    _serve(out)


if __name__ == "__main__":
    main()
