"""What an agent that never talks scores on `synth-hop-ia` by guessing from the answer's type.

The board's `solo` no-talk ceiling is measured with a model, so it is only as high as that model
is good at answering alone: the untrained model's `solo` is low because it does not know which of
its names could be the answer. A trained model learns the answer's type (a city for a 2-hop
chain, one of the two people for a comparison) and can then guess among the names of that type it
holds. This script computes that guess's expected score without a model: each agent picks
uniformly among the `answer_candidates` it has seen (in the question and its own facts), and the
better of the two agents is scored per question, as `solo` scores the better agent. A pair whose
score does not beat this has not shown that talking helped, whatever its untrained baseline.

It reads the held-out questions from a board cell (so the figures are for exactly the questions
the board's cells answered) and splits them by question kind and by where the answer lies
(`optima_envs.core.places`). A comparison is counted at 0.5 per seat, though a seat holding both
birth years could answer it: the figure is a lower bound there.

    python benchmarks/guess_ceiling.py \
        benchmarks/results/leaderboard/cells/synth-hop-ia/mas/hop-dis-isft-it1-seed0-e62fdb96d8492572.json \
        --out guess_ceiling_synth_hop_distractors

Writes `benchmarks/results/<out>.json` and `.md`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, read_heldout_cell, write_report, write_result  # noqa: E402


def seat_guess(instance: Any, facts: Sequence[str]) -> float:
    """Expected score of a uniform guess among the answer-type names an agent holding `facts` has seen."""
    from optima_envs.core.places import gold_in_text
    from optima_envs.tasks.synth_hop import answer_candidates

    seen = " ".join([instance.question, *facts])
    names = [n for n in answer_candidates(instance) if gold_in_text(n, seen)]
    gold = instance.gold if isinstance(instance.gold, str) else instance.gold[0]
    return (gold in names) / len(names) if names else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cell", help="a board cell of synth-hop-ia whose held-out questions to use")
    parser.add_argument("--out", default="guess_ceiling_synth_hop")
    args = parser.parse_args()

    from optima_envs.core.places import answer_place
    cell, task, _, questions = read_heldout_cell(Path(args.cell), "synth-hop-ia")
    groups: dict[str, list[float]] = defaultdict(list)
    for q in questions:
        best = max(seat_guess(q.instance, [e.text for e in seat]) for seat in q.evidence)
        place = answer_place(task, q.instance, q.evidence)
        for group in ("all", f"{q.instance.meta['kind']}, answer {place}", *(["partner-only"] if place == "partner" else [])):
            groups[group].append(best)
    rows = {group: {"questions": len(v), "guess_ceiling": round(statistics.fmean(v), 4)} for group, v in groups.items()}
    env_kwargs = cell.description["heldout"]["env_kwargs"]
    command = invocation("guess_ceiling.py")
    lines = ["# synth-hop-ia: the no-talk ceiling of a type-aware guess", "",
             f"Made by: `{command}`. Held-out set of that board cell ({len(questions)} questions, {env_kwargs}). Each "
             "agent guesses uniformly among the names of the answer's type it has seen; the better agent is scored "
             "per question, as `solo` is.", "",
             "| questions | n | guess ceiling |", "|---|---|---|"]
    lines += [f"| {group} | {r['questions']} | {r['guess_ceiling']:.3f} |" for group, r in sorted(rows.items())]
    text = "\n".join(lines) + "\n"
    write_report(RESULTS / f"{args.out}.md", text)
    write_result(args.out, {"command": command, "cell": Path(args.cell).name, "heldout": env_kwargs, "groups": rows})
    print(text)


if __name__ == "__main__":
    main()
