"""Env overhead per turn: microseconds spent inside `step` with a scripted policy.

Target: median under 200 us per turn, negligible next to a model call.
Run: python benchmarks/env_overhead.py [--episodes 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import optima_envs
from optima_envs.test import random_messages

try:
    from benchmarks._results import write_result
except ImportError:  # run as a script from the benchmarks folder
    from _results import write_result


def measure(env_id: str, episodes: int, full_length: bool) -> dict:
    """full_length: messages never carry an answer, so every episode runs all max_turns
    (the longest transcripts); otherwise random Unicode with occasional answers."""
    env = optima_envs.make(env_id)
    messages = random_messages(0, 64, max_chars=120)
    if full_length:
        messages = [m.replace("<A>", "").replace("\\boxed", "") + " some words of a message" for m in messages]
    per_turn_us, reset_us = [], []
    for episode in range(episodes):
        start = time.perf_counter_ns()
        env.reset(seed=episode)
        reset_us.append((time.perf_counter_ns() - start) / 1e3)
        turn = 0
        while env.agents:
            action = {env.current_speaker: messages[(episode + turn) % len(messages)]}
            start = time.perf_counter_ns()
            env.step(action)
            per_turn_us.append((time.perf_counter_ns() - start) / 1e3)
            turn += 1
    return {
        "env_id": env_id, "workload": "full_length" if full_length else "random", "episodes": episodes, "turns": len(per_turn_us),
        "step_us_median": round(statistics.median(per_turn_us), 1),
        "step_us_p90": round(statistics.quantiles(per_turn_us, n=10)[-1], 1),
        "reset_us_median": round(statistics.median(reset_us), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=2000)
    args = parser.parse_args()
    rows = [measure(env_id, args.episodes, full) for env_id in ("synth-hop-ia", "synth-arith-debate")
            for full in (False, True)]
    for row in rows:
        print(f"{row['env_id']:<22} {row['workload']:<12} step median {row['step_us_median']:>7} us  p90 {row['step_us_p90']:>7} us  "
              f"reset median {row['reset_us_median']:>7} us  ({row['turns']} turns)")
    path = write_result("env_overhead", {"target_step_us": 200, "results": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
