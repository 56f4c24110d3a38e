"""What iSFT's selection keeps, split by where each sampled dialogue's answer lay.

On a task that re-deals the evidence for every sample, one training question's samples differ in
who holds the answer (`optima_envs.core.places`: with the first answering seat, `alone`; only with
its partner, `partner`; named in the question, `named`). For each iteration of each run named,
this script counts the right dialogues of each place (task score >= `selection.min_score`, and
informed where the run asks `informative_only`), the questions that have one, those whose every
answer was given by a seat that could know it (`optima_envs.core.places.answers_grounded`), and
how many selection keeps when it chooses the best dialogue per question, per question and place
(`selection.group_by`), and per question and place from grounded dialogues only
(`selection.grounded_only`), whatever the run itself used.

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

#: (column, group_by, grounded_only) of the selections compared.
SELECTIONS = (("kept_by_question", "question", False),
              ("kept_by_question_and_place", "question_and_place", False),
              ("kept_by_question_and_place_grounded", "question_and_place", True))


def iteration_places(run: Path, it: int) -> list[dict[str, Any]]:
    """Counts for iteration `it` of the run in `run`, one row per answer place: right dialogues,
    the questions with one, the right ones whose every answer was grounded, and the dialogues each
    of `SELECTIONS` keeps."""
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
    checked = selection_candidates(records, env, replace(s, group_by="question_and_place", grounded_only=True))
    bar = s.min_score if s.min_score is not None else float("-inf")
    right = [c for c in checked if c.reward is not None and c.score is not None and c.score >= bar
             and (c.informative or not s.informative_only)]
    kept = {column: select_best(selection_candidates(records, env, replace(s, group_by=group_by,
                                                                           grounded_only=grounded)),
                                keep_fraction=s.keep_fraction, reward_threshold=s.reward_threshold,
                                min_score=s.min_score, informative_only=s.informative_only,
                                grounded_only=grounded).selected
            for column, group_by, grounded in SELECTIONS}
    return [{"run": run.name, "iteration": it, "place": p, "dialogues": sum(1 for v in place.values() if v == p),
             "right": sum(1 for c in right if place[c.key] == p),
             "questions_with_right": len({c.group for c in right if place[c.key] == p}),
             "right_grounded": sum(1 for c in right if place[c.key] == p and c.grounded),
             **{column: sum(1 for c in chosen if place[c.key] == p) for column, chosen in kept.items()}}
            for p in PLACES]


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
        rows += [row for it in run_iterations(run) for row in iteration_places(run, it)]
    if not rows:
        raise SystemExit("none of the runs named has a finished scoring step")
    columns = list(rows[0])
    command = invocation("selection_places.py")
    publish_table(args.out, "What selection keeps, by where the answer lay",
                  f"Made by: `{command}`. Per iteration and answer place: sampled dialogues, right ones (score >= "
                  "the run's `min_score`, informed where the run asks `informative_only`), the questions with one, "
                  "the right ones whose every answer was grounded (`answers_grounded`), and the dialogues selection "
                  "keeps per question, per question and place, and per question and place from grounded ones only.",
                  columns, [[r[c] for c in columns] for r in rows], {"command": command, "rows": rows})

if __name__ == "__main__":
    main()
