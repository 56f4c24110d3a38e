"""Two repeated training results on one board, compared with an interval on the difference.

Each input is a `training_repeats.py` result (several run seeds, every checkpoint a cell of the
same board, so every run answered the same held-out questions). The difference of two methods'
mean scores (and tokens) gets a paired bootstrap interval: questions are resampled, the same
resample for both methods, and each method's value is its mean over run seeds of its mean over
the resampled questions. Seeds are not resampled (three are too few to resample), so the
interval covers question sampling only; the seeds' spread is shown beside it.

    python benchmarks/compare_training.py training_repeats_grpo_synth_hop training_repeats_isft_synth_hop

Writes `benchmarks/results/<out>.json` and `.md` (default `<a>_vs_<b>`).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, write_report, write_result  # noqa: E402


def load_outcomes(result: dict[str, Any], iteration: int) -> list[list[dict[str, Any]]]:
    """Per run seed, the per-question outcomes of that iteration's checkpoint cell (board order)."""
    board = ROOT / result["board"]
    runs = []
    for cell in result["rows"][iteration]["cells"]:
        outcomes = json.loads((board / cell["cell"]).read_text())["outcomes"]
        runs.append(sorted(outcomes, key=lambda o: o["position"]))
    ids = [[o["instance_id"] for o in run] for run in runs]
    if any(i != ids[0] for i in ids):
        raise SystemExit(f"the runs of {result['benchmark']} were not evaluated on the same questions")
    return runs


def seed_mean(runs: Sequence[Sequence[dict[str, Any]]], field: str, picks: Sequence[int]) -> float:
    """Mean over run seeds of the mean over the picked questions; unscored answers are left out,
    as the board leaves them out of its score."""
    means = []
    for run in runs:
        values = [run[i][field] for i in picks if field != "score" or run[i]["score_ok"]]
        means.append(statistics.fmean(values))
    return statistics.fmean(means)


def paired_bootstrap(a: Sequence[Sequence[dict[str, Any]]], b: Sequence[Sequence[dict[str, Any]]], field: str,
                     *, samples: int, seed: int, confidence: float = 0.95) -> dict[str, float]:
    """The difference a - b with a percentile interval from resampling the shared questions."""
    n = len(a[0])
    every = range(n)
    rng = random.Random(seed)
    diffs = []
    for _ in range(samples):
        picks = [rng.randrange(n) for _ in every]
        diffs.append(seed_mean(a, field, picks) - seed_mean(b, field, picks))
    diffs.sort()
    tail = (1 - confidence) / 2
    return {"diff": seed_mean(a, field, every) - seed_mean(b, field, every),
            "low": diffs[int(tail * samples)], "high": diffs[min(samples - 1, int((1 - tail) * samples))],
            "confidence": confidence, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="A training_repeats result name (benchmarks/results/<a>.json).")
    parser.add_argument("b", help="The result to compare it against.")
    parser.add_argument("--iteration-a", type=int, default=0)
    parser.add_argument("--iteration-b", type=int, default=0)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    results = [json.loads((RESULTS / f"{name}.json").read_text()) for name in (args.a, args.b)]
    if results[0]["board"] != results[1]["board"] or results[0]["task_kwargs"] != results[1]["task_kwargs"]:
        raise SystemExit("the two results were not evaluated on the same board and held-out set")
    runs = [load_outcomes(r, it) for r, it in zip(results, (args.iteration_a, args.iteration_b))]
    rows = [r["rows"][it] for r, it in zip(results, (args.iteration_a, args.iteration_b))]
    diff = {field: paired_bootstrap(runs[0], runs[1], field, samples=args.samples, seed=args.seed)
            for field in ("score", "tokens")}
    best = results[0]["best_baseline"]
    out = args.out or f"{args.a}_vs_{args.b}"
    command = invocation("compare_training.py")

    lines = [f"# {rows[0]['system']} against {rows[1]['system']} on {results[0]['task']} {results[0]['task_kwargs']}", "",
             f"Made by: `{command}`, from `{args.a}.json` and `{args.b}.json` (each the mean over its run seeds; "
             f"every run answered the same {len(runs[0][0])} held-out questions of `{results[0]['board']}`).", "",
             "| system | config | runs | score: mean ± std over seeds | tokens: mean ± std | score / best baseline "
             "| tokens / best baseline |", "|---|---|---|---|---|---|---|"]
    for row, result in zip(rows, results):
        s, t = row["score"], row["tokens"]
        lines.append(f"| {row['system']} | `{result['config']}` | {len(s['runs'])} | {s['mean']:.3f} ± {s['std']:.3f} "
                     f"| {t['mean']:.1f} ± {t['std']:.1f} | {row['score_ratio']:.2f}x | {row['token_ratio']:.2f}x |")
    lines += ["", f"Best untrained baseline on the board: `{best['system']}` {best['score']['mean']:.3f} at "
              f"{best['tokens']['mean']:.1f} tokens.", "",
              f"Difference ({rows[0]['system']} minus {rows[1]['system']}), paired bootstrap over questions "
              f"({args.samples} resamples, 95%):", ""]
    for field, d in diff.items():
        lines.append(f"- {field}: {d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
    text = "\n".join(lines) + "\n"
    write_report(RESULTS / f"{out}.md", text)
    write_result(out, {"command": command, "a": args.a, "b": args.b, "rows": [
        {k: row[k] for k in ("system", "score", "tokens", "score_ratio", "token_ratio")} for row in rows],
        "difference": diff, "best_baseline": best})
    print(text)


if __name__ == "__main__":
    main()
