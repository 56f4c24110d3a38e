"""vLLM on a CPU with its engine core and worker in the caller's process, against vLLM's own two
processes: start time and tokens/s.

Each run is a fresh Python process (so each pays the imports a user's first engine pays) that
starts a `VLLMPolicy` with `in_process=True` or `False`, plays the same held-out episodes (seeded
sampling at the iSFT experiment's temperature) and closes it. Modes are interleaved, so drift hits
both; the report gives, per mode, the medians over the repeats of the engine start (building
`VLLMPolicy`), the tokens/s of the episodes and the whole process's wall time.

    python benchmarks/vllm_in_process.py                    # 128 episodes, 3 repeats
    python benchmarks/vllm_in_process.py --episodes 32 --repeats 1

Writes `benchmarks/results/vllm_in_process.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, machine, write_report, write_result  # noqa: E402
from benchmarks.vllm_block_size import add_workload_arguments, play  # noqa: E402

NAME = "vllm_in_process"
MODES = {"one process": True, "vLLM's processes": False}


def run_once(args: argparse.Namespace, in_process: bool) -> dict[str, Any]:
    """One run in a fresh process; its timings."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--child", str(out), "--in-process",
                   str(in_process), "--model", args.model, "--env", args.env, "--episodes", str(args.episodes),
                   "--dtype", args.dtype, "--temperature", str(args.temperature), "--max-new-tokens",
                   str(args.max_new_tokens), "--kv-cache-gib", str(args.kv_cache_gib)]
        begin = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - begin
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the {'one-process' if in_process else 'multi-process'} run failed "
                               f"(exit {done.returncode}); its last output:\n{done.stderr[-3000:]}")
        return {**json.loads(out.read_text()), "wall_s": wall}


def child(args: argparse.Namespace) -> None:
    """The run itself (in the fresh process): start, play, close, write the timings."""
    from optima_agents.models.dtypes import resolve_dtype

    in_process = args.in_process == "True"
    out, _ = play(args.model, args.env, {"kv_cache_gib": args.kv_cache_gib, "in_process": in_process},
                  episodes=args.episodes, dtype=resolve_dtype(args.dtype, "cpu"), temperature=args.temperature,
                  max_new_tokens=args.max_new_tokens)
    Path(args.child).write_text(json.dumps(out))


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per mode: the medians and every run's figures."""
    return {mode: {"start_s_median": statistics.median(r["start_s"] for r in rs),
                   "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in rs),
                   "wall_s_median": statistics.median(r["wall_s"] for r in rs),
                   "start_s": [r["start_s"] for r in rs], "tokens_per_s": [r["tokens_per_s"] for r in rs],
                   "wall_s": [r["wall_s"] for r in rs], "score": [r["score"] for r in rs],
                   "tokens": [r["tokens"] for r in rs]}
            for mode, rs in runs.items()}


def markdown(payload: dict[str, Any]) -> str:
    results = payload["results"]
    base = results["vLLM's processes"]
    lines = ["# vLLM on a CPU: engine core and worker in the caller's process", "",
             f"Made by: `{payload['command']}`. {payload['episodes']} held-out `{payload['env']}` episodes, "
             f"{payload['model']} in {payload['dtype']}, temperature {payload['temperature']} (seeded), "
             f"{payload['max_new_tokens']} new tokens per turn, 32-token KV-cache blocks; each run a fresh Python "
             f"process, modes interleaved, median of {payload['repeats']}; CPU {payload['machine']['cpu_kind']}, "
             f"{payload['machine']['cpus']} cores.", "",
             "| mode | engine start (s) | tokens/s | every run (tokens/s) | process wall (s) | vs vLLM's processes "
             "(tokens/s, start) |", "|---|---|---|---|---|---|"]
    for mode, r in results.items():
        runs = ", ".join(f"{t:.0f}" for t in r["tokens_per_s"])
        ratio = (f"{r['tokens_per_s_median'] / base['tokens_per_s_median']:.2f}x, "
                 f"{r['start_s_median'] / base['start_s_median']:.2f}x")
        lines.append(f"| {mode} | {r['start_s_median']:.1f} | {r['tokens_per_s_median']:.1f} | {runs} | "
                     f"{r['wall_s_median']:.1f} | {ratio} |")
    lines += ["", "Engine start: building the `VLLMPolicy` (vLLM's imports in the caller excluded, its other "
              "processes' included). Process wall: the whole run, Python's start to exit. Sampled dialogues differ "
              "between runs where bf16 batching differs, so the token counts are close, not equal: "
              + "; ".join(f"{mode}: {', '.join(str(t) for t in r['tokens'])} tokens, mean score "
                          f"{', '.join(f'{s:.3f}' for s in r['score'])}" for mode, r in results.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_workload_arguments(parser, NAME)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--in-process", choices=["True", "False"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.repeats < 1:
        parser.error(f"--episodes and --repeats must be at least 1, got {args.episodes} and {args.repeats}")
    if args.child:
        child(args)
        return

    from optima_agents.models.dtypes import resolve_dtype

    args.dtype = resolve_dtype(args.dtype, "cpu")
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for rep in range(args.repeats):
        for mode, in_process in MODES.items():
            out = run_once(args, in_process)
            runs[mode].append(out)
            print(f"repeat {rep}: {mode}: start {out['start_s']:.1f} s, {out['tokens_per_s']:.1f} tokens/s, "
                  f"wall {out['wall_s']:.1f} s", flush=True)
    payload = {"command": invocation("vllm_in_process.py", argv), "model": args.model, "env": args.env,
               "episodes": args.episodes, "repeats": args.repeats, "dtype": args.dtype,
               "temperature": args.temperature, "max_new_tokens": args.max_new_tokens, "results": summarise(runs)}
    write_result(args.name, payload)
    write_report(RESULTS / f"{args.name}.md", markdown({**payload, "machine": machine()}))
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
