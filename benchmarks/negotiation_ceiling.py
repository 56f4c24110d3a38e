"""What a `negotiation-game` agent that never reads its partner can score, without a model.

The board's `solo` row is measured with a model, so it is only as high as that model is good at
proposing alone. This script computes the best any such agent could do: each seat proposes the
split with the highest expected score given its own values, the expectation taken over the
partner tables the game itself draws from (every value vector that makes the pool worth the same,
differs from the seat's own, and leaves no item worthless to both). `solo` scores the better of
the two seats per game, so the ceiling does too; the opener alone (what a pair reaches where the
first speaker proposes blind and the second accepts) is reported beside it. Both tables together
give 1.0 by construction, so the gap between the ceiling and 1.0 is all a pair can gain by talking.

    python benchmarks/negotiation_ceiling.py \
        benchmarks/results/leaderboard/cells/negotiation-game/mas/neg-isft-moves-it0-seed0-....json \
        --out negotiation_ceiling

Writes `benchmarks/results/<out>.json` and `.md`.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, read_heldout_cell, write_report, write_result  # noqa: E402


@functools.lru_cache(maxsize=None)
def partner_tables(counts: tuple[int, ...], total: int, own: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The partner value tables the game draws given the pool and a seat's own table."""
    from optima_envs.tasks.negotiation import _value_vectors

    return tuple(v for v in _value_vectors(counts, total) if v != own and all(a or b for a, b in zip(own, v)))


def blind_take(game, seat: int) -> tuple[int, ...]:
    """The take seat `seat` proposes knowing only its own values: the one with the highest
    expected score over `partner_tables` (ties to the first take in order)."""
    from optima_envs.tasks.negotiation import Game

    own, total = game.values[seat], game.worth(seat, game.counts)
    worlds = [Game(game.items, game.counts, (own, v) if seat == 0 else (v, own))
              for v in partner_tables(game.counts, total, own)]
    takes = list(itertools.product(*(range(c + 1) for c in game.counts)))

    def take0(take):
        return take if seat == 0 else game.rest(take)

    return max(takes, key=lambda t: statistics.fmean(w.score(take0(t)) for w in worlds))


def blind_score(game, seat: int) -> float:
    """The true score of seat `seat`'s `blind_take`."""
    take = blind_take(game, seat)
    return game.score(take if seat == 0 else game.rest(take))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cell", help="a board cell of negotiation-game whose held-out games to use")
    parser.add_argument("--out", default="negotiation_ceiling")
    args = parser.parse_args()

    from optima_envs.tasks.negotiation import Game

    cell, _, _, questions = read_heldout_cell(Path(args.cell), "negotiation-game")
    games = [Game.of(q.instance) for q in questions]
    per_seat = [(blind_score(g, 0), blind_score(g, 1)) for g in games]
    rows = {
        "both tables (the best split)": 1.0,
        "no-talk ceiling: the better seat's blind proposal": statistics.fmean(max(p) for p in per_seat),
        "the opener's blind proposal (seat 0)": statistics.fmean(p[0] for p in per_seat),
        "the second seat's blind proposal (seat 1)": statistics.fmean(p[1] for p in per_seat),
    }
    rows = {k: round(v, 4) for k, v in rows.items()}
    env_kwargs = cell.description["heldout"]["env_kwargs"]
    command = invocation("negotiation_ceiling.py")
    lines = ["# negotiation-game: what a proposal made without the partner's values can score", "",
             f"Made by: `{command}`. Held-out set of that board cell ({len(games)} games, {env_kwargs}). A blind "
             "proposal is the split with the best expected score over the partner tables the game draws, given "
             "only the seat's own values; it is then scored on the game's real tables.", "",
             "| proposal | mean score |", "|---|---|"]
    lines += [f"| {name} | {value:.3f} |" for name, value in rows.items()]
    text = "\n".join(lines) + "\n"
    write_report(RESULTS / f"{args.out}.md", text)
    write_result(args.out, {"command": command, "cell": Path(args.cell).name, "heldout": env_kwargs,
                            "games": len(games), "scores": rows})
    print(text)


if __name__ == "__main__":
    main()
