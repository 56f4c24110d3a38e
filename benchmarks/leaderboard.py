"""Leaderboard: held-out score against tokens per dialogue for every evaluated system of a task.

Reads the `evaluation/DONE.json` of finished runs (any method: the run-dir layout is shared),
so the table always shows measured numbers. Every row must be evaluated on the same held-out
set: the same env options and the same (instance, evidence-deal seed) episodes, read from each
evaluation's episode buffer; a row that differs is refused.

    python benchmarks/leaderboard.py                   # synth-hop-ia: the iSFT/iDPO/iSFT-DPO experiments
    python benchmarks/leaderboard.py --row "mine=runs/x/iter_001/evaluation" --name leaderboard_mine

Writes `benchmarks/results/<name>.json` and `.md`: score and tokens with 95% bootstrap
intervals, both as ratios to the first row (the untrained system), and whether the row is on
the score-tokens Pareto front (no other row is at least as accurate and at least as cheap).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, write_result  # noqa: E402

ISFT = "runs/isft/synth_hop_experiment"
BENCH = "runs/bench"
DEFAULT_ROWS = (
    ("untrained, plain prompts", f"{ISFT}/baseline/evaluation"),
    ("untrained, 'be concise' prompt", f"{ISFT}/concise/evaluation"),
    ("iSFT iteration 0", f"{ISFT}/iter_000/evaluation"),
    ("iSFT iteration 1", f"{ISFT}/iter_001/evaluation"),
    ("iDPO (1 iteration from iSFT iteration 0; 32 trees, temperature 0.5)", f"{BENCH}/idpo_synth_hop_full/iter_000/evaluation"),
    ("iDPO (1 iteration from iSFT iteration 0; 96 trees, temperature 0.7)",
     f"{BENCH}/idpo_synth_hop_full_t07_96trees/iter_000/evaluation"),
    ("iSFT-DPO: iSFT stage (from iSFT iteration 0)", f"{BENCH}/isft-dpo_synth_hop_full/cycle_000/isft/iter_000/evaluation"),
    ("iSFT-DPO: iDPO stage (1 full cycle)", f"{BENCH}/isft-dpo_synth_hop_full/cycle_000/idpo/iter_000/evaluation"),
)


def load_row(label: str, folder: Path) -> dict[str, Any] | None:
    """One system's evaluation, or None when that run has not finished its evaluation."""
    done = folder / "DONE.json"
    if not done.is_file():
        return None
    from optima_train.buffers import read_episodes

    d = json.loads(done.read_text())
    episodes = sorted((r.instance_id, r.seed) for r in read_episodes(folder / "episodes"))
    return {"system": label, "source": str(folder), "score": d["score"]["mean"],
            "score_ci": [d["score"]["low"], d["score"]["high"]], "tokens": d["tokens"]["mean"],
            "tokens_ci": [d["tokens"]["low"], d["tokens"]["high"]], "mean_turns": d.get("mean_turns"),
            "episodes": d["episodes"], "excluded": d.get("excluded"), "end_reasons": d.get("end_reasons"),
            "heldout": {"env_id": d["env_id"], "env_kwargs": d.get("env_kwargs"),
                        "max_new_tokens": d.get("sampling", {}).get("max_new_tokens"), "episodes": episodes}}


def build(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ratios to the first row and the Pareto flag; refuses rows from another held-out set."""
    first = rows[0]
    for row in rows[1:]:
        differs = [k for k in first["heldout"] if row["heldout"][k] != first["heldout"][k]]
        if differs:
            raise SystemExit(f"{row['system']!r} ({row['source']}) was not evaluated like {first['system']!r}: "
                             f"its {', '.join(differs)} differ; compare like with like")
    for row in rows:
        row["heldout"] = {k: v for k, v in row["heldout"].items() if k != "episodes"}  # checked; too long to keep
        row["score_ratio"] = row["score"] / first["score"] if first["score"] else None
        row["tokens_ratio"] = row["tokens"] / first["tokens"] if first["tokens"] else None
        row["pareto"] = not any(o is not row and o["score"] >= row["score"] and o["tokens"] <= row["tokens"]
                                and (o["score"] > row["score"] or o["tokens"] < row["tokens"]) for o in rows)
    return rows


def markdown(rows: list[dict[str, Any]], title: str) -> str:
    def ratio(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}x"

    lines = [f"# {title}", "",
             f"{rows[0]['episodes']} held-out dialogues per system (greedy), 95% bootstrap intervals; "
             f"ratios are to the first row. Pareto: no other row is at least as accurate and as cheap.", "",
             "| system | held-out score | tokens / dialogue | score ratio | token ratio | turns | Pareto |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['score']:.3f} [{r['score_ci'][0]:.3f}, {r['score_ci'][1]:.3f}] | "
                     f"{r['tokens']:.1f} [{r['tokens_ci'][0]:.1f}, {r['tokens_ci'][1]:.1f}] | "
                     f"{ratio(r['score_ratio'])} | {ratio(r['tokens_ratio'])} | {r['mean_turns']:.2f} | "
                     f"{'yes' if r['pareto'] else ''} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", action="append", default=[], metavar="LABEL=EVALUATION_DIR",
                        help="A system and its evaluation folder (repeatable; default: the synth-hop experiments).")
    parser.add_argument("--name", default="leaderboard_synth_hop", help="Result file name (no extension).")
    parser.add_argument("--title", default="synth-hop-ia leaderboard: SmolLM2-135M, score against tokens")
    args = parser.parse_args()
    specs = [tuple(r.split("=", 1)) for r in args.row] if args.row else list(DEFAULT_ROWS)
    for spec in specs:
        if len(spec) != 2:
            raise SystemExit(f"--row must be LABEL=EVALUATION_DIR, got {'='.join(spec)!r}")
    rows, missing = [], []
    for label, folder in specs:
        row = load_row(label, ROOT / folder)
        (rows.append(row) if row else missing.append(f"{label} ({folder})"))
    if not rows:
        raise SystemExit("no finished evaluation found: " + "; ".join(missing))
    rows = build(rows)
    write_result(args.name, {"rows": rows, "missing": missing})
    (RESULTS / f"{args.name}.md").write_text(markdown(rows, args.title))
    print(markdown(rows, args.title))
    if missing:
        print("not finished (left out):", "; ".join(missing))


if __name__ == "__main__":
    main()
