"""What iSFT's selection keeps, split by where each sampled dialogue's answer lay.

On a task that re-deals the evidence for every sample, one training question's samples differ in
who holds the answer (`optima_envs.core.places`: with the first answering seat, `alone`; only with
its partner, `partner`; named in the question, `named`). For each iteration of each run named,
this script counts the right dialogues of each place (task score >= `selection.min_score`, and
informed where the run asks `informative_only`), the questions that have one, and how many of them
selection keeps when it chooses the best dialogue per question and per question and place
(`selection.group_by`), whatever the run itself used.

    python benchmarks/selection_places.py runs/isft/synth_hop_distractors_seed1 ... \
        --out selection_places_synth_hop_distractors

Writes `benchmarks/results/<out>.json` and `.md`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import invocation, publish_table  # noqa: E402

GROUPINGS = ("question", "question_and_place")


def iteration_places(run: Path, it: int) -> dict[str, Any]:
    """Counts for iteration `it` of the run in `run`: per place, right dialogues, questions with
    one, and the dialogues selection keeps under each grouping."""
    import yaml

    import optima_envs
    from optima_envs.core.places import PLACES
    from optima_train.config.io import from_dict
    from optima_train.informative import record_place
    from optima_train.isft import ISFTConfig
    from optima_train.isft.isft_trainer import selection_candidates
    from optima_train.run_dir import RunDir
    from optima_train.sampled_dialogues import scored_records
    from optima_train.selection import select_best

    cfg = from_dict(ISFTConfig, yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")))
    records = scored_records(RunDir(run), it)
    env = optima_envs.make(cfg.task.env_id, **cfg.task.train_kwargs())
    s = cfg.selection
    place = {pos: record_place(env, rec) for pos, rec in enumerate(records)}
    checked = selection_candidates(records, env, replace(s, group_by="question_and_place"))
    right = [c for c in checked if c.reward is not None and c.score is not None
             and c.score >= (s.min_score if s.min_score is not None else float("-inf"))
             and (c.informative or not s.informative_only)]
    row: dict[str, Any] = {"run": run.name, "iteration": it, "dialogues": len(records),
                           "group_by_used": s.group_by}
    for p in PLACES:
        row[f"right_{p}"] = sum(1 for c in right if place[c.key] == p)
        row[f"questions_with_right_{p}"] = len({c.group for c in right if place[c.key] == p})
    for grouping in GROUPINGS:
        kept = select_best(selection_candidates(records, env, replace(s, group_by=grouping)),
                           keep_fraction=s.keep_fraction, reward_threshold=s.reward_threshold,
                           min_score=s.min_score, informative_only=s.informative_only).selected
        for p in PLACES:
            row[f"kept_{p}_by_{grouping}"] = sum(1 for c in kept if place[c.key] == p)
    return row


def run_iterations(run: Path) -> list[int]:
    """The iterations of `run` whose scoring step finished."""
    from optima_train.run_dir import RunDir

    run_dir, its, it = RunDir(run), [], 0
    while run_dir.is_done(it, "scoring"):
        its.append(it)
        it += 1
    return its


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="iSFT run folders (each with its config.yaml)")
    parser.add_argument("--out", default="selection_places")
    args = parser.parse_args()
    rows = []
    for run in map(Path, args.runs):
        if not (run / "config.yaml").is_file():
            raise SystemExit(f"{run} holds no config.yaml: name an iSFT run folder (e.g. runs/isft/<name>)")
        rows += [iteration_places(run, it) for it in run_iterations(run)]
    if not rows:
        raise SystemExit("none of the runs named has a finished scoring step")
    columns = [k for k in rows[0] if k not in ("run", "iteration", "dialogues", "group_by_used")]
    command = invocation("selection_places.py")
    publish_table(args.out, "What selection keeps, by where the answer lay",
                  f"Made by: `{command}`. Right dialogues (score >= the run's `min_score`, informed where the run "
                  "asks `informative_only`) per answer place, the questions with one, and the dialogues selection "
                  "keeps per question (`by_question`) and per question and place (`by_question_and_place`).",
                  ["run", "iteration", "dialogues", "group_by used", *columns],
                  [[r["run"], r["iteration"], r["dialogues"], r["group_by_used"], *(r[c] for c in columns)]
                   for r in rows],
                  {"command": command, "iterations": rows})

if __name__ == "__main__":
    main()
