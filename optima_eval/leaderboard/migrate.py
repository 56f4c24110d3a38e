"""Bring a board's stored cells to the current cell identity without computing any of them.

    python -m optima_eval.leaderboard.migrate benchmarks/results/leaderboard --data-root ../shared/data
    python -m optima_eval.leaderboard.migrate BOARD --refs benchmarks/results/training_repeats_isft_synth_hop.json

A cell is keyed by what its data and model are, not where they were (`cells.heldout_identity`,
`cells.model_identity`). A cell stored under an older identity gets its new key from its own
record: the model part from the file digests it recorded (its checkpoint may be gone), the data
part from the data files its task reads here (the folder it recorded, else the data folder
`--data-root`, as `$OPTIMA_DATA_DIR` was when it ran). Its file is renamed to the new key; its
summary and outcomes are kept byte for byte. The board's index and any `--refs` file then name
the new keys, every recorded path and command is written portably (`optima_eval.portable_paths`),
and the reports (markdown, plots) are rendered again from the migrated index and cells, as
`optima leaderboard --rescore` renders them, so a later rescore rewrites none of them. Only files
whose bytes change are written: a migrated board migrates to itself, and a second run writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from optima_envs.atomic_files import atomic_write_bytes, atomic_write_text
from optima_envs.errors import OptimaError
from optima_eval.leaderboard.cells import (
    ABLATION_FIELDS,
    IDENTITY_FIELDS,
    HeldOut,
    heldout_locations,
    cell_path,
    heldout_identity,
    identity_key,
    model_identity,
    recorded_env_kwargs,
)
from optima_eval.leaderboard.report import write_reports
from optima_eval.portable_paths import Roots, portable, portable_command, portable_text

__all__ = ["MigrationError", "MigrationReport", "migrate_board", "migrated_description", "rewrite_portably"]


class MigrationError(OptimaError):
    """A cell that cannot be given its new identity here (its data is missing, or two cells would
    become one): nothing of the board has been written."""


@dataclass
class MigrationReport:
    """What a migration did: every cell's old and new key, and the files it rewrote."""

    keys: dict[str, str] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)
    partial: list[Path] = field(default_factory=list)

    @property
    def changed(self) -> dict[str, str]:
        return {old: new for old, new in self.keys.items() if old != new}


def migrated_description(description: Mapping[str, Any], roots: Roots) -> dict[str, Any]:
    """A stored cell's description under the current identity, with its key; where its model and
    data were read from goes to `locations`, written portably."""
    model, locations = model_identity(description["model"]), dict(description.get("locations", {}))
    if "model" not in model and "model" not in locations:
        locations["model"] = portable(description["model"].get("path") or description["model"]["model"], roots)
    heldout = description["heldout"]
    if "data" not in heldout:
        data, where = _data_here(description, roots)
        heldout = heldout_identity(heldout, data)
        locations.update(where)
    out = {**description, "model": model, "heldout": heldout}
    out["key"] = identity_key({k: out[k] for k in IDENTITY_FIELDS if k in out})
    if "ablation" in out:
        out["ablates"] = identity_key({k: out[k] for k in IDENTITY_FIELDS if k in out and k not in ABLATION_FIELDS})
    if locations:
        out["locations"] = locations
    return out


def _data_here(description: Mapping[str, Any], roots: Roots) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The data identity of a stored cell's held-out set, from the files its task reads here, and
    where they are (`heldout_locations`)."""
    recorded = description["heldout"]
    try:
        heldout = HeldOut(recorded["env_id"], recorded_env_kwargs(description), recorded["count"], recorded["seed"],
                          recorded["first_index"])
        data = heldout.data[0]
        where = heldout_locations(heldout, roots)
    except OptimaError as error:
        raise MigrationError(f"cell {description['key']} ({recorded['env_id']}, {description['label']}): its data "
                             f"cannot be read here: {error}") from error
    if data is not None and "hub" in data and roots.data is None:
        raise MigrationError(f"cell {description['key']} ({recorded['env_id']}): with no data folder its data would "
                             "be keyed as the hub's; pass --data-root (or set OPTIMA_DATA_DIR) to the folder the "
                             "cell was computed with")
    return data, where


def migrate_board(root: str | Path, roots: Roots | None = None, *, refs: Sequence[str | Path] = ()) -> MigrationReport:
    """Migrate every finished cell under `root`, then its index, reports and the `refs` files
    (see the module doc). Every cell is planned before anything is written."""
    root, roots = Path(root), roots or Roots.here()
    report = MigrationReport(partial=sorted(root.glob("cells/**/*.partial.jsonl")))
    plans = [_plan_cell(root, path, roots) for path in sorted(root.glob("cells/**/*.json"))]
    _refuse_merges(plans)
    report.keys = {plan.old_key: plan.cell["key"] for plan in plans}
    moves: dict[str, str] = {}
    for plan in plans:
        derived = plan.cell.get("derived_from")
        if derived:  # the larger-k cell it was read off: same board, migrated with it
            plan.cell["derived_from"] = report.keys.get(derived, derived)
        moves[plan.path.relative_to(root).as_posix()] = plan.new_path.relative_to(root).as_posix()
        text = _with_description(plan.text, plan.cell, plan.path)
        if plan.new_path != plan.path or text != plan.text:
            atomic_write_text(plan.new_path, text)
            report.written.append(plan.new_path)
        if plan.new_path != plan.path:
            plan.path.unlink()
    descriptions = {plan.new_path.relative_to(root).as_posix(): plan.cell for plan in plans}
    written, commands = _migrate_index(root, moves, descriptions, report.keys, roots)
    report.written += written + _regenerate_reports(root)
    replacements = {**_quoted(commands), **report.changed}
    report.written += [Path(p) for p in refs if rewrite_portably(Path(p), replacements, roots)]
    report.written = list(dict.fromkeys(report.written))
    return report


@dataclass(frozen=True)
class _Plan:
    """One stored cell: its file and text, its key there, and its description and file after the migration."""

    path: Path
    text: str
    old_key: str
    cell: dict[str, Any]
    new_path: Path


def _plan_cell(root: Path, path: Path, roots: Roots) -> _Plan:
    text = path.read_text(encoding="utf-8")
    old = json.loads(text)["cell"]
    cell = migrated_description(old, roots)
    new_path = cell_path(root, cell["heldout"]["env_id"], cell["system"], cell["label"], cell["key"],
                         cell.get("ablation"))
    return _Plan(path, text, old["key"], cell, new_path)


_HEAD = '{\n  "cell": '


def _with_description(text: str, cell: Mapping[str, Any], path: Path) -> str:
    """A stored cell's text with its description replaced and every other byte (its summary and
    outcomes) kept as it was."""
    if not text.startswith(_HEAD):
        raise MigrationError(f"{path} does not start with its description, as cell files do; not migrated")
    _, end = json.JSONDecoder().raw_decode(text, len(_HEAD))
    return _HEAD + json.dumps(cell, indent=2, default=str).replace("\n", "\n  ") + text[end:]


def _refuse_merges(plans: Sequence[_Plan]) -> None:
    """Refuse two cells that become one, or a cell moved onto another's file."""
    seen: dict[Path, Path] = {}
    stored = {plan.path for plan in plans}
    for plan in plans:
        if plan.new_path in seen:
            raise MigrationError(f"{seen[plan.new_path]} and {plan.path} are one cell under the current identity "
                                 f"({plan.new_path.name}); keep one of them and migrate again")
        if plan.new_path != plan.path and plan.new_path in stored:
            raise MigrationError(f"{plan.path} would replace {plan.new_path}, another stored cell")
        seen[plan.new_path] = plan.path


def _write_json(path: Path, data: Any) -> bool:
    """Write `data` to `path` unless the file already holds exactly that."""
    text = json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
    if path.read_text(encoding="utf-8") == text:
        return False
    atomic_write_text(path, text)
    return True


def _migrate_index(root: Path, moves: Mapping[str, str], descriptions: Mapping[str, Mapping[str, Any]],
                   keys: Mapping[str, str], roots: Roots) -> tuple[list[Path], dict[str, str]]:
    """`leaderboard.json` with every entry naming its cell's new file, key and held-out set and
    its command written portably; returns what it wrote and each changed command's new form."""
    path = root / "leaderboard.json"
    if not path.is_file():
        return [], {}
    index = json.loads(path.read_text(encoding="utf-8"))
    commands: dict[str, str] = {}
    for entry in index.get("cells", []):
        entry["cell"] = moves.get(entry["cell"], entry["cell"])
        cell = descriptions.get(entry["cell"])
        if cell is not None:
            entry.update(key=cell["key"], heldout=cell["heldout"])
        if "ablates" in entry:
            entry["ablates"] = keys.get(entry["ablates"], entry["ablates"])
        if entry.get("command"):
            commands[entry["command"]] = portable_command(entry["command"], roots)
            entry["command"] = commands[entry["command"]]
    return ([path] if _write_json(path, index) else []), {old: new for old, new in commands.items() if old != new}


def _regenerate_reports(root: Path) -> list[Path]:
    """Render the board's reports from its migrated index and cells, as `--rescore` renders them,
    in a scratch folder, and copy over only the files whose bytes differ; returns those."""
    if not (root / "leaderboard.json").is_file():
        return []
    changed = []
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copyfile(root / "leaderboard.json", Path(scratch) / "leaderboard.json")
        (Path(scratch) / "cells").symlink_to((root / "cells").resolve(), target_is_directory=True)
        for made in write_reports([], scratch, every_task=True):
            target, data = root / made.name, made.read_bytes()
            if not target.is_file() or target.read_bytes() != data:
                atomic_write_bytes(target, data)
                changed.append(target)
    return changed


def _quoted(commands: Mapping[str, str]) -> dict[str, str]:
    """Each command as a report quotes it (in backquotes) and as a JSON file holds it."""
    return {**{f"`{old}`": f"`{new}`" for old, new in commands.items()},
            **{json.dumps(old): json.dumps(new) for old, new in commands.items()}}


def rewrite_portably(path: Path, replacements: Mapping[str, str], roots: Roots) -> bool:
    """Rewrite a text result in place: each of `replacements` (e.g. a board's recorded commands
    and old keys) by its new text, then every absolute path written portably; False when the
    file already reads so (nothing is written)."""
    text = path.read_text(encoding="utf-8")
    new = text
    for old in sorted(replacements, key=len, reverse=True):
        new = new.replace(old, replacements[old])
    new = portable_text(new, roots)
    if new == text:
        return False
    atomic_write_text(path, new)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("boards", nargs="+", type=Path, help="Board folders (each holding cells/ and leaderboard.json).")
    parser.add_argument("--data-root", default=None,
                        help="The data folder the cells ran with ($OPTIMA_DATA_DIR then; default: its value now).")
    parser.add_argument("--refs", nargs="*", default=[], type=Path,
                        help="Other result files that name the boards' cells by key (e.g. training_repeats results).")
    args = parser.parse_args(argv)
    roots = Roots.here(args.data_root)
    if roots.data is not None:
        os.environ["OPTIMA_DATA_DIR"] = str(roots.data)  # the tasks find their data as they did then
    try:
        for board in args.boards:
            report = migrate_board(board, roots, refs=args.refs)
            print(f"{board}: {len(report.keys)} cells, {len(report.changed)} with a new key, "
                  f"{len(report.written)} files written")
            for path in report.partial:
                print(f"  not migrated (an unfinished cell keeps its old key; it resumes only under it): {path}")
    except OptimaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
