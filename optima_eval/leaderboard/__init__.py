"""Leaderboards: systems x tasks x models, score against tokens, cached per cell.

`run_leaderboard(LeaderboardConfig(...))` computes what is missing; `write_reports(...)` writes
the tables and plots; `optima leaderboard` does both from the command line.
"""

from optima_eval.leaderboard.cells import Cell, CellResult, HeldOut, ModelSpec, read_cell, summarize_outcomes
from optima_eval.leaderboard.report import pareto_front, write_reports
from optima_eval.leaderboard.runner import LeaderboardConfig, LeaderboardRun, parse_model, plan_cells, run_leaderboard

__all__ = [
    "Cell", "CellResult", "HeldOut", "LeaderboardConfig", "LeaderboardRun", "ModelSpec", "pareto_front", "parse_model",
    "plan_cells", "read_cell", "run_leaderboard", "summarize_outcomes", "write_reports",
]
