"""The leaderboard's ratios, Pareto front and same-held-out-set check (pure functions)."""

from __future__ import annotations

import pytest

from benchmarks.leaderboard import build, markdown


def row(system: str, score: float, tokens: float, episodes=(("q0", 1), ("q1", 2))) -> dict:
    return {"system": system, "source": f"runs/{system}", "score": score, "score_ci": [score, score],
            "tokens": tokens, "tokens_ci": [tokens, tokens], "mean_turns": 3.0, "episodes": 2,
            "heldout": {"env_id": "synth-hop-ia", "env_kwargs": {"hops": 2}, "max_new_tokens": 64,
                        "episodes": list(episodes)}}


def test_ratios_and_pareto_front():
    rows = build([row("base", 0.1, 100.0), row("short", 0.1, 50.0), row("best", 0.3, 60.0), row("worse", 0.05, 70.0)])
    assert [r["score_ratio"] for r in rows] == pytest.approx([1.0, 1.0, 3.0, 0.5])
    assert [r["tokens_ratio"] for r in rows] == pytest.approx([1.0, 0.5, 0.6, 0.7])
    assert [r["pareto"] for r in rows] == [False, True, True, False]
    table = markdown(rows, "t")
    assert "| best | 0.300 [0.300, 0.300] | 60.0 [60.0, 60.0] | 3.00x | 0.60x | 3.00 | yes |" in table


def test_another_heldout_set_is_refused():
    with pytest.raises(SystemExit, match="'other' .* its episodes differ"):
        build([row("base", 0.1, 100.0), row("other", 0.2, 50.0, episodes=(("q0", 1), ("q9", 2)))])
