"""Training where talking is the task: `referential-game` runs (iSFT with plain or informative-only
selection, iDPO and GRPO continuing from a trained pair) collected from their run folders into one
result.

    python benchmarks/game_training.py \\
        --run plain:0=runs/isft/referential_experiment \\
        --run informative:0=runs/isft/referential_informative \\
        --run informative:1=runs/isft/referential_informative_seed1 \\
        --run informative:2=runs/isft/referential_informative_seed2 \\
        --eval shipped=runs/eval/ref_shipped.json

Each `--run VARIANT:SEED=DIR` is one finished or partly finished `optima train isft`, `optima
train idpo` or `optima train grpo` run (its `summary.json`, and per iteration `selection/selection.json` or
`search/DONE.json`); iterations a run has not reached are left out of that seed, and the report
says how many seeds each mean has. An iDPO run's baseline evaluation is its starting pair, shown
as that variant's start, never as the untrained pair. `--eval
LABEL=FILE` adds an `optima eval` result (with `--diagnostics`: the no-talk ceiling and the
message ablations) as a row. The untrained pair's figures are each run's baseline evaluation
(`eval.baseline`), read from the first run that has one.

`--previous RESULT_JSON` starts from an earlier result of this script: its runs, evaluations and
untrained figures are kept, so seeds made on another machine (whose run folders are not here)
join the ones collected now; a `--run` or `--eval` with the same variant and seed, or label,
replaces the kept one.

Writes `benchmarks/results/<name>.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, machine, write_report, write_result  # noqa: E402


def chance(min_candidates: int, max_candidates: int) -> float:
    """The score of a random pick when the number of objects is uniform in [min, max]."""
    counts = range(min_candidates, max_candidates + 1)
    return sum(1 / k for k in counts) / len(counts)


def read_run(folder: Path) -> dict[str, Any]:
    """A run's iterations (held-out score with its interval, tokens, what selection kept and
    refused) and its baseline evaluation, if it made one."""
    summary = json.loads((folder / "summary.json").read_text())
    iterations = []
    method = "isft"
    for row in summary.get("iterations", []):
        stage = folder / f"iter_{row['iteration']:03d}"
        selection = stage / "selection" / "selection.json"
        stats = json.loads(selection.read_text()).get("stats", {}) if selection.is_file() else {}
        search = stage / "search" / "DONE.json"
        found = json.loads(search.read_text()) if search.is_file() else {}
        grpo = grpo_facts(row)
        method = "idpo" if found else "grpo" if grpo else method
        picks = pick_counts(stage)
        iterations.append({"iteration": row["iteration"], "score": row["heldout_score"],
                           "score_ci": row["heldout_score_ci"], "tokens": row["heldout_tokens"],
                           "kept_dialogues": row.get("kept_dialogues"), "kept_examples": row.get("kept_examples"),
                           "candidates": stats.get("candidates"), "uninformative": stats.get("uninformative"),
                           "trees": found.get("trees"), "kept_pairs": found.get("kept_pairs"),
                           **grpo, "seconds": row.get("seconds"), **picks})
    baseline = summary.get("baseline")
    out: dict[str, Any] = {"method": method, "iterations": iterations, "learning_rate": learning_rate(folder)}
    if baseline:
        out["baseline"] = {"score": baseline["score"]["mean"], "tokens": baseline["tokens"]["mean"],
                           "episodes": baseline["episodes"], "env_kwargs": baseline["env_kwargs"],
                           "model": Path(str(baseline.get("model", ""))).name}  # its name: no machine path
    return out


def grpo_facts(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a GRPO iteration trained on: its groups with a spread of rewards (the others have no
    advantage), the sequences those gave, and how far the update moved from the sampler (the
    clipped share of loss tokens, the KL to the start). Empty for other methods."""
    if "zero_variance_groups" not in row:
        return {}
    groups, flat = row.get("groups"), row.get("zero_variance_groups")
    return {"groups": groups, "learning_groups": None if groups is None or flat is None else groups - flat,
            "sequences": row.get("sequences"), "clip_fraction": row.get("clip_fraction"), "kl": row.get("kl")}


def learning_rate(folder: Path) -> float | None:
    """The training learning rate the run's saved config holds (None for a run saved without one):
    a setting changed with `--set` is seen only here, not in the config file the run names."""
    config = folder / "config.yaml"
    if not config.is_file():
        return None
    rate = (yaml.safe_load(config.read_text()).get("train") or {}).get("learning_rate")
    return None if rate is None else float(rate)


def pick_counts(stage: Path) -> dict[str, dict[str, dict[str, int]]]:
    """Which letters a stage's DPO pairs chose and rejected (all qualifying pairs, and the kept
    ones), and which its held-out evaluation picked: a listener that learns a letter prior
    instead of reading shows here. Empty for what the stage has not written."""
    import pyarrow.parquet as pq

    out: dict[str, dict[str, dict[str, int]]] = {}
    pairs_file = stage / "search" / "pairs.parquet"
    if pairs_file.is_file():
        pairs = [p for p in pq.read_table(pairs_file).to_pylist() if p["speaker"] != "alice"]
        for scope, rows in (("qualifying", pairs), ("kept", [p for p in pairs if str(p["kept"]) == "True"])):
            for side in ("chosen", "rejected"):
                out.setdefault("pair_picks", {})[f"{scope} {side}"] = _letters(p[side] for p in rows)
    sft_file = stage / "selection" / "sft.parquet"
    if sft_file.is_file():  # an iSFT stage: the listener's kept picks (its rows' last reply)
        rows = [r for r in pq.read_table(sft_file).to_pylist() if r["agent"] != "alice"]
        out["sft_picks"] = _letters(r["messages"][-1]["content"] for r in rows)
    parts = sorted((stage / "evaluation" / "episodes").glob("part-*.parquet"))
    if parts:
        table = pq.read_table(parts).to_pylist()
        out["heldout_picks"] = {"picked": _letters(f"<A>{r['final_answer']}</A>" for r in table),
                                "right": _letters(f"<A>{r['final_answer']}</A>" for r in table if r["score"] == 1.0),
                                "targets": _letters(f"<A>{json.loads(r['gold'])}</A>" for r in table)}
    return out


def right_of_targets(heldout: Mapping[str, Mapping[str, int]]) -> str:
    """"A:33/33 B:13/43 ...": right picks of the games whose target has each letter ("" when the
    stage was collected before targets were counted)."""
    right = heldout.get("right") or {}
    return " ".join(f"{k}:{right.get(k, 0)}/{n}" for k, n in (heldout.get("targets") or {}).items())


def _letters(replies: Any) -> dict[str, int]:
    """Counts of the picked letter of `<A>X</A>` replies ("other" for anything else)."""
    counts: dict[str, int] = {}
    for reply in replies:
        text = str(reply).strip()
        key = text[3] if len(text) == 8 and text.startswith("<A>") and text.endswith("</A>") else "other"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def previous_runs(path: Path) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, Any], dict[str, Any], list[str]]:
    """The runs (by variant and seed), evaluations, untrained figures and commands of an earlier result."""
    if not path.is_file():
        raise SystemExit(f"--previous: no result file at {path}; give a JSON this script wrote "
                         "(benchmarks/results/<name>.json)")
    payload = json.loads(path.read_text())
    runs = {variant: {int(seed): run for seed, run in seeds.items()} for variant, seeds in payload["runs"].items()}
    commands = list(dict.fromkeys([*payload.get("earlier_commands", []), payload["command"]]))  # a rerun adds none
    return runs, dict(payload.get("evals") or {}), dict(payload.get("untrained") or {}), commands


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Mean, sample standard deviation (0 for one value), range and count."""
    return {"mean": statistics.fmean(values), "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def aggregate(runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Per variant and iteration: score and tokens over the seeds that reached it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for variant, seeds in runs.items():
        depth = max((len(r["iterations"]) for r in seeds.values()), default=0)
        rows = []
        for it in range(depth):
            reached = {s: r["iterations"][it] for s, r in sorted(seeds.items()) if len(r["iterations"]) > it}
            rows.append({"iteration": it, "seeds": sorted(reached),
                         "score": spread([x["score"] for x in reached.values()]),
                         "tokens": spread([x["tokens"] for x in reached.values()])})
        out[variant] = rows
    return out


def report(payload: dict[str, Any]) -> str:
    base, odds = payload["untrained"], payload["chance"]
    lines = [f"# Training on `referential-game`: iSFT (plain, informative-only, enumerated picks), iDPO and GRPO", "",
             f"Command: `{payload['command']}`", "",
             *[f"Runs kept from an earlier collection: `{c}`" for c in payload.get("earlier_commands", [])],
             *([""] if payload.get("earlier_commands") else []),
             f"Held-out set: {base.get('episodes', '?')} `referential-game` games, {base.get('env_kwargs', {})}, "
             f"greedy, reset seeds 1,000,000 + i; collected on a {payload.get('machine_cpu', '?')} CPU. Untrained pair (the embedded SmolLM2-135M): "
             f"**{base.get('score', float('nan')):.3f}** at {base.get('tokens', float('nan')):.1f} tokens per game; "
             f"a random pick scores {odds:.3f}; the listener alone (no talk) can only guess, so the no-talk "
             "ceiling is chance.", "",
             "## Mean over run seeds, per iteration", "",
             "| variant | iteration | seeds | held-out score (mean ± sd) [min, max] | tokens / game |",
             "|---|---|---|---|---|"]
    for variant, rows in payload["aggregate"].items():
        for row in rows:
            s, t = row["score"], row["tokens"]
            lines.append(f"| {variant} | {row['iteration']} | {', '.join(map(str, row['seeds']))} | "
                         f"{s['mean']:.3f} ± {s['stdev']:.3f} [{s['min']:.3f}, {s['max']:.3f}] | {t['mean']:.1f} |")
    lines += ["", "## Every run", "",
              "| variant | seed | iteration | held-out score [95% CI] | tokens | "
              "kept (dialogues; DPO pairs of trees; GRPO sequences of groups with a spread) | "
              "refused as uninformative (of sampled) | learning rate |", "|---|---|---|---|---|---|---|---|"]
    for variant, seeds in payload["runs"].items():
        for seed, run in sorted(seeds.items(), key=lambda kv: int(kv[0])):
            for it in run["iterations"]:
                lo, hi = it["score_ci"]
                refused = "-" if it.get("uninformative") is None else f"{it['uninformative']} of {it['candidates']}"
                kept = (f"{it['kept_pairs']} pairs of {it['trees']} trees" if it.get("kept_pairs") is not None
                        else f"{it['sequences']} sequences of {it['learning_groups']}/{it['groups']} groups (GRPO)"
                        if it.get("groups") is not None else it.get("kept_dialogues"))
                rate = "-" if run.get("learning_rate") is None else f"{run['learning_rate']:g}"
                lines.append(f"| {variant} | {seed} | {it['iteration']} | {it['score']:.3f} [{lo:.3f}, {hi:.3f}] | "
                             f"{it['tokens']:.1f} | {kept} | {refused} | {rate} |")
    picked = [(variant, seed, it) for variant, seeds in payload["runs"].items()
              for seed, run in sorted(seeds.items(), key=lambda kv: int(kv[0])) for it in run["iterations"]
              if it.get("pair_picks") or (it.get("sft_picks") and variant.startswith("isft-enumerated"))
              or (it.get("groups") is not None and it.get("heldout_picks"))]
    if picked:
        lines += ["", "## Which letters the training picks and the held-out picks hold", "",
                  "The listener's pick letters: in the DPO pairs (every qualifying pair, and the kept ones) or the "
                  "iSFT rows (the listener's kept picks; no rejected side), and in the 200 held-out games after "
                  "training (picked, and picked right; right of the games with that target letter, which says "
                  "where the listener reads the message and where it guesses).", "",
                  "| variant | seed | iteration | pairs or rows: chosen (kept) | pairs: rejected (kept) | chosen (all qualifying) | "
                  "held-out: picked | held-out: right | held-out: right of targets |", "|---|---|---|---|---|---|---|---|---|"]
        for variant, seed, it in picked:
            pp, hp = it.get("pair_picks") or {}, it.get("heldout_picks", {})
            fmt = lambda d: " ".join(f"{k}:{v}" for k, v in (d or {}).items()) if d else "-"  # noqa: E731
            lines.append(f"| {variant} | {seed} | {it['iteration']} | {fmt(pp.get('kept chosen') or it.get('sft_picks'))} | "
                         f"{fmt(pp.get('kept rejected'))} | {fmt(pp.get('qualifying chosen') or it.get('sft_picks'))} | "
                         f"{fmt(hp.get('picked'))} | {fmt(hp.get('right'))} | {right_of_targets(hp)} |")
    if payload.get("evals"):
        lines += ["", "## Evaluations with diagnostics", "",
                  "| model | score [95% CI] | tokens | no-talk (solo) | comm gain, partner's messages removed [95% CI] | "
                  "comm gain, swapped for another game's [95% CI] |", "|---|---|---|---|---|---|"]
        for label, result in payload["evals"].items():
            lines.append(_eval_row(label, result))
    starts = {v: r["baseline"] for v, seeds in payload["runs"].items() for r in seeds.values()
              if r.get("method") == "idpo" and r.get("baseline")}
    for variant, start in sorted(starts.items()):
        lines += ["", f"`{variant}` starts from `{start.get('model', '?')}`, which scores "
                      f"{start['score']:.3f} at {start['tokens']:.1f} tokens on the same held-out games."]
    lines += ["", "Every iSFT run used `configs/isft/referential_experiment.yaml` (plain) or "
              "`configs/isft/referential_informative.yaml` (`selection.informative_only: true`), every iDPO run "
              "one of `configs/idpo/referential_listener.yaml` (sampled picks), `referential_enumerated.yaml` "
              "(`mcts.enumerate_answers`, every pair kept), `referential_hard_negatives.yaml` (the same, rejecting the "
              "best-valued wrong pick: `pairs.rejected: hardest`) and `referential_all_negatives.yaml` (every wrong "
              "pick rejected once: `pairs.rejected: all`, 64 trees), all from the shipped pair; `isft-enumerated` is "
              "`configs/isft/referential_enumerated.yaml` (one iteration from the shipped pair on training games "
              "0-511, every pick scored: `generation.enumerate_answers`, listener rows only), and "
              "`isft-enumerated-roundN` the same config from round N-1's checkpoint on the next 512 fresh games "
              "(round 2: games 512-1023, round 3: 1024-1535, round 4: 1536-2047; "
              "`--set model.name=<round N-1 checkpoint> --set task.train_first_index=512*(N-1)`); "
              "`isft-enumerated-lr1e3-roundN` continues the same chain (round 5 from round 4's checkpoint on games "
              "2048-2559, round 6 on 2560-3071) with `--set train.learning_rate=1.0e-3` in place of the config's "
              "2e-4 (the learning rate column: read from each run's saved config, `-` for runs collected before it "
              "was recorded). `grpo-from-round4-lrX` is `configs/grpo/referential.yaml` (multi-agent GRPO: both "
              "agents' turns trained, G=8 dialogues per game at temperature 1.0, the Optima reward with its token and "
              "readability terms) from each seed's round-4 checkpoint on training games 2048-2111 (`--set "
              "task.train_questions=64 --set task.train_first_index=2048 --set train.learning_rate=X --set "
              "run.iterations=1`): 512 sampled dialogues, as many as one enumerated iSFT round samples, so it "
              "compares with `isft-enumerated-lr1e3-round5`. All with "
              "`--set run.seed=SEED`; seed 0's iSFT runs also made the untrained baseline evaluation. The run seed "
              "changes the sampling, not the training games: iteration 0 of every iDPO run searched the same first "
              "training games (instances 0-127, or 0-63)."]
    return "\n".join(lines) + "\n"


def _eval_row(label: str, result: dict[str, Any]) -> str:
    score = result["score"]
    row = f"| {label} | {score['mean']:.3f} [{score['low']:.3f}, {score['high']:.3f}] | {result['tokens']['mean']:.1f} |"
    found = result.get("diagnostics") or {}
    solo = found.get("no_talk")
    row += f" {solo['mean']:.3f} [{solo['low']:.3f}, {solo['high']:.3f}] |" if isinstance(solo, dict) else " - |"
    for mode in ("remove", "swap"):
        gain = (found.get("comm_gain") or {}).get(mode)
        row += (f" {gain['mean']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}] |" if isinstance(gain, dict)
                else " - |")
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", default=[], help="VARIANT:SEED=RUN_DIR (repeatable).")
    parser.add_argument("--eval", action="append", default=[], help="LABEL=EVAL_JSON (repeatable).")
    parser.add_argument("--previous", type=Path, help="An earlier result JSON of this script whose runs to keep.")
    parser.add_argument("--name", default="isft_referential", help="Result file name under benchmarks/results/.")
    args = parser.parse_args(argv)
    runs, evals, untrained, earlier = previous_runs(ROOT / args.previous) if args.previous else ({}, {}, {}, [])
    for item in args.run:
        label, _, folder = item.partition("=")
        variant, _, seed = label.partition(":")
        if not folder or not seed.isdigit():
            parser.error(f"--run takes VARIANT:SEED=RUN_DIR, got {item!r}")
        run = read_run(ROOT / folder)
        runs.setdefault(variant, {})[int(seed)] = run
        if run["method"] == "isft":
            untrained = untrained or run.get("baseline", {})
    for item in args.eval:
        label, _, path = item.partition("=")
        evals[label] = json.loads((ROOT / path).read_text())
    kwargs = untrained.get("env_kwargs", {"min_candidates": 4, "max_candidates": 6})
    command = invocation("game_training.py")
    payload = {"command": command, "earlier_commands": [c for c in earlier if c != command], "untrained": untrained,
               "machine_cpu": machine()["cpu_kind"],
               "chance": chance(kwargs.get("min_candidates", 4), kwargs.get("max_candidates", 6)),
               "aggregate": aggregate(runs), "runs": {v: {str(s): r for s, r in seeds.items()} for v, seeds in runs.items()},
               "evals": evals}
    write_result(args.name, payload)
    write_report(RESULTS / f"{args.name}.md", report(payload))
    print(report(payload))


if __name__ == "__main__":
    main()
