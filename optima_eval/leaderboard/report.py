"""Leaderboard reports from finished cells: a markdown table per task, one across tasks, a JSON
index, and a PNG per task of score against tokens per question (95% intervals on both axes,
the Pareto front, one curve per system whose k varies: inference-time scaling, and each model's
no-talk ceiling).

On tasks whose agents hold private information a task's table also says whether a score came
from talking (`optima_eval.leaderboard.diagnostics`): `no-talk`, the same model's `solo` score;
`comm gain`, the score lost when the partners' messages are swapped for another question's or
removed (from the row's ablation cells, which are not rows of their own); `partner-only`, the
score on the questions whose answer only the partner holds; `told`, on those questions, how often
the partner said what was needed, and the score when it did."""

from __future__ import annotations

import json
import math
import posixpath
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from optima_envs.atomic_files import atomic_write_json, atomic_write_text
from optima_eval.evaluation import Interval
from optima_eval.leaderboard.cells import CellResult, read_cell
from optima_eval.leaderboard.diagnostics import comm_gain, heldout_places, heldout_told, place_scores

__all__ = ["Row", "pareto_front", "rows_of", "write_reports"]


class Row:
    """One cell as a board row."""

    def __init__(self, result: CellResult):
        d = result.description
        self.result = result
        self.task = d["heldout"]["env_id"]
        self.system = d["system_spec"]
        self.system_name = d["system"]
        self.k = d["settings"].get("k")
        self.model = d["label"]
        # The backend and the precision the weights ran in (a torch dtype, or llama.cpp's GGUF
        # weight type): the same model on another backend or in another precision is another
        # measurement, so it is another row. A cell made by another stack names no backend.
        self.backend = d["model"].get("backend", "external")
        self.dtype = d["model"]["dtype"]
        self.score = result.score
        self.tokens = result.tokens
        self.summary = result.summary
        # Questions with a final answer at all: a small model's low score is often no answer in
        # the task's format rather than a wrong one.
        self.answered = sum(1 for o in result.outcomes if o.answer not in (None, ""))
        self.ablation = d.get("ablation")  # an ablation cell is shown in the row of the cell it ablates
        self.key = d["key"]
        self.diagnostics: Diagnostics | None = None

    @property
    def family(self) -> str:
        """The system without its k, so the ks of one system form one scaling curve."""
        parts = [p for p in self.system.split(":") if not p.startswith("k=")]
        return ":".join(parts) + f" / {self.model} ({self.backend} {self.dtype})"


class Diagnostics:
    """A row's communication diagnostics (any part may be missing: None)."""

    def __init__(self, no_talk: Interval | None, gains: dict[str, Interval], partner_only: Interval | None,
                 told: dict[str, Interval] | None = None, any_donor: bool = False):
        self.no_talk, self.gains, self.partner_only, self.told = no_talk, gains, partner_only, told
        # The swap took any other question's messages on a task whose swaps now keep to a swap
        # group (a cell measured before the task had one): shown, but marked as the other measurement.
        self.any_donor = any_donor

    def to_dict(self) -> dict:
        return {"no_talk": None if self.no_talk is None else self.no_talk.__dict__,
                "comm_gain": {mode: g.__dict__ for mode, g in self.gains.items()},
                "partner_only": None if self.partner_only is None else self.partner_only.__dict__,
                "told": None if self.told is None else {k: i.__dict__ for k, i in self.told.items()},
                **({"swap_any_donor": True} if self.any_donor else {})}


def rows_of(results: Sequence[CellResult]) -> list[Row]:
    return [Row(r) for r in results]


def attach_diagnostics(rows: Sequence[Row]) -> list[Row]:
    """The board rows of one task (ablation cells folded into the rows they ablate), each with
    its diagnostics when the task has any: a `solo` row, an ablation, or answer places."""
    ablations: dict[str, dict[str, Row]] = defaultdict(dict)
    for r in rows:
        if r.ablation is not None:
            ablations[r.result.description["ablates"]][r.ablation] = r
    shown = [r for r in rows if r.ablation is None]
    no_talk = {(r.model, r.backend, r.dtype): r.score for r in shown if r.system_name == "solo"}
    first = shown[0].result.description if shown else None
    places = heldout_places(first["heldout"], first.get("locations")) if first else None
    if not (ablations or no_talk or places):
        return shown
    grouped = any(a.result.description.get("swap_group") for by_mode in ablations.values() for a in by_mode.values())
    for r in shown:
        gains = {mode: comm_gain(r.result.outcomes, a.result.outcomes) for mode, a in sorted(ablations[r.key].items())}
        partner = place_scores(r.result.outcomes, places)["partner"] if places else None
        told = heldout_told(r.result.outcomes, first["heldout"], first.get("locations")) if places else None
        swap = ablations[r.key].get("swap")
        any_donor = grouped and swap is not None and not swap.result.description.get("swap_group")
        r.diagnostics = Diagnostics(no_talk.get((r.model, r.backend, r.dtype)), gains, partner, told, any_donor)
    return shown


def pareto_front(rows: Sequence[Row]) -> set[int]:
    """Indices of the rows no other row beats: at least as good a score for at most as many
    tokens, strictly better in one. Rows without a score are never on it."""
    valid = [i for i, r in enumerate(rows) if not math.isnan(r.score.mean) and not math.isnan(r.tokens.mean)]
    front = set()
    for i in valid:
        a = rows[i]
        dominated = any(rows[j].score.mean >= a.score.mean and rows[j].tokens.mean <= a.tokens.mean
                        and (rows[j].score.mean > a.score.mean or rows[j].tokens.mean < a.tokens.mean)
                        for j in valid if j != i)
        if not dominated:
            front.add(i)
    return front


def _fmt(x: float, spec: str = ".3f") -> str:
    return "n/a" if math.isnan(x) else format(x, spec)


def task_table(rows: Sequence[Row]) -> str:
    """Markdown rows for one task, best score first; with the communication columns when the
    rows carry diagnostics."""
    front = pareto_front(rows)
    order = sorted(range(len(rows)), key=lambda i: (-_nan0(rows[i].score.mean), _nan0(rows[i].tokens.mean)))
    diagnosed = any(r.diagnostics is not None for r in rows)
    extra = (" no-talk | comm gain (swap) [95% CI] | comm gain (remove) [95% CI] | partner-only (n) | "
             "told: rate, score when told |") if diagnosed else ""
    lines = ["| system | model | backend | dtype | score [95% CI] | tokens / question [95% CI] | answered | "
             "scored | infra failures | scoring failures | Pareto |" + extra,
             "|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * (5 if diagnosed else 0)]
    for i in order:
        r = rows[i]
        s = r.summary
        line = (f"| {r.system} | {r.model} | {r.backend} | {r.dtype} | "
                f"{_fmt(r.score.mean)} [{_fmt(r.score.low)}, {_fmt(r.score.high)}] | "
                f"{_fmt(r.tokens.mean, '.1f')} [{_fmt(r.tokens.low, '.1f')}, {_fmt(r.tokens.high, '.1f')}] | "
                f"{r.answered}/{s['questions']} | {s['scored']}/{s['questions']} | {s['infra_failures']} | {s['scoring_failures']} | "
                f"{'yes' if i in front else ''} |")
        if diagnosed:
            line += _diagnostic_cells(r.diagnostics)
        lines.append(line)
    if diagnosed:
        lines += ["", DIAGNOSTICS_NOTE]
    return "\n".join(lines)


DIAGNOSTICS_NOTE = (
    "no-talk: the same model's `solo` score (each agent answers from its own evidence alone, the best agent per "
    "question counts). comm gain: the score minus the score of the same dialogues with the partners' messages "
    "swapped for the next question's at the same turn positions (swap; in a game whose moves name its own items, "
    "the next game with the same items, except where marked `any donor`) or removed from every agent's view "
    "(remove), mean over questions with a paired 95% bootstrap interval. partner-only: the score on the questions "
    "whose answer only the partner holds (n of them). told: on those questions, the share of dialogues whose partner "
    "told the answerer what it lacked (in a game: named the target and no other object; otherwise: wrote the gold "
    "answer), and the score on them; a high share with a low score means the answerer does not read what it is "
    "told.")


def _diagnostic_cells(d: Diagnostics | None) -> str:
    if d is None:
        return " | | | | |"
    no_talk = "" if d.no_talk is None else _fmt(d.no_talk.mean)
    gains = [d.gains.get(mode) for mode in ("swap", "remove")]
    shown = ["" if g is None else f"{g.mean:+.3f} [{g.low:+.3f}, {g.high:+.3f}]" if g.n else "n/a" for g in gains]
    if d.any_donor and shown[0]:
        shown[0] += " (any donor)"
    partner = "" if d.partner_only is None else f"{_fmt(d.partner_only.mean)} ({d.partner_only.n})"
    told = "" if d.told is None else f"{_fmt(d.told['told'].mean, '.2f')}, {_fmt(d.told['score_told'].mean)}"
    return f" {no_talk} | {shown[0]} | {shown[1]} | {partner} | {told} |"


def _nan0(x: float) -> float:
    return -1.0 if math.isnan(x) else x


def cross_task_table(rows: Sequence[Row], tasks: Sequence[str]) -> str:
    """One row per system, model, backend and dtype, one column per task: `score / tokens`."""
    cells: dict[tuple[str, str, str, str], dict[str, Row]] = defaultdict(dict)
    for r in rows:
        if r.ablation is None:
            cells[r.system, r.model, r.backend, r.dtype][r.task] = r
    lines = ["| system | model | backend | dtype | " + " | ".join(tasks) + " |",
             "|---|---|---|---|" + "---|" * len(tasks)]
    for (system, model, backend, dtype), by_task in sorted(cells.items()):
        values = [f"{_fmt(by_task[t].score.mean)} / {_fmt(by_task[t].tokens.mean, '.0f')}" if t in by_task else ""
                  for t in tasks]
        lines.append(f"| {system} | {model} | {backend} | {dtype} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def plot_task(rows: Sequence[Row], task: str, path: Path) -> None:
    """Score against tokens per question for one task (see the module doc)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    families: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        families[r.family].append(r)
    for family, members in sorted(families.items()):
        members = sorted(members, key=lambda r: (r.k or 0))
        xs = [r.tokens.mean for r in members]
        ys = [r.score.mean for r in members]
        xerr = [[max(0.0, r.tokens.mean - r.tokens.low) for r in members],
                [max(0.0, r.tokens.high - r.tokens.mean) for r in members]]
        yerr = [[max(0.0, r.score.mean - r.score.low) for r in members],
                [max(0.0, r.score.high - r.score.mean) for r in members]]
        line = "-" if len(members) > 1 else "none"
        container = ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="o", linestyle=line, capsize=3, label=family)
        if len(members) > 1:
            for r in members:
                ax.annotate(f"k={r.k}", (r.tokens.mean, r.score.mean), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color=container[0].get_color())
    ceilings = {(r.model, r.backend, r.dtype): r.score.mean for r in rows
                if r.system_name == "solo" and not math.isnan(r.score.mean)}
    for (model, backend, dtype), ceiling in sorted(ceilings.items()):
        ax.axhline(ceiling, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(f"no-talk ceiling: {model} ({backend} {dtype})", (0.01, ceiling),
                    xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(0, 3), fontsize=7,
                    color="grey")
    front = sorted((rows[i] for i in pareto_front(rows)), key=lambda r: r.tokens.mean)
    if front:
        ax.step([r.tokens.mean for r in front], [r.score.mean for r in front], where="post", color="black",
                linestyle=":", linewidth=1, label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel("tokens per question (log scale)")
    ax.set_ylabel("score")
    ax.set_title(f"{task}: score against tokens (95% intervals)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_reports(results: Sequence[CellResult], output_dir: str | Path, *, command: str = "",
                  every_task: bool = False) -> list[Path]:
    """Write `leaderboard_<task>.md` and its plots for the tasks of `results` (with `every_task`,
    for every task on the board: e.g. after an entry of `leaderboard.json` was corrected by hand),
    and the folder-wide `leaderboard.md` and `leaderboard.json`; returns the paths written.

    The folder is the board: a call's cells replace the rows with the same task, held-out set,
    system, model, backend and dtype, and the other rows stay (read back from their cell files),
    each with the command that made it; a model run on another backend or in another dtype (for
    llama.cpp: another GGUF weight type) is another measurement, so it gets its own row. So one
    task's rows may come from several calls (baselines from one, trained checkpoints from another). A task played on several held-out sets (another split, other env
    settings, another number of questions) gets one section per set, each with its own table and
    plot, since scores on different sets are not comparable; the set with the most rows comes
    first and is the task's column in the cross-task table."""
    root = Path(output_dir)
    fresh = [(row, _index_entry(row, root, command)) for row in rows_of(results)]
    replaced = {_row_key(row) for row, _ in fresh}
    kept = []
    for entry in _read_index(root):
        path = root / entry["cell"]
        if not path.is_file():
            continue
        row = Row(read_cell(path))
        if _row_key(row) in replaced:
            continue
        entry["heldout"], entry["backend"], entry["dtype"] = row.result.description["heldout"], row.backend, row.dtype
        kept.append((row, entry))
    board = kept + fresh
    tasks = sorted({entry["task"] for _, entry in board})
    sections = {task: heldout_sections([(row, entry) for row, entry in board if entry["task"] == task])
                for task in tasks}
    written = []
    for task in tasks if every_task else sorted({e["task"] for _, e in fresh}):
        parts = [f"# Leaderboard: {task}\n\n"]
        if len(sections[task]) > 1:
            parts.append(f"{len(sections[task])} held-out sets, one section each (scores on different sets are not "
                         "comparable).\n\n")
        for number, members in enumerate(sections[task]):
            task_rows = attach_diagnostics([row for row, _ in members])
            for row, entry in members:
                if row.diagnostics is not None:
                    entry["diagnostics"] = row.diagnostics.to_dict()
            plot = f"plot_{task}.png" if number == 0 else f"plot_{task}_set{number + 1}.png"
            commands = list(dict.fromkeys(e["command"] for _, e in members if e["command"]))
            title = f"## Set {number + 1}\n\n" if len(sections[task]) > 1 else ""
            parts.append(title + _set_header(task_rows, commands) + task_table(task_rows) + f"\n\n![{task}]({plot})\n\n")
            plot_task(task_rows, task, root / plot)
            written.append(root / plot)
        path = root / f"leaderboard_{task}.md"
        atomic_write_text(path, "".join(parts).rstrip("\n") + "\n")
        written.append(path)
    firsts = [row for task in tasks for row, _ in sections[task][0]]
    commands: dict[str, list[str]] = {task: list(dict.fromkeys(e["command"] for _, e in sections[task][0] if e["command"]))
                                      for task in tasks}
    made_by = "".join(f"- {task}: " + "; ".join(f"`{c}`" for c in commands[task]) + "\n"
                      for task in tasks if commands[task])
    several = [task for task in tasks if len(sections[task]) > 1]
    note = (f"\n{', '.join(several)}: the held-out set with the most rows; the task's file has the others.\n"
            if several else "")
    overview = ("# Leaderboard across tasks\n\n" + (f"Made by:\n{made_by}\n" if made_by else "")
                + "Each cell: score / tokens per question.\n\n"
                + cross_task_table(firsts, tasks) + "\n" + note)
    atomic_write_text(root / "leaderboard.md", overview)
    atomic_write_json(root / "leaderboard.json", {"cells": [entry for _, entry in board]})
    written += [root / "leaderboard.md", root / "leaderboard.json"]
    return written


def heldout_sections(members: Sequence[tuple[Row, dict]]) -> list[list[tuple[Row, dict]]]:
    """One task's board entries grouped by held-out set, the set with the most rows first (ties:
    by the set's description, so the order is stable)."""
    groups: dict[str, list[tuple[Row, dict]]] = defaultdict(list)
    for row, entry in members:
        groups[_heldout_id(row)].append((row, entry))
    return [groups[k] for k in sorted(groups, key=lambda k: (-sum(r.ablation is None for r, _ in groups[k]), k))]


def _heldout_id(row: Row) -> str:
    return json.dumps(row.result.description["heldout"], sort_keys=True)


def _row_key(row: Row) -> tuple[str, ...]:
    """What makes two cells the same row of the board (an ablation cell: the same ablation of it)."""
    return row.task, _heldout_id(row), row.system, row.model, row.backend, row.dtype, row.ablation or ""


def _set_header(rows: Sequence[Row], commands: Sequence[str]) -> str:
    held = rows[0].result.description["heldout"]
    data = _data_note(rows[0].result.description.get("locations", {}).get("data", []))
    made_by = "Made by: " + "; ".join(f"`{c}`" for c in commands) + "\n\n" if commands else ""
    return (f"{made_by}Held-out: {held['count']} questions from index "
            f"{held['first_index']}, evidence dealt by seed {held['seed']}+i, env v{held['env_version']}"
            f"{', ' + str(held['env_kwargs']) if held['env_kwargs'] else ''}{data}. Score over scored questions; "
            "answered: questions with a final answer in the task's format; tokens are everything the model generated per question (all samples, rounds and turns). "
            "Infra and scoring failures are counted apart, never as wrong answers.\n\n")


def _data_note(files: Sequence[str]) -> str:
    """Where the questions' data was read from: its file, or its folder and how many files."""
    if not files:
        return ""
    if len(files) == 1:
        return f", data `{files[0]}`"
    try:
        folder = posixpath.commonpath(files)
    except ValueError:  # absolute and relative paths have no common folder
        folder = ""
    return f", data `{folder}/` ({len(files)} files)" if folder else f", data ({len(files)} files)"


def _index_entry(row: Row, root: Path, command: str) -> dict:
    path = row.result.path
    return {"task": row.task, "system": row.system, "model": row.model, "backend": row.backend, "dtype": row.dtype,
            "score": row.result.summary["score"],
            "tokens": row.result.summary["tokens"],
            "counts": {k: row.summary[k] for k in ("questions", "scored", "infra_failures", "scoring_failures")},
            "cell": str(path.relative_to(root)) if path.is_relative_to(root) else str(path),
            "key": row.result.description["key"], "heldout": row.result.description["heldout"], "command": command,
            **({"ablation": row.ablation, "ablates": row.result.description["ablates"]} if row.ablation else {})}


def _read_index(root: Path) -> list[dict]:
    """The entries of an existing `leaderboard.json` (an index written before entries carried
    their command takes the file's top-level one)."""
    path = root / "leaderboard.json"
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return [{"command": data.get("command", ""), **entry} for entry in data.get("cells", [])]
