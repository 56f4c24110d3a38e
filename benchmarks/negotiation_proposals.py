"""Does a `negotiation-game` proposer use what its partner said? Read off the board's dialogues.

The message ablations say whether talking changed the score; this says what the proposer did with
the partner's values. For each held-out game it takes the dialogue's first valid proposal and fits,
over every item of every game, the share of the item the proposer takes against the proposer's
own value for it and the partner's:

    take / count ~ const + b_count / count + b_own * own_value + b_partner * partner_value

The pool enters because it ties the two tables together: both pools are worth the same total, so
an item there is one of has high values for both seats, and a share of it is 0 or 1. In the best split an item goes to the seat that values it more (both pools are worth the same), so
a proposer that weighs both tables takes less of what the partner values: `b_own` > 0 and
`b_partner` < 0. A proposer that has not read the partner's values has `b_partner` near 0 once
the pool is in the fit: the table adds two model-free second-seat proposers on the same games for
scale, the best split and the blind proposal of `negotiation_ceiling.py` (whose small negative
`b_partner` is what the pool's structure leaves), and one that copies the partner's numbers into its
own take has `b_partner` > 0. The interval is a bootstrap over games (2,000 resamples, 95%).

    python benchmarks/negotiation_proposals.py \
        --cells moves-seed0=benchmarks/results/leaderboard/cells/negotiation-game/mas/neg-isft-moves-it0-seed0-....json \
        --out negotiation_proposals

Writes `benchmarks/results/<out>.json` and `.md`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, read_heldout_cell, write_report, write_result  # noqa: E402

RESAMPLES = 2000


def first_proposal(transcript: Sequence[dict], agents: Sequence[str], game: Any) -> tuple[int, tuple[int, ...], bool] | None:
    """(proposer seat, its take, whether it had read a partner message) of the first valid proposal."""
    from optima_envs.scoring import extract_tag
    from optima_envs.tasks.negotiation import Proposal, parse_move

    for k, message in enumerate(transcript):
        answer = extract_tag(message["text"], strict=True).answer
        if answer is None:
            continue
        move = parse_move(answer, game.items, game.counts)
        if isinstance(move, Proposal):
            seat = list(agents).index(message["speaker"])
            return seat, move.take, any(m["speaker"] != message["speaker"] for m in transcript[:k])
    return None


def item_rows(game: Any, seat: int, take: Sequence[int]) -> list[tuple[float, float, float, float]]:
    """(1 / count, own value, partner value, share taken) per item of one proposal."""
    return [(1 / game.counts[k], game.values[seat][k], game.values[1 - seat][k], take[k] / game.counts[k])
            for k in range(len(game.items))]


def fit(games: Sequence[Sequence[tuple[float, float, float, float]]]) -> np.ndarray:
    """Least-squares [const, b_count, b_own, b_partner] over every item row of `games`."""
    rows = np.array([r for g in games for r in g], dtype=float)
    design = np.column_stack([np.ones(len(rows)), rows[:, :3]])
    return np.linalg.lstsq(design, rows[:, 3], rcond=None)[0]


def analyse(cell_path: Path, seed: int = 0) -> dict[str, Any]:
    from optima_envs.tasks.negotiation import Game

    cell, _, agents, questions = read_heldout_cell(cell_path, "negotiation-game")
    by_position = {q.position: q for q in questions}
    games, second, informed = [], 0, 0
    for outcome in cell.outcomes:
        game = Game.of(by_position[outcome.position].instance)
        found = first_proposal(outcome.transcript or (), agents, game)
        if found is None:
            continue
        seat, take, read = found
        games.append(item_rows(game, seat, take))
        second += seat == 1
        informed += read
    return summarise(games, len(cell.outcomes), second, informed, seed)


def reference_games(cell_path: Path) -> dict[str, list]:
    """Item rows of two model-free second-seat proposers on a cell's held-out games, for scale: the
    best split (both tables) and the blind proposal (`negotiation_ceiling.blind_take`)."""
    from benchmarks.negotiation_ceiling import blind_take
    from optima_envs.tasks.negotiation import Game

    _, _, _, questions = read_heldout_cell(cell_path, "negotiation-game")
    games = [Game.of(q.instance) for q in questions]
    return {"best split (both tables)": [item_rows(g, 1, g.rest(g.best_take0())) for g in games],
            "blind proposal (own table only)": [item_rows(g, 1, blind_take(g, 1)) for g in games]}


def summarise(games: list, total: int, second: int, informed: int, seed: int = 0) -> dict[str, Any]:
    """The fit and its bootstrap interval, with the counts that go beside it."""
    if len(games) < 10:
        return {"games": total, "proposals": len(games)}
    rng = np.random.default_rng(seed)
    boot = np.array([fit([games[i] for i in rng.integers(len(games), size=len(games))]) for _ in range(RESAMPLES)])
    coef = fit(games)
    low, high = np.percentile(boot, [2.5, 97.5], axis=0)
    return {"games": total, "proposals": len(games), "by_second_seat": second, "after_reading_partner": informed,
            "b_own": [round(float(coef[2]), 4), round(float(low[2]), 4), round(float(high[2]), 4)],
            "b_partner": [round(float(coef[3]), 4), round(float(low[3]), 4), round(float(high[3]), 4)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", action="append", required=True, metavar="LABEL=PATH",
                        help="a board cell of negotiation-game (mas) to read; repeat for several")
    parser.add_argument("--out", default="negotiation_proposals")
    args = parser.parse_args()
    cells = dict(spec.split("=", 1) for spec in args.cells)
    results = {label: analyse(Path(path)) for label, path in cells.items()}
    references = reference_games(Path(next(iter(cells.values()))))
    for label, games in references.items():
        results[label] = summarise(games, len(games), len(games), 0)
    command = invocation("negotiation_proposals.py")
    lines = ["# negotiation-game: what the first proposal does with each table", "",
             f"Made by: `{command}`. Per cell: the first valid proposal of each held-out game, the share of each "
             "item the proposer takes fitted against 1 / the item's count, its own value and its partner's (bootstrap over games, 95%). "
             "Weighing both tables gives b_own > 0 and b_partner < 0; not reading the partner, b_partner near 0.", "",
             "| cell | proposals / games | by the second seat | after reading the partner | b_own [95%] | b_partner [95%] |",
             "|---|---|---|---|---|---|"]
    for label, r in results.items():
        if "b_own" not in r:
            lines.append(f"| {label} | {r['proposals']} / {r['games']} | | | too few proposals | |")
            continue
        fmt = lambda b: f"{b[0]:+.3f} [{b[1]:+.3f}, {b[2]:+.3f}]"  # noqa: E731
        read = "model-free" if label in references else r["after_reading_partner"]
        lines.append(f"| {label} | {r['proposals']} / {r['games']} | {r['by_second_seat']} | "
                     f"{read} | {fmt(r['b_own'])} | {fmt(r['b_partner'])} |")
    text = "\n".join(lines) + "\n"
    write_report(RESULTS / f"{args.out}.md", text)
    write_result(args.out, {"command": command, "cells": {k: Path(v).name for k, v in cells.items()}, "results": results})
    print(text)


if __name__ == "__main__":
    main()
