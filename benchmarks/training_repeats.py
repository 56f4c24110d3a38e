"""A training result repeated over run seeds, put on the leaderboard beside the baselines.

One run is not a result: this trains the same config with several run seeds (each in a fresh run
directory, resumed if it exists), adds every iteration's checkpoint to a leaderboard as a `mas`
cell on the same held-out questions as the untrained baselines (each seed as soon as its run
ends, so a chain cut short keeps the seeds it finished), and reports each iteration as
the mean over seeds with its spread, against the best untrained baseline on that board.

    python benchmarks/training_repeats.py                     # iSFT, synth-hop experiment, seeds 1,2,3
    python benchmarks/training_repeats.py --seeds 1,2,3,4 --iterations 2
    python benchmarks/training_repeats.py --method isft-dpo --config configs/isft_dpo/synth_hop_experiment.yaml \
        --iterations 2 --runs runs/isft_dpo/synth_hop_experiment_seed{seed} \
        --set model.name=runs/isft/synth_hop_experiment_seed{seed}/iter_000/training/checkpoint \
        --name training_repeats_isft_dpo_synth_hop         # iSFT-DPO cycles from each seed's iSFT iteration 0
    python benchmarks/training_repeats.py --iterations 3 --seeds 1,2,3 --on-board 1   # seed 1 already on the board

For isft-dpo, `--iterations` counts cycles and every stage of a cycle (its iSFT, then its iDPO)
is a row; `{seed}` in a `--set` value is replaced by the run's seed. `--on-board` names seeds whose
stages are already cells of the board (found by their labels and precision): they are neither
trained nor evaluated again, so a run whose directory is gone still counts.

The board's baselines come from its own command (`optima leaderboard ... --out BOARD`, quoted in
`BOARD/leaderboard.md`); this script reads them and never recomputes them. Checkpoint cells use
the same held-out set and settings as that board, so they are cached like any cell.

Writes `benchmarks/results/<name>.json`, `.md` and `.png` (every stage of every seed on the
score-against-tokens plane, with the baselines; `--plot-only` redraws it from the published
files), and `<name>_seed<N>.json` per run: each
stage's step times and what it trained on (selected examples, kept DPO pairs), read from the run
directory as soon as the run ends, so they outlive it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, write_report, write_result  # noqa: E402

BOARD = "benchmarks/results/leaderboard"
CONFIG = "configs/isft/synth_hop_experiment.yaml"
# The held-out set of the board: the experiment config's task on its validation split.
TASK = "synth-hop-ia"
TASK_KWARGS = {"split": "validation", "distractors": 0, "comparison_rate": 0.5}  # hops: its default, 2
BASELINES = ("cot", "sc", "mad", "autoform", "mas", "mas-sc")


def train(method: str, config: str, seed: int, iterations: int, run_dir: Path, sets: Sequence[str]) -> None:
    """One resumable training run (`optima train`); its own evaluation is kept small, since the
    board evaluates every checkpoint on the fixed held-out set."""
    from optima_train.algorithms import algorithm

    length_flag = algorithm(method).count_option[0]  # --iterations, or --cycles for isft-dpo
    cmd = [str(Path(sys.executable).with_name("optima")), "train", method, "--config", config,
           length_flag, str(iterations), "--output-dir", str(run_dir), "--set", f"run.seed={seed}",
           "--set", "eval.baseline=false", "--set", "eval.episodes=20", "--set", "run.progress=false"]
    for item in sets:
        cmd += ["--set", item.replace("{seed}", str(seed))]
    subprocess.run(cmd, cwd=ROOT, check=True)


def run_stages(method: str, run_dir: Path, iterations: int) -> list[tuple[str, str, Any, int]]:
    """(label, row name, run directory, iteration) of every trained stage of a run, in training
    order: one per iteration, or for isft-dpo the last iteration of each cycle's iSFT and iDPO stage."""
    from optima_train.config.io import load_config
    from optima_train.isft_dpo import ISFTDPOConfig, stage_dir
    from optima_train.run_dir import RunDir

    if method != "isft-dpo":
        return [(f"it{it}", f"{method} iteration {it}", RunDir(run_dir), it) for it in range(iterations)]
    cycles = load_config(ISFTDPOConfig, run_dir / "config.yaml").cycles
    last = {"isft": cycles.isft_iterations - 1, "idpo": cycles.idpo_iterations - 1}
    return [(f"c{c}-{stage}", f"isft-dpo cycle {c}, {stage} stage", RunDir(stage_dir(str(run_dir), c, stage)),
             last[stage]) for c in range(iterations) for stage in ("isft", "idpo")]


def stage_checkpoints(method: str, run_dir: Path, iterations: int) -> list[tuple[str, str, Path]]:
    """(label, row name, checkpoint) of every trained stage of a finished run, in training order."""
    return [(label, name, rd.checkpoint(it)) for label, name, rd, it in run_stages(method, run_dir, iterations)]


#: What a step's DONE record says about how much it trained on (the rest is bookkeeping).
FACT_KEYS = ("episodes", "selected", "examples", "trees", "qualifying_pairs", "kept_pairs", "pairs", "steps",
             "train_loss")


#: The order steps run in within an iteration, for the report.
STEP_ORDER = ("generation", "scoring", "selection", "search", "training", "evaluation")


def training_facts(method: str, run_dir: Path, iterations: int) -> dict[str, dict[str, dict[str, Any]]]:
    """Per stage label, per finished step: its seconds and the counts it trained on (e.g. the kept
    DPO pairs), read from the run's step records; a step that has not finished is absent."""
    facts: dict[str, dict[str, dict[str, Any]]] = {}
    for label, _, rd, it in run_stages(method, run_dir, iterations):
        steps = {}
        stage = rd.stage_dir(it)
        names = [p.name for p in stage.iterdir() if p.is_dir()] if stage.is_dir() else []
        for step in sorted(names, key=lambda n: (STEP_ORDER.index(n) if n in STEP_ORDER else len(STEP_ORDER), n)):
            if rd.is_done(it, step):
                info = rd.done_info(it, step)
                steps[step] = {"seconds": info.get("seconds"), **{k: info[k] for k in FACT_KEYS if k in info}}
        facts[label] = steps
    return facts


def facts_line(step: str, info: dict[str, Any]) -> str:
    """`search 1300 s (trees 720, kept_pairs 125)`: one step of a stage in the report."""
    counts = ", ".join(f"{k} {info[k]:.3f}" if isinstance(info[k], float) else f"{k} {info[k]}"
                       for k in FACT_KEYS if k in info)
    seconds = f" {info['seconds']:.0f} s" if info.get("seconds") is not None else ""
    return f"{step}{seconds}" + (f" ({counts})" if counts else "")


def evaluated(index: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The board's cells that score a system as it plays, without the message ablations of a
    cell (`--diagnostics` files them under the same task, system and model, with `ablation` set)."""
    return [c for c in index if not c.get("ablation")]


def stage_cells(index: Sequence[dict[str, Any]], method: str, label: str, seeds: Sequence[int],
                dtype: str) -> list[dict[str, Any]]:
    """The board's `mas` cell of one stage for every seed, at `dtype`, in seed order; the board
    holds one row per (task, system, model, dtype), so a stage of a seed has at most one."""
    found = {c["model"]: c for c in evaluated(index) if c["task"] == TASK and c["system"] == "mas"
             and c["dtype"] == dtype}
    wanted = [f"{method}-{label}-seed{seed}" for seed in seeds]
    missing = [name for name in wanted if name not in found]
    if missing:
        raise SystemExit(f"the board has no {dtype} mas cell for {', '.join(missing)}: train and evaluate those "
                         "seeds here (leave them out of --on-board)")
    return [found[name] for name in wanted]


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Mean over seeds, sample standard deviation and range (the spread of the runs)."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "runs": list(values)}


def best_baseline(index: Sequence[dict[str, Any]], base_label: str, dtype: str, task: str = TASK) -> dict[str, Any]:
    """The highest-scoring untrained baseline cell of `task` on the board run in `dtype` (ties:
    fewer tokens): trained and untrained rows compare at one precision."""
    rows = [c for c in evaluated(index) if c["task"] == task and c["model"] == base_label and c["dtype"] == dtype
            and c["system"].split(":")[0] in BASELINES]
    if not rows:
        raise SystemExit(f"the board has no {dtype} baseline cells of {task} for model {base_label!r}: run its "
                         f"leaderboard (`optima leaderboard --tasks {task} ... --dtype {dtype}`) first")
    return max(rows, key=lambda c: (c["score"]["mean"], -c["tokens"]["mean"]))


def report(rows: list[dict[str, Any]], best: dict[str, Any], header: str,
           facts: dict[int, dict[str, Any] | None] | None = None) -> str:
    lines = [header, "",
             f"Best untrained baseline on the board: `{best['system']}` {best['score']['mean']:.3f} at "
             f"{best['tokens']['mean']:.1f} tokens per question.", "",
             "| system | runs | score: mean ± std (min–max) | tokens: mean ± std (min–max) | score / best baseline "
             "| tokens / best baseline |", "|---|---|---|---|---|---|"]
    for r in rows:
        s, t = r["score"], r["tokens"]
        lines.append(f"| {r['system']} | {len(s['runs'])} | {s['mean']:.3f} ± {s['std']:.3f} ({s['min']:.3f}–{s['max']:.3f}) "
                     f"| {t['mean']:.1f} ± {t['std']:.1f} ({t['min']:.1f}–{t['max']:.1f}) | "
                     f"{r['score_ratio']:.2f}x | {r['token_ratio']:.2f}x |")
    lines += ["", "Per run (score [95% CI] / tokens per question):", ""]
    for r in rows:
        for cell in r["cells"]:
            lines.append(f"- {cell['model']}: {cell['score']['mean']:.3f} [{cell['score']['low']:.3f}, "
                         f"{cell['score']['high']:.3f}] / {cell['tokens']['mean']:.1f}")
    if facts:
        lines += ["", "Training per run (seconds per step; what each step trained on):", ""]
        for seed, stages in facts.items():
            if stages is None:
                lines.append(f"- seed {seed}: not recorded (run directory gone and no facts file)")
                continue
            for label, steps in stages.items():
                lines.append(f"- seed {seed}, {label}: " + "; ".join(facts_line(k, v) for k, v in steps.items()))
    return "\n".join(lines) + "\n"


def trajectory(rows: Sequence[dict[str, Any]], index: Sequence[dict[str, Any]], base_label: str,
               dtype: str) -> tuple[dict[str, list[Any]], list[Any], float | None]:
    """The plot's inputs from a result's rows and its board: one line of stages per seed, the
    untrained baselines of the same task and precision, and the `solo` cell's score when the
    board has one (the no-talk ceiling)."""
    from optima_eval.leaderboard.trajectory import Point

    runs: dict[str, list[Any]] = {}
    for row in rows:
        for cell in row["cells"]:
            stage, seed = cell["model"].rsplit("-seed", 1)
            runs.setdefault(f"seed {seed}", []).append(Point(stage, cell["tokens"]["mean"], cell["score"]["mean"]))
    untrained = [c for c in evaluated(index) if c["task"] == TASK and c["model"] == base_label
                 and c["dtype"] == dtype]
    baselines = [Point(c["system"], c["tokens"]["mean"], c["score"]["mean"]) for c in untrained
                 if c["system"].split(":")[0] in BASELINES and ":" not in c["system"]]
    solo = [c["score"]["mean"] for c in untrained if c["system"] == "solo"]
    return runs, baselines, (solo[0] if solo else None)


def plot_result(name: str, result: dict[str, Any], index: Sequence[dict[str, Any]], base_label: str) -> Path:
    """`benchmarks/results/<name>.png`: the trajectory of every seed of a result."""
    from optima_eval.leaderboard.trajectory import plot_trajectory

    runs, baselines, ceiling = trajectory(result["rows"], index, base_label, result["best_baseline"]["dtype"])
    title = f"{result['task']}: training stages per seed ({result['best_baseline']['dtype']}, held-out questions)"
    return plot_trajectory(runs, RESULTS / f"{name}.png", title=title, baselines=baselines, ceiling=ceiling)


def seed_facts(name: str, method: str, run_dir: Path, iterations: int, *, trained_now: bool) -> dict[str, Any] | None:
    """A run's training facts, saved as `<name>.json` beside the results so they outlive its directory.

    A run trained by this call is read from its directory and saved. A run trained by an earlier
    call (`--on-board`) is read from its saved file, and from its directory (then saved) only where
    no file was saved; None when neither is there."""
    saved = RESULTS / f"{name}.json"
    if saved.is_file() and not trained_now:
        return json.loads(saved.read_text())["stages"]
    if not (run_dir / "config.yaml").is_file():
        return None
    facts = training_facts(method, run_dir, iterations)
    shown = run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir
    write_result(name, {"run_dir": str(shown), "stages": facts})
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="isft")
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--runs", default="runs/isft/synth_hop_experiment_seed{seed}",
                        help="Run directory per seed ({seed} is replaced).")
    parser.add_argument("--on-board", default="",
                        help="Seeds (of --seeds) whose stages are already on the board: not trained or evaluated again.")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="Extra config override.")
    parser.add_argument("--board", default=BOARD)
    parser.add_argument("--base-label", default="smollm2-135m")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--dtype", default="auto",
                        help="The board cells' dtype; auto: bf16 where the hardware runs it natively, else float32.")
    parser.add_argument("--name", default="training_repeats_isft_synth_hop")
    parser.add_argument("--plot-only", action="store_true",
                        help="Only redraw benchmarks/results/<name>.png from the published <name>.json and the board.")
    args = parser.parse_args()

    if args.plot_only:
        result = json.loads((RESULTS / f"{args.name}.json").read_text())
        index = json.loads((ROOT / result["board"] / "leaderboard.json").read_text())["cells"]
        print(plot_result(args.name, result, index, args.base_label))
        return

    from optima_eval.leaderboard import LeaderboardConfig, run_leaderboard, write_reports

    seeds = [int(s) for s in args.seeds.split(",")]
    if len(seeds) < 2:
        raise SystemExit("a repeated result needs at least two seeds (three or more to report a spread)")
    on_board = {int(s) for s in args.on_board.split(",") if s}
    if not on_board <= set(seeds):
        raise SystemExit(f"--on-board {sorted(on_board)} names seeds that are not in --seeds {seeds}")
    if on_board == set(seeds):
        raise SystemExit("every seed is --on-board: nothing to train; leave at least one out")
    command = invocation("training_repeats.py")
    stages: dict[str, str] = {}
    facts: dict[int, dict[str, Any] | None] = {}
    for seed in seeds:
        if seed in on_board:
            continue
        run_dir = Path(args.runs.format(seed=seed))
        train(args.method, args.config, seed, args.iterations, run_dir, args.sets)
        facts[seed] = seed_facts(f"{args.name}_seed{seed}", args.method, ROOT / run_dir, args.iterations,
                                 trained_now=True)
        models = []
        for label, name, checkpoint in stage_checkpoints(args.method, ROOT / run_dir, args.iterations):
            stages[label] = name
            models.append(f"{args.method}-{label}-seed{seed}={checkpoint}")
        # Each seed goes on the board as soon as it is trained: a chain cut short keeps its cells.
        config = LeaderboardConfig(tasks=[TASK], systems=["mas"], models=models, backend="vllm",
                                   questions=args.questions, max_new_tokens=args.max_new_tokens,
                                   max_turns=args.max_turns, dtype=args.dtype, env_kwargs={TASK: TASK_KWARGS},
                                   output_dir=str(ROOT / args.board))
        write_reports(run_leaderboard(config).results, ROOT / args.board, command=command)

    index = json.loads((ROOT / args.board / "leaderboard.json").read_text())["cells"]
    best = best_baseline(index, args.base_label, config.model_specs()[0].dtype)
    rows = []
    for label, name in stages.items():
        cells = stage_cells(index, args.method, label, seeds, best["dtype"])
        score = summarize([c["score"]["mean"] for c in cells])
        tokens = summarize([c["tokens"]["mean"] for c in cells])
        rows.append({"system": name, "score": score, "tokens": tokens, "cells": cells,
                     "score_ratio": score["mean"] / best["score"]["mean"] if best["score"]["mean"] else float("nan"),
                     "token_ratio": tokens["mean"] / best["tokens"]["mean"]})
    unit = "cycle(s)" if args.method == "isft-dpo" else "iteration(s)"
    header = (f"# {args.method} on {TASK} {TASK_KWARGS}, repeated over run seeds {seeds}\n\n"
              f"Made by: `{command}` (config `{args.config}`, {args.iterations} {unit} per run). Each run is "
              f"evaluated as a `mas` cell of `{args.board}` ({args.questions} held-out questions, "
              f"{args.max_new_tokens} tokens per reply, {args.max_turns} turns, greedy, {best['dtype']}): the same "
              "questions, evidence deals and precision as the baselines."
              + (f" Seed(s) {sorted(on_board)} were trained and evaluated by an earlier call; their cells are read "
                 f"from the board (`{args.board}/leaderboard.json` names the command of each)." if on_board else ""))
    for seed in on_board:  # the seeds trained here were read right after their run
        facts[seed] = seed_facts(f"{args.name}_seed{seed}", args.method, ROOT / args.runs.format(seed=seed),
                                 args.iterations, trained_now=False)
    facts = {seed: facts[seed] for seed in seeds}
    write_report(RESULTS / f"{args.name}.md", report(rows, best, header, facts))
    result = {"command": command, "config": args.config, "seeds": seeds, "task": TASK, "task_kwargs": TASK_KWARGS,
              "board": args.board, "best_baseline": best, "rows": rows, "training": {str(k): v for k, v in facts.items()}}
    write_result(args.name, result)
    plot_result(args.name, result, index, args.base_label)
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
