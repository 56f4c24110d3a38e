"""How much of a dialogue's score needed the agents to talk.

On an information-asymmetric task each agent holds part of the evidence. A question whose gold
answer is written in the first speaker's own evidence can be answered without any exchange (on
`synth-hop-ia` without distractors, the only city the holder of "X was born in C." knows is the
answer); one whose answer is only in the partner's evidence needs the partner's facts, and one
that names its answer ("Who was born first, A or B?") needs facts or a guess. This splits every
board cell of the named tasks by that, so a score at the no-exchange ceiling is seen for what it is: a policy that
answers alone from turn one, not one that communicates well.

    python benchmarks/exchange_split.py                                   # synth-hop-ia's mas cells
    python benchmarks/exchange_split.py --tasks synth-hop-ia,hotpotqa-ia --systems mas,cot

The held-out episodes are rebuilt from each cell's recorded held-out set (instance, evidence
deal), so the split is exactly the board's. Writes `benchmarks/results/<name>.{json,md}`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, write_report, write_result  # noqa: E402

BOARD = ROOT / "benchmarks/results/leaderboard"


def gold_in_text(gold: str, text: str) -> bool:
    """The gold answer as whole words of `text`, case-folded, trailing punctuation ignored."""
    words = gold.strip().rstrip(".!?").casefold()
    return bool(words) and re.search(rf"(?<!\w){re.escape(words)}(?!\w)", text.casefold()) is not None


#: Where a question's answer is written: the first speaker's own evidence, only elsewhere (the
#: partner's evidence), or in the question itself (a choice between named options).
PLACES = ("alone", "partner", "named")


def answer_place(question: str, gold: str, evidence: Sequence[Any]) -> str:
    """Which of `PLACES` a question is, seen from the agent holding `evidence` (the first speaker)."""
    if gold_in_text(gold, question):
        return "named"
    return "alone" if any(gold_in_text(gold, piece.render()) for piece in evidence) else "partner"


def split_scores(outcomes: Iterable[Mapping[str, Any]], places: Mapping[int, str]) -> dict[str, Any]:
    """Mean score and count per answer place; an unscored question (infra or scoring failure) is
    left out, not counted wrong."""
    parts: dict[str, list[float]] = {p: [] for p in PLACES}
    for o in outcomes:
        if o.get("score") is None or o.get("infra_failure"):
            continue
        parts[places[o["position"]]].append(float(o["score"]))
    return {k: {"n": len(v), "score": statistics.fmean(v) if v else None} for k, v in parts.items()}


def heldout_places(description: Mapping[str, Any]) -> dict[int, str]:
    """Position -> answer place, for a cell's recorded held-out set (its data read from the files
    the cell recorded: `recorded_env_kwargs`)."""
    from optima_eval.heldout import HeldOut
    from optima_eval.leaderboard.cells import recorded_env_kwargs

    heldout = description["heldout"]
    kwargs = recorded_env_kwargs(description)
    questions = HeldOut(heldout["env_id"], kwargs, heldout["count"], heldout["seed"],
                        heldout["first_index"]).questions()
    return {q.position: answer_place(q.instance.question, q.instance.gold, q.evidence[0]) for q in questions}


def fmt(part: Mapping[str, Any]) -> str:
    return "–" if part["score"] is None else f"{part['score']:.3f} ({part['n']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="synth-hop-ia")
    parser.add_argument("--systems", default="mas")
    parser.add_argument("--dtype", default="float32", help="Only the board's cells of this precision.")
    parser.add_argument("--board", default=str(BOARD))
    parser.add_argument("--name", default="exchange_split_synth_hop")
    args = parser.parse_args()

    board = Path(args.board)
    tasks, systems = args.tasks.split(","), args.systems.split(",")
    index = json.loads((board / "leaderboard.json").read_text())["cells"]
    chosen = sorted((c for c in index if c["task"] in tasks and c["system"].split(":")[0] in systems
                     and c["dtype"] == args.dtype), key=lambda c: (c["task"], c["system"], c["model"]))
    if not chosen:
        raise SystemExit(f"the board {board} has no {args.dtype} cells of systems {systems} on tasks {tasks}")
    splits: dict[str, dict[int, str]] = {}
    rows = []
    for c in chosen:
        cell = json.loads((board / c["cell"]).read_text())
        key = json.dumps(cell["cell"]["heldout"], sort_keys=True)
        if key not in splits:
            splits[key] = heldout_places(cell["cell"])
        rows.append({"task": c["task"], "system": c["system"], "model": c["model"], "score": c["score"]["mean"],
                     "tokens": c["tokens"]["mean"], **split_scores(cell["outcomes"], splits[key])})

    command = invocation("exchange_split.py")
    lines = [f"# Score with and without the partner's evidence ({', '.join(tasks)})", "",
             f"Made by: `{command}`, from the {args.dtype} cells of `{board.relative_to(ROOT)}`. Score (questions) "
             "by where the gold answer is written: `alone`, in the first speaker's own evidence (answerable "
             "without any exchange); `partner`, only outside it (needs the partner's facts); `named`, in the "
             "question (a choice between named options: needs facts, or a guess, right half the time between two).",
             "", "| task | system | model | score | tokens | alone | partner | named |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['system']} | {r['model']} | {r['score']:.3f} | {r['tokens']:.1f} | "
              + " | ".join(fmt(r[p]) for p in PLACES) + " |" for r in rows]
    write_report(RESULTS / f"{args.name}.md", "\n".join(lines) + "\n")
    write_result(args.name, {"command": command, "board": str(board.relative_to(ROOT)), "dtype": args.dtype,
                             "rows": rows})
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
