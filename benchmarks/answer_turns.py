"""When a pair answers the questions only the partner can answer: the turn of the first answer.

The board's `told` column says whether the partner wrote what the answering seat lacked. This
script says what happened instead: for each board cell named, on its partner-only held-out
questions (`optima_envs.core.places`), the turn of the dialogue's first `<A>` tag (0: the first
speaker answers before hearing anything), whether the partner told, the dialogue's length, and the
score, counted over the dialogues. A pair whose first speaker answers at turn 0 is guessing; a
short dialogue after such a guess means the partner agreed with it. Over all questions it also
counts the right dialogues whose every answer was grounded (`answers_grounded`: given by an agent
that held every supporting fact then, or had been told the answer): the share of right answers
that came from knowing rather than guessing.

    python benchmarks/answer_turns.py CELL.json [CELL.json ...] --out answer_turns_synth_hop_distractors

Writes `benchmarks/results/<out>.json` and `.md`.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import invocation, publish_table, read_heldout_cell  # noqa: E402


def first_answer_turn(messages: Sequence[str], tag: str = "<A>") -> int | None:
    """Index of the first message holding an answer tag; None when nobody answered."""
    return next((i for i, text in enumerate(messages) if tag in text), None)


def tagged_messages(transcript: Sequence[dict[str, str]], seats: dict[str, int],
                    tag: str = "<A>") -> list[tuple[int, str, bool]]:
    """A board transcript as (seat, text, answered) triples; a message answers when it holds `tag`."""
    return [(seats[t["speaker"]], t["text"], tag in t["text"]) for t in transcript if t["speaker"] in seats]


def cell_turns(path: Path) -> dict[str, Any]:
    """Counts over one cell's partner-only dialogues, and its right and grounded ones overall."""
    from optima_envs.core.places import answer_place, answers_grounded, partners_informed
    cell, task, agents, questions = read_heldout_cell(path)
    by_position = {q.position: q for q in questions}
    seats = {name: i for i, name in enumerate(agents)}
    counts: Counter[str] = Counter()
    for o in cell.outcomes:
        q = by_position[o.position]
        if not o.scored or not o.transcript:
            continue
        tagged = tagged_messages(o.transcript, seats)
        counts["all questions: dialogues"] += 1
        if o.score > 0:
            counts["all questions: right"] += 1
            grounded = answers_grounded(q.instance, q.evidence, tagged)
            # a task whose evidence marks no supporting facts cannot be checked: counted apart, not as ungrounded
            counts["all questions: right, grounded" if grounded else
                   "all questions: right, not checkable" if grounded is None else "all questions: right, ungrounded"] += 1
        if answer_place(task, q.instance, q.evidence) != "partner":
            continue
        messages = [(seat, text) for seat, text, _ in tagged]
        turn = first_answer_turn([text for _, text in messages])
        told = bool(partners_informed(task, q.instance, q.evidence, messages))
        counts["dialogues"] += 1
        counts[f"first answer at turn {turn}" if turn is not None else "no answer"] += 1
        counts["right"] += o.score > 0
        if turn == 0 and not told and len(messages) <= 2:
            counts["turn-0 guess, not told, ended after 2 turns"] += 1
        if o.score > 0:
            counts[f"right, first answer at turn {turn}"] += 1
    return {"label": cell.description.get("label"), "cell": path.name, **dict(sorted(counts.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="+", help="board cells (the mas system) of an information-asymmetric task")
    parser.add_argument("--out", default="answer_turns")
    args = parser.parse_args()
    rows = [cell_turns(Path(c)) for c in args.cells]
    columns = sorted({k for r in rows for k in r} - {"label", "cell", "dialogues"})
    command = invocation("answer_turns.py")
    publish_table(args.out, "Partner-only questions: the turn of the first answer",
                  f"Made by: `{command}`. Counts over each cell's partner-only held-out dialogues, "
                  "and (`all questions:`) over all of them.",
                  ["model", "dialogues", *columns],
                  [[r["label"], r.get("dialogues", 0), *(r.get(c, 0) for c in columns)] for r in rows],
                  {"command": command, "cells": rows})

if __name__ == "__main__":
    main()
