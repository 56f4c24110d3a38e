"""Oracle scores and evidence-split statistics of every offline dataset in ../shared/data.

For each dataset file: load it through its registered env, then play every instance with a
scripted oracle (each agent first states its evidence, then submits the gold answer in the
task's answer format; `optima_envs.test.share_evidence_then`). The oracle must score 1.0 on
EVERY instance: anything else is a loader, parser or metric bug, and is listed.

Also reported per dataset: instances loaded, rows skipped, mean evidence pieces per agent, the
share of instances where every agent holds at least one supporting piece, and the share where
one agent holds all of them (both among instances with supporting evidence; with two agents).

Run: python benchmarks/oracle_scores.py [--only hotpotqa] [--limit N]
Writes benchmarks/results/oracle_scores.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import optima_envs
from optima_envs.test import play, share_evidence_then

try:
    from benchmarks._results import write_result
except ImportError:  # run as a script from the benchmarks folder
    from _results import write_result

# The offline samples: $OPTIMA_SHARED_DATA, else the shared folder beside the repository.
SHARED = Path(os.environ.get("OPTIMA_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
TRIVIA = SHARED / "triviaqa" / "hf_datasets_dummy_rc"

# (label, env id, task kwargs): every offline file, in each format it comes in.
def _file(label: str, env_id: str, path: str, **kwargs: Any) -> tuple[str, str, dict[str, Any]]:
    return label, env_id, {"data_files": SHARED / path, **kwargs}


DATASETS: list[tuple[str, str, dict[str, Any]]] = [
    _file("hotpotqa/rpt/dev.jsonl (hub rows)", "hotpotqa-ia", "hotpotqa/rpt/dev.jsonl"),
    _file("hotpotqa/rpt/train.jsonl (hub rows)", "hotpotqa-ia", "hotpotqa/rpt/train.jsonl"),
    _file("hotpotqa/rpt/dev.original_format.json", "hotpotqa-ia", "hotpotqa/rpt/dev.original_format.json"),
    _file("hotpotqa/rpt/train.original_format.json", "hotpotqa-ia", "hotpotqa/rpt/train.original_format.json"),
    _file("hotpotqa/masarena/hotpotqa_validate.jsonl", "hotpotqa-ia", "hotpotqa/masarena/hotpotqa_validate.jsonl"),
    ("triviaqa dummy rc web dev (documents)", "triviaqa-ia", {"data_dir": TRIVIA, "domain": "web", "split": "dev"}),
    ("triviaqa dummy rc web train (documents)", "triviaqa-ia", {"data_dir": TRIVIA, "domain": "web", "split": "train"}),
    ("triviaqa dummy rc wikipedia dev+train", "triviaqa-ia",
     {"data_files": [TRIVIA / "qa/wikipedia-dev.json", TRIVIA / "qa/wikipedia-train.json"]}),
    ("triviaqa dummy rc web dev (descriptions)", "triviaqa-ia",
     {"data_dir": TRIVIA, "domain": "web", "evidence": "descriptions", "on_error": "skip"}),
    _file("triviaqa mandarjoshi90 sample", "triviaqa-ia", "triviaqa/mandarjoshi90_samples/triviaqa_sample.json",
          evidence_dir=TRIVIA / "evidence"),
    *[(f"cbt {subset} {split}", "cbt-ia", {"data_dir": SHARED / "cbt/hf_datasets_dummy", "subset": subset, "split": split})
      for subset in ("CN", "NE") for split in ("train", "validation", "test")],
    ("gsm8k/test.jsonl", "gsm8k-debate", {"data_dir": SHARED / "gsm8k"}),
    _file("math/MATH_test_5000.jsonl", "math-debate", "math/MATH_test_5000.jsonl"),
    _file("math/math500.jsonl", "math-debate", "math/math500.jsonl", subset="math500"),
    ("arc ARC-Challenge-Test.jsonl (original)", "arc-debate", {"data_dir": SHARED / "arc_challenge", "split": "test"}),
    ("arc ARC-Challenge-Dev.jsonl (original)", "arc-debate", {"data_dir": SHARED / "arc_challenge", "split": "dev"}),
    _file("arc basic_evaluator test (restructured)", "arc-debate", "arc_challenge/basic_evaluator/arc_challenge_test.jsonl"),
    _file("arc validation (hub rows)", "arc-debate", "arc_challenge/ARC-Challenge_validation.hf_format.jsonl"),
    *[(f"mmlu {split}", "mmlu-debate", {"data_dir": SHARED / "mmlu", "split": split})
      for split in ("test", "validation", "dev")],
]


def oracle_policies(env) -> dict[str, Any]:
    instance = env.state.instance
    fmt = "\\boxed{{{}}}" if env.task.answer_format.startswith("\\boxed") else "<A>{}</A>"
    return {agent: share_evidence_then(instance.gold_text, fmt) for agent in env.possible_agents}


def evaluate(label: str, env_id: str, kwargs: dict[str, Any], limit: int | None) -> dict[str, Any]:
    start = time.perf_counter()
    env = optima_envs.make(env_id, **kwargs)
    source = env.task.source
    count = len(source) if limit is None else min(limit, len(source))
    scores, failures, pieces = [], [], []
    each_has, one_has_all, with_support = 0, 0, 0
    for index in range(count):
        env.reset(seed=index, options={"index": index})
        piles = env.state.evidence
        pieces.extend(len(pile) for pile in piles)
        support = {e for e in env.state.instance.evidence if e.supporting}
        if support:
            with_support += 1
            each_has += all(any(e.supporting for e in pile) for pile in piles)
            one_has_all += any(support <= set(pile) for pile in piles)
        trace = play(env, oracle_policies(env), options={"index": index})
        info = trace[-1][4][env.possible_agents[0]]
        score = info["score"]
        scores.append(score if score is not None else 0.0)
        if score != 1.0:
            failures.append({"instance_id": env.state.instance.instance_id, "answer": info["answer"],
                             "gold": repr(info["gold"])[:120], "score": score, "error": info["score_error"]})
    family = env.task.family
    return {
        "dataset": label, "env_id": env_id, "origin": source.origin, "instances": count,
        "rows_skipped": len(source.skipped),
        "mean_evidence_per_agent": round(statistics.fmean(pieces), 2) if pieces else 0.0,
        "instances_with_supporting": with_support,
        "share_each_agent_has_supporting": round(each_has / with_support, 4) if with_support else None,
        "share_one_agent_has_all_supporting": round(one_has_all / with_support, 4) if with_support else None,
        "family": family,
        "oracle_score": round(statistics.fmean(scores), 6) if scores else None,
        "oracle_failures": len(failures), "failures": failures[:20],
        "seconds": round(time.perf_counter() - start, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=None, help="only datasets whose label contains this text")
    parser.add_argument("--limit", type=int, default=None, help="at most this many instances per dataset")
    args = parser.parse_args()
    rows = []
    header = (f"{'dataset':<44} {'n':>6} {'skip':>4} {'ev/agent':>8} {'each>=1':>7} {'one=all':>7} "
              f"{'oracle':>7} {'fail':>5} {'s':>6}")
    print(header)
    for label, env_id, kwargs in DATASETS:
        if args.only and args.only not in label:
            continue
        row = evaluate(label, env_id, kwargs, args.limit)
        rows.append(row)
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(f"{label:<44} {row['instances']:>6} {row['rows_skipped']:>4} {row['mean_evidence_per_agent']:>8.2f} "
              f"{fmt(row['share_each_agent_has_supporting']):>7} {fmt(row['share_one_agent_has_all_supporting']):>7} "
              f"{row['oracle_score']:>7.4f} {row['oracle_failures']:>5} {row['seconds']:>6.1f}", flush=True)
        for failure in row["failures"][:5]:
            print(f"    FAIL {failure}")
    total_failures = sum(r["oracle_failures"] for r in rows)
    print(f"{sum(r['instances'] for r in rows)} instances, {total_failures} oracle failures")
    if args.only is None and args.limit is None:
        path = write_result("oracle_scores", {"datasets": rows, "oracle_failures": total_failures})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
