"""Two trained systems on one board, compared with an interval on the difference.

Each side is several run seeds of one method, every run a cell of the same board, so every run
answered the same held-out questions. A side is either a `training_repeats.py` result (one of its
rows, by `--iteration-a/-b`), or any board cells named by their model labels (`--cells`), e.g. runs
trained by hand or by `optima train` on a game:

    python benchmarks/compare_training.py training_repeats_grpo_synth_hop training_repeats_isft_synth_hop
    python benchmarks/compare_training.py --task referential-game --dtype bfloat16 \\
        --cells grpo=ref-grpo-r4-seed0,ref-grpo-r4-seed1,ref-grpo-r4-seed2 \\
        --cells isft=ref-isft-enum-r5-seed0,ref-isft-enum-r5-seed1,ref-isft-enum-r5-seed2 \\
        --out grpo_vs_isft_referential

Where the board holds several held-out sets of one task (e.g. `synth-hop-ia` with and without
distractors), `--heldout KEY=VALUE` picks one, for the cells and the baseline alike.

The difference of the two sides' mean scores (and tokens) gets a paired bootstrap interval:
questions are resampled, the same resample for both sides, and each side's value is its mean over
run seeds of its mean over the resampled questions. Seeds are not resampled (three are too few to
resample), so the interval covers question sampling only; the seeds' spread is shown beside it.

With `--by-place` (board mode, information-asymmetric tasks and games), the score difference is
also given on each part of the held-out set by where the answer lay (`optima_envs.core.places`:
`alone`, `partner`, `named`), e.g. on the questions only the partner can answer.

Writes `benchmarks/results/<out>.json` and `.md` (default `<a>_vs_<b>`).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, write_report, write_result  # noqa: E402
from benchmarks.training_repeats import BOARD, best_baseline, evaluated, summarize  # noqa: E402


@dataclass(frozen=True)
class Side:
    """One side of the comparison: a system's board cells, one per run seed."""

    system: str
    source: str            # where its runs came from (a config, or the board's model labels)
    cells: list[dict[str, Any]]

    @property
    def score(self) -> dict[str, Any]:
        return summarize([c["score"]["mean"] for c in self.cells])

    @property
    def tokens(self) -> dict[str, Any]:
        return summarize([c["tokens"]["mean"] for c in self.cells])


def repeats_side(result: dict[str, Any], iteration: int) -> Side:
    """A `training_repeats.py` result's row `iteration` as a side."""
    rows = result["rows"]
    if not 0 <= iteration < len(rows):
        raise SystemExit(f"{result['benchmark']} has rows 0..{len(rows) - 1}, not {iteration}")
    return Side(rows[iteration]["system"], f"`{result['config']}`", rows[iteration]["cells"])


def board_side(spec: str, index: Sequence[dict[str, Any]], task: str, dtype: str, system: str) -> Side:
    """`LABEL=MODEL,MODEL,...`: the board's `system` cells of `task` at `dtype` for those model
    labels, in the order given."""
    label, sep, models = spec.partition("=")
    names = [m.strip() for m in models.split(",") if m.strip()]
    if not sep or not label or not names:
        raise SystemExit(f"--cells {spec!r}: write LABEL=MODEL,MODEL,... (the board's model labels, one per run seed)")
    found: dict[str, dict[str, Any]] = {}
    for c in evaluated(index):
        if c["task"] == task and c["system"] == system and c["dtype"] == dtype:
            if c["model"] in names and c["model"] in found:
                raise SystemExit(f"the board has several {dtype} {system} cells of {task} for {c['model']} (held-out "
                                 f"{found[c['model']]['heldout']['env_kwargs']} and {c['heldout']['env_kwargs']}): "
                                 "pick one set with --heldout KEY=VALUE")
            found[c["model"]] = c
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"the board has no {dtype} {system} cell of {task} for {', '.join(missing)}: evaluate them "
                         f"with `optima leaderboard --tasks {task} --systems {system} --model NAME=PATH ...` first")
    return Side(label, ", ".join(f"`{n}`" for n in names), [found[n] for n in names])


def on_heldout(index: Sequence[dict[str, Any]], pairs: Sequence[str]) -> list[dict[str, Any]]:
    """The cells whose held-out env options include every `KEY=VALUE` of `pairs` (compared as
    text, as the board records them): one board set, where a task has several."""
    wanted = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--heldout {pair!r}: write KEY=VALUE, e.g. distractors=2")
        wanted[key] = value
    return [c for c in index if all(str(c.get("heldout", {}).get("env_kwargs", {}).get(k)) == v
                                    for k, v in wanted.items())]


def load_outcomes(board: Path, side: Side) -> list[list[dict[str, Any]]]:
    """Per run seed, the per-question outcomes of the side's cells (board order)."""
    runs = []
    for cell in side.cells:
        outcomes = json.loads((board / cell["cell"]).read_text())["outcomes"]
        runs.append(sorted(outcomes, key=lambda o: o["position"]))
    return runs


def check_same_questions(sides: Sequence[Sequence[Sequence[dict[str, Any]]]]) -> None:
    """Every run of both sides must have answered the same questions in the same order: the
    bootstrap pairs them by position."""
    ids = [[o["instance_id"] for o in run] for runs in sides for run in runs]
    if any(i != ids[0] for i in ids):
        raise SystemExit("the runs were not evaluated on the same held-out questions (their instance ids differ); "
                         "put every run on one board with the same --questions and --set options")


def question_places(board: Path, side: Side) -> dict[str, list[int]]:
    """Indexes (in board order) of the held-out questions by where their answer lay, read from the
    held-out set of the side's first cell, rebuilt."""
    from optima_envs.core.places import answer_place
    from optima_eval.leaderboard.cells import read_cell
    from optima_eval.leaderboard.diagnostics import heldout_setup

    cell = read_cell(board / side.cells[0]["cell"])
    setup = heldout_setup(cell.description["heldout"], cell.description.get("locations"))
    if setup is None:
        raise SystemExit(f"--by-place: the held-out set of {side.cells[0]['cell']} cannot be rebuilt here")
    task, _, questions = setup
    by_position = {q.position: q for q in questions}
    places: dict[str, list[int]] = {}
    for i, position in enumerate(sorted(o.position for o in cell.outcomes)):
        q = by_position[position]
        place = answer_place(task, q.instance, q.evidence)
        if place is None:
            raise SystemExit(f"--by-place: the task of {side.cells[0]['cell']} has no answer places (its agents hold "
                             "no private evidence)")
        places.setdefault(place, []).append(i)
    return dict(sorted(places.items()))


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


def ratio(value: float, best: float) -> float | None:
    """`value / best`; None when the best baseline scored 0 (no ratio exists)."""
    return value / best if best else None


def times(value: float | None) -> str:
    """A ratio as the report writes it: "1.23x", or "n/a" where there is none."""
    return "n/a" if value is None else f"{value:.2f}x"


def report(sides: Sequence[Side], best: dict[str, Any], diff: dict[str, dict[str, float]], *, task: str,
           task_kwargs: Any, board: str, command: str, sources: str, questions: int, samples: int) -> str:
    a, b = sides
    lines = [f"# {a.system} against {b.system} on {task} {task_kwargs}", "",
             f"Made by: `{command}`, from {sources} (each side the mean over its run seeds; every run answered "
             f"the same {questions} held-out questions of `{board}`).", "",
             "| system | runs from | runs | score: mean ± std over seeds | tokens: mean ± std | score / best baseline "
             "| tokens / best baseline |", "|---|---|---|---|---|---|---|"]
    for side in sides:
        s, t = side.score, side.tokens
        lines.append(f"| {side.system} | {side.source} | {len(side.cells)} | {s['mean']:.3f} ± {s['std']:.3f} "
                     f"| {t['mean']:.1f} ± {t['std']:.1f} | {times(ratio(s['mean'], best['score']['mean']))} "
                     f"| {times(ratio(t['mean'], best['tokens']['mean']))} |")
    lines += ["", f"Best untrained baseline on the board: `{best['system']}` {best['score']['mean']:.3f} at "
              f"{best['tokens']['mean']:.1f} tokens.", "", "Per run (score [95% CI] / tokens per question):", ""]
    for side in sides:
        for cell in side.cells:
            lines.append(f"- {side.system}, `{cell['model']}`: {cell['score']['mean']:.3f} [{cell['score']['low']:.3f}, "
                         f"{cell['score']['high']:.3f}] / {cell['tokens']['mean']:.1f}")
    lines += ["", f"Difference ({a.system} minus {b.system}), paired bootstrap over questions "
              f"({samples} resamples, 95%):", ""]
    for field, d in diff.items():
        lines.append(f"- {field}: {d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="*", help="Two training_repeats result names (benchmarks/results/<a>.json); "
                                                   "or none, with two --cells.")
    parser.add_argument("--iteration-a", type=int, default=0)
    parser.add_argument("--iteration-b", type=int, default=0)
    parser.add_argument("--cells", action="append", default=[], metavar="LABEL=MODEL,MODEL,...",
                        help="A side from board cells: its label and the board's model labels, one per run seed "
                             "(give it twice).")
    parser.add_argument("--task", help="The board task of the --cells sides.")
    parser.add_argument("--dtype", default="float32", help="The precision of the --cells sides and of the baseline.")
    parser.add_argument("--side-dtypes", default=None, metavar="DTYPE,DTYPE",
                        help="The precisions of the two --cells sides where they differ (runs trained and evaluated "
                             "on CPUs of different kinds); the baseline stays at --dtype.")
    parser.add_argument("--system", default="mas", help="The board system of the --cells sides.")
    parser.add_argument("--board", default=BOARD, help="The board of the --cells sides.")
    parser.add_argument("--heldout", action="append", default=[], metavar="KEY=VALUE",
                        help="Only cells (and baselines) whose held-out env options have KEY=VALUE, where the board "
                             "holds several sets of one task (repeatable).")
    parser.add_argument("--base-label", default="smollm2-135m", help="The untrained model's label on the board.")
    parser.add_argument("--by-place", action="store_true",
                        help="Also compare the score on each part of the held-out set by where the answer lay.")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    if args.cells:
        if args.results or len(args.cells) != 2 or not args.task:
            parser.error("board mode takes exactly two --cells and a --task, and no result names")
        board = args.board
        index = on_heldout(json.loads((ROOT / board / "leaderboard.json").read_text())["cells"], args.heldout)
        dtypes = [args.dtype] * 2 if args.side_dtypes is None else [d.strip() for d in args.side_dtypes.split(",")]
        if len(dtypes) != 2 or not all(dtypes):
            parser.error(f"--side-dtypes takes two precisions, one per --cells side, got {args.side_dtypes!r}")
        sides = [board_side(spec, index, args.task, dtype, args.system) for spec, dtype in zip(args.cells, dtypes)]
        task, best = args.task, best_baseline(index, args.base_label, args.dtype, args.task)
        task_kwargs = sides[0].cells[0]["heldout"]["env_kwargs"]
        names = [s.system for s in sides]
        sources = "the board's cells"
    else:
        if len(args.results) != 2:
            parser.error("name two training_repeats results, or give two --cells")
        results = [json.loads((RESULTS / f"{name}.json").read_text()) for name in args.results]
        if results[0]["board"] != results[1]["board"] or results[0]["task_kwargs"] != results[1]["task_kwargs"]:
            raise SystemExit("the two results were not evaluated on the same board and held-out set")
        sides = [repeats_side(r, it) for r, it in zip(results, (args.iteration_a, args.iteration_b))]
        board, task, task_kwargs = results[0]["board"], results[0]["task"], results[0]["task_kwargs"]
        best, names = results[0]["best_baseline"], list(args.results)
        sources = f"`{names[0]}.json` and `{names[1]}.json`"
    runs = [load_outcomes(ROOT / board, side) for side in sides]
    check_same_questions(runs)
    diff = {field: paired_bootstrap(runs[0], runs[1], field, samples=args.samples, seed=args.seed)
            for field in ("score", "tokens")}
    if args.by_place:
        if not args.cells:
            parser.error("--by-place needs two --cells sides")
        for place, picks in question_places(ROOT / board, sides[0]).items():
            subset = [[[run[i] for i in picks] for run in side_runs] for side_runs in runs]
            diff[f"score, {place} ({len(picks)} questions)"] = paired_bootstrap(
                *subset, "score", samples=args.samples, seed=args.seed)
    out = args.out or f"{names[0]}_vs_{names[1]}"
    command = invocation("compare_training.py", argv)
    text = report(sides, best, diff, task=task, task_kwargs=task_kwargs, board=board, command=command,
                  sources=sources, questions=len(runs[0][0]), samples=args.samples)
    write_report(RESULTS / f"{out}.md", text)
    write_result(out, {"command": command, "a": names[0], "b": names[1], "task": task, "board": board, "rows": [
        {"system": s.system, "source": s.source, "models": [c["model"] for c in s.cells], "score": s.score,
         "tokens": s.tokens, "score_ratio": ratio(s.score["mean"], best["score"]["mean"]),
         "token_ratio": ratio(s.tokens["mean"], best["tokens"]["mean"])} for s in sides],
        "difference": diff, "best_baseline": best})
    print(text)


if __name__ == "__main__":
    main()
