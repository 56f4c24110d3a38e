"""Rewrite the published results so they name no folder of the machine that made them.

    python benchmarks/portable_results.py --data-root ../shared/data

Every board folder under `benchmarks/results/` (one holding `cells/` and `leaderboard.json`) is
migrated to the current cell identity (`optima_eval.leaderboard.migrate`: cells keyed by what
their data and model are, not where; the index and the other result files that name its cells
follow the new keys; its reports rendered again). Then every other text result (json, jsonl, md,
txt, csv) has its absolute paths written portably: `$OPTIMA_DATA_DIR/...` under the data folder,
a pulled model by its name, repository-relative inside this checkout, `~/...` under the home
folder (`optima_eval.portable_paths`). PNGs are left as they are.

`--data-root` is the data folder the results were made with (`$OPTIMA_DATA_DIR` then; default:
its value now). A second run writes nothing. A path outside all of those folders stays as it
is; `tests/test_results_portable.py` names any that remain.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS  # noqa: E402

#: The result files that are text (PNGs and other binaries are left alone).
TEXT_SUFFIXES = (".json", ".jsonl", ".md", ".txt", ".csv")


def boards(results: Path) -> list[Path]:
    """The leaderboard folders under `results`."""
    return sorted(p.parent for p in results.glob("**/leaderboard.json") if (p.parent / "cells").is_dir())


def other_text_files(results: Path, board_folders: Sequence[Path]) -> list[Path]:
    """The text results outside the boards (a board's files are the migration's)."""
    return sorted(p for p in results.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES
                  and not any(p.is_relative_to(b) for b in board_folders))


def make_portable(results: Path, data_root: str | None) -> list[Path]:
    """Migrate the boards under `results`, then write every other text result's paths portably;
    returns the files written."""
    from optima_eval.leaderboard.migrate import migrate_board, rewrite_portably
    from optima_eval.portable_paths import Roots

    roots = Roots.here(data_root)
    if roots.data is not None:
        os.environ["OPTIMA_DATA_DIR"] = str(roots.data)  # the tasks find their data as they did then
    found = boards(results)
    others = other_text_files(results, found)
    written: list[Path] = []
    for board in found:
        written += migrate_board(board, roots, refs=others).written
    written += [p for p in others if rewrite_portably(p, {}, roots)]
    return list(dict.fromkeys(written))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default=None,
                        help="The data folder the results were made with ($OPTIMA_DATA_DIR then; default: its value now).")
    parser.add_argument("--results", type=Path, default=RESULTS, help="The results folder (default: %(default)s).")
    args = parser.parse_args(argv)
    from optima_envs.errors import OptimaError

    try:
        written = make_portable(args.results, args.data_root)
    except OptimaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(args.results) if path.is_relative_to(args.results) else path}")
    print(f"{len(written)} files written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
