"""A training run's trajectory as a picture: every stage as a point on the score-against-tokens
plane, one line per run seed, with the untrained baselines and the no-talk ceiling marked.

Training moves a pair along two axes at once (Optima's reward trades score against tokens), so a
table of per-stage means hides where a run went; this plot shows it. The inputs are plain points,
not cells, so a training loop, `benchmarks/training_repeats.py` or a notebook can draw one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Point:
    """One evaluated stage or baseline: its label, mean tokens per question and mean score."""

    label: str
    tokens: float
    score: float


def plot_trajectory(runs: Mapping[str, Sequence[Point]], path: str | Path, *, title: str,
                    baselines: Sequence[Point] = (), ceiling: float | None = None) -> Path:
    """Draw `runs` (run name -> its stages in training order) and save the PNG at `path`.

    Baselines are grey crosses, each labelled; `ceiling` (the `solo` system's score: what a
    pair that never talks reaches) is a dashed line. Tokens are on a log axis, as on the board.
    """
    if not any(runs.values()):
        raise ValueError("plot_trajectory needs at least one run with at least one stage")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, stages in runs.items():
        if not stages:
            continue
        (line,) = ax.plot([p.tokens for p in stages], [p.score for p in stages], marker="o", label=name)
        for p in stages:
            ax.annotate(p.label, (p.tokens, p.score), textcoords="offset points", xytext=(4, 4), fontsize=7,
                        color=line.get_color())
    for p in baselines:
        ax.scatter([p.tokens], [p.score], marker="x", color="grey")
        ax.annotate(p.label, (p.tokens, p.score), textcoords="offset points", xytext=(4, -10), fontsize=7,
                    color="grey")
    if ceiling is not None:
        ax.axhline(ceiling, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(f"no-talk ceiling ({ceiling:.2f})", (0.01, ceiling), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 3), fontsize=7, color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("tokens per question (log scale)")
    ax.set_ylabel("score")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
