"""Write benchmark results under benchmarks/results/ (JSON with the machine they ran on, and
markdown reports), naming no folder of that machine: every path and command in them is written
portably (`$OPTIMA_DATA_DIR/...`, repository-relative, `~/...`; `optima_eval.portable_paths`),
so a reader can run the command again and see where the data came from."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Sequence

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """What a result ran on; `cpu_kind` says which bf16 path the CPU has, since every CPU figure
    depends on it."""
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpu_kind": cpu_kind()}


def cpu_kind() -> str:
    """AMX, AVX512-BF16 or AVX2: which bf16 path this CPU has (Linux /proc/cpuinfo)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX512-BF16"
    return "AVX2" if "avx2" in flags else "no AVX2"


def write_result(name: str, payload: dict[str, Any], *, folder: Path | None = None) -> Path:
    """Write `<name>.json` under `folder` (None: RESULTS; e.g. a scratch folder for a smoke run):
    the payload, when and on what it ran, paths portable."""
    from optima_envs.atomic_files import atomic_write_json
    from optima_eval.portable_paths import portable_json

    folder = RESULTS if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        **payload,
    }
    path = folder / f"{name}.json"
    atomic_write_json(path, portable_json(record))
    return path


def write_report(path: Path, text: str) -> Path:
    """Write a markdown result with its paths portable (see the module doc)."""
    from optima_eval.portable_paths import portable_text

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(portable_text(text))
    return path


def markdown_table(header: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table's lines: `header`, the rule, one line per row (cells written with str)."""
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"  # noqa: E731
    return [line(header), "|" + "---|" * len(header), *(line(r) for r in rows)]


def publish_table(out: str, title: str, intro: str, header: Sequence[Any], rows: Sequence[Sequence[Any]],
                  payload: dict[str, Any]) -> str:
    """Write `<out>.md` (a `# title`, `intro`, the table) and `<out>.json` (`payload`) under RESULTS
    and print the markdown; returns it."""
    text = "\n".join([f"# {title}", "", intro, "", *markdown_table(header, rows)]) + "\n"
    write_report(RESULTS / f"{out}.md", text)
    write_result(out, payload)
    print(text)
    return text


def invocation(script: str, argv: Sequence[str] | None = None) -> str:
    """The command that ran `benchmarks/<script>` with `argv` (default: this process's), as a
    result records it: runnable again from the repository root of another machine."""
    from optima_eval.portable_paths import command_line

    return command_line(["python", f"benchmarks/{script}", *(sys.argv[1:] if argv is None else argv)])


def read_heldout_cell(path: Path, env_id: str | None = None) -> tuple[Any, Any, tuple[str, ...], list[Any]]:
    """(cell, task, agent names, questions) of a board cell and the held-out set it answered, for
    scripts that re-read a cell's dialogues; exits saying why when the cell is of another env or its
    held-out set cannot be rebuilt here."""
    from optima_eval.leaderboard.cells import read_cell
    from optima_eval.leaderboard.diagnostics import heldout_setup

    cell = read_cell(Path(path))
    found = cell.description["heldout"]["env_id"]
    if env_id is not None and found != env_id:
        raise SystemExit(f"{path} is a cell of {found!r}; this script reads {env_id}")
    setup = heldout_setup(cell.description["heldout"], cell.description.get("locations"))
    if setup is None:
        raise SystemExit(f"the held-out set of {path} cannot be rebuilt here")
    task, agents, questions = setup
    return cell, task, agents, questions
