"""Reliability under faults and hostile input: tried / held / failed per probe.

(a) fuzzed env steps over every registered env (dataset envs on optima_envs.test's fixtures);
(b) the rollout engine against fault-injecting OpenAI-compatible servers on 127.0.0.1 (errors,
    429 with Retry-After, hangs, connection resets, malformed and wrong-typed JSON, a dead URL);
(c) damaged dataset files and damaged episode buffers; records a buffer cannot store, and
    folders that hold no buffer;
(d) iSFT, iDPO and iSFT-DPO killed with SIGKILL at random points, resumed with the same call,
    and compared with an uninterrupted run;
(e) math scoring on a machine made busy on purpose (CPU burners, workers crowded among them).

"held" means the contract was kept (a clear typed error, or a correct result); "failed" counts
everything else, with the first examples in the JSON. Every probe must report zero failures.
Only 127.0.0.1 is ever contacted; no model is downloaded (probe (d) uses a tiny random Llama
with the embedded model's tokenizer).

Run from the repository root:
    python -m benchmarks.reliability [--kills 20] [--quick] [--only a,b,c,d,e]
Writes benchmarks/results/reliability.md and reliability.json; a `--quick` run, or one of only
some probes, writes reliability_quick_<probes>.* or reliability_<probes>.* instead, so that it
never replaces the full result.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks._results import RESULTS, write_report, write_result
from benchmarks.reliability import damage, env, resume, scoring, server
from benchmarks.reliability.tally import Tally

#: The command that runs this benchmark from the repository root, as its report records it.
COMMAND = "python -m benchmarks.reliability"

PROBES = {"a": "fuzzed env steps", "b": "fault-injecting servers", "c": "damaged data and buffers",
          "d": "kill and resume", "e": "math scoring under load"}


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The trial counts: the full run, or `--quick` (a few minutes); `--kills` wins either way."""
    quick = {"fuzz_steps": 2_000, "episodes": 24, "data_trials": 7, "flips": 20, "kills": 2, "math_pairs": 6}
    full = {"fuzz_steps": 10_000, "episodes": 64, "data_trials": 14, "flips": 60, "kills": 20, "math_pairs": 19}
    chosen = dict(quick if args.quick else full)
    if args.kills is not None:
        chosen["kills"] = args.kills
    chosen.update(fault_rate=args.fault_rate, seed=args.seed)
    return chosen


def run_probes(only: str, s: dict[str, Any], workdir: Path) -> tuple[list[Tally], dict[str, float]]:
    """Every probe asked for, timed."""
    jobs: dict[str, Callable[[], list[Tally]]] = {
        "a": lambda: env.run(s["fuzz_steps"], s["seed"]),
        "b": lambda: server.run(s["episodes"], s["fault_rate"], s["seed"], workdir),
        "c": lambda: damage.run(s["data_trials"], s["flips"], s["seed"], workdir),
        "d": lambda: resume.run(s["kills"], s["seed"], workdir / "resume"),
        "e": lambda: scoring.run(s["math_pairs"]),
    }
    rows: list[Tally] = []
    seconds: dict[str, float] = {}
    for probe in only:
        start = time.perf_counter()
        print(f"({probe}) {PROBES[probe]} ...", flush=True)
        done = jobs[probe]()
        seconds[probe] = round(time.perf_counter() - start, 1)
        rows += done
        print(f"    {sum(r.tried for r in done)} tried, {sum(r.failed for r in done)} failed, {seconds[probe]} s",
              flush=True)
    return rows, seconds


def result_name(only: str, quick: bool) -> str:
    """The result's file name: "reliability" for the full run of every probe; a quick or partial
    run gets its own, so that it never replaces the full result."""
    if quick or set(only) != set(PROBES):
        return "reliability" + ("_quick" if quick else "") + "_" + "".join(sorted(set(only)))
    return "reliability"


def markdown(rows: list[Tally], seconds: dict[str, float], s: dict[str, Any], wall_s: float) -> str:
    shown = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s.items())
    only = "" if set(seconds) == set(PROBES) else f" --only {''.join(seconds)}"
    lines = ["# Reliability under faults and hostile input", "",
             f"`{COMMAND}{only}` ({shown}); wall time {wall_s:.0f} s "
             f"({', '.join(f'({p}) {t:.0f} s' for p, t in seconds.items())}) on {os.cpu_count()} CPUs.", "",
             "Held: the contract was kept (a correct result, or a clear typed error naming what is wrong). "
             "Failed: anything else. What each probe checks is in the docstrings of "
             "`benchmarks/reliability/*.py`.", "",
             "| probe | case | tried | held | failed | notes |", "|---|---|---:|---:|---:|---|"]
    for probe in seconds:
        mine = [r for r in rows if r.probe == probe]
        for r in mine:
            notes = ", ".join(f"{k} {v}" for k, v in r.notes.items() if k != "damages")
            lines.append(f"| ({probe}) | {r.case} | {r.tried} | {r.held} | {r.failed} | {notes} |")
        lines.append(f"| **({probe})** | **{PROBES[probe]}: all** | **{sum(r.tried for r in mine)}** | "
                     f"**{sum(r.held for r in mine)}** | **{sum(r.failed for r in mine)}** | {seconds[probe]:.0f} s |")
    failures = [f"- ({r.probe}) {r.case}: {e}" for r in rows for e in r.examples]
    lines += ["", "Failures:" if failures else "No failures.", *failures, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=None, help="kill points per training loop (full: 20, quick: 2)")
    parser.add_argument("--quick", action="store_true", help="fewer trials of every probe (a few minutes)")
    parser.add_argument("--only", default="".join(PROBES), help="which probes, e.g. --only ab")
    parser.add_argument("--fault-rate", type=float, default=0.4, help="share of server replies that are faults")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    only = "".join(p for p in args.only if p in PROBES)
    s = settings(args)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="optima-reliability-") as tmp:
        rows, seconds = run_probes(only, s, Path(tmp))
    wall_s = time.perf_counter() - start
    failed = sum(r.failed for r in rows)
    name = result_name(only, args.quick)
    write_report(RESULTS / f"{name}.md", markdown(rows, seconds, s, wall_s))
    path = write_result(name, {"settings": s, "wall_s": round(wall_s, 1), "probe_seconds": seconds,
                               "failed": failed, "rows": [r.to_dict() for r in rows]})
    print(markdown(rows, seconds, s, wall_s))
    print(f"wrote {path} and {RESULTS / f'{name}.md'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
