"""The published results name no folder of the machine that made them: a reader can run their
commands again and see where the data came from (`$OPTIMA_DATA_DIR/...`, repository-relative
paths). A result that fails here is fixed by `python benchmarks/portable_results.py`."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: Absolute folders a result made on a workstation, server or container would name.
MACHINE_PATH = re.compile(r"/(work|tmp|root|home)/")

#: The result files that are text (plots are PNGs).
TEXT_SUFFIXES = (".json", ".jsonl", ".md", ".txt", ".csv")


def machine_paths(folder: Path) -> list[str]:
    """`file:line: text` for every line of a text file under `folder` naming a machine's folder."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES):
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:160]}")
    return found


def test_no_result_names_a_folder_of_the_machine_that_made_it():
    found = machine_paths(RESULTS)
    assert not found, ("results name absolute folders (rewrite them with `python benchmarks/portable_results.py "
                       "--data-root DATA`):\n" + "\n".join(found))


def test_the_scan_names_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "a.md").write_text("ok: $OPTIMA_DATA_DIR/gsm8k\nbad: /home/me/data/gsm8k\n")
    (tmp_path / "r" / "plot.png").write_bytes(b"/home/me/ in a binary")
    assert machine_paths(tmp_path / "r") == ["r/a.md:2: bad: /home/me/data/gsm8k"]
