"""How every `optima` command reports a failure: one red `error:` line on stderr, no traceback
(the errors Optima raises on purpose already say what to do), and one exit-code policy.

Exit codes, the same in every command:

- 0: done.
- 2: refused, the input was wrong: an option, a config, a name, a file (errors that are a
  `ValueError` or `LookupError`: `ConfigError`, `DataError`, `UnknownEnvError`,
  `ModelNotFoundError`, a corrupt buffer, a config check). Click's own usage errors exit 2 too.
- 1: failed, the work started and a step did not succeed: a server did not start, a replica
  pool died, a model could not be fetched, nothing could be scored.

The error's type decides, not the command or the step that raised it, so a script can tell
"fix the call" from "try again" the same way for every command.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from optima_envs.errors import OptimaError

__all__ = ["FAILED", "REFUSED", "exit_code", "fail", "print_error", "reported"]

REFUSED = 2
FAILED = 1


def exit_code(error: BaseException) -> int:
    """`REFUSED` for an error that says the input was wrong, `FAILED` for any other."""
    return REFUSED if isinstance(error, (ValueError, LookupError)) else FAILED


def print_error(message: str) -> None:
    """`error: message` in red on stderr; the message is printed as given (no markup read in it)."""
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}", highlight=False)


def fail(error: BaseException | str, code: int | None = None) -> NoReturn:
    """Print `error` and exit: with `code`, else by the error's type; a message alone is a refusal."""
    print_error(str(error))
    if code is None:
        code = exit_code(error) if isinstance(error, BaseException) else REFUSED
    raise typer.Exit(code=code)


@contextlib.contextmanager
def reported(*errors: type[BaseException]) -> Iterator[None]:
    """Inside the block, an `OptimaError` or `ValueError` (or the given types) ends the command
    through `fail`; any other exception is a bug and keeps its traceback."""
    try:
        yield
    except (errors or (OptimaError, ValueError)) as error:
        fail(error)
