"""Serving a trained model on llama.cpp: merge-and-convert against a GGUF LoRA over the base.

    python benchmarks/llamacpp_lora.py                       # the shipped referential adapter
    python benchmarks/llamacpp_lora.py --prompts 64 --repeats 3

A trained model is a base plus a LoRA update. llama.cpp can run it two ways:
- **merged**: the update merged into the weights (`convert.merge_adapter`) and the merged folder
  exported to an F16 GGUF (`gguf_export`), once per training iteration;
- **lora**: the base's F16 GGUF (exported once) with the adapter converted to a GGUF LoRA
  (`gguf_lora`) and applied at run time, which adds `B @ A` products to every adapted layer of
  every step.
Each is measured on the same workload: the speaker's first turn of `--prompts` held-out
referential-game games (validation split, index i with reset seed 1,000,000 + i), greedy, up
to `--max-new-tokens` tokens, all decoded together as parallel sequences. Reported: the
preparation each needs per training iteration (seconds, median of `--repeats` after a warm-up), generation
tokens/s (median of `--repeats`, the two paths interleaved so machine noise falls on both),
how many greedy replies are identical between the two, and each path's share of this machine's
ceiling (`machine_ceiling*.json` of the same CPU kind: the base model's linear-layer FLOPs of every
generated and prompt token at the measured matmul rates, so the LoRA path's extra products
count against it). Also the shipped Q4_1 base with the LoRA, the cheapest file to serve, whose
base weights are not the ones trained on.

Writes `benchmarks/results/llamacpp_lora.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import invocation, write_report, write_result  # noqa: E402
from benchmarks.machine_ceiling import median_seconds, same_cpu_ceiling  # noqa: E402

ADAPTER = "smollm2-135m-referential"
ENV_KWARGS = {"split": "validation", "min_candidates": 4, "max_candidates": 6, "max_differences": 2}


def first_turns(count: int) -> list[Any]:
    """The speaker's first turn request of held-out games 0..count-1."""
    import optima_envs
    from optima_agents.policies import TurnRequest

    env = optima_envs.make("referential-game", **ENV_KWARGS)
    requests = []
    for i in range(count):
        observations, _ = env.reset(seed=1_000_000 + i, options={"index": i})
        speaker = env.current_speaker
        requests.append(TurnRequest(speaker, observations[speaker], seed=i))
    return requests


def preparation(adapter_dir: Path, base_dir: Path, repeats: int) -> dict[str, float]:
    """Seconds per training iteration each path needs before it can serve: merge + F16 export
    of the merged folder, or conversion of the adapter to a GGUF LoRA."""
    from optima_agents.models.convert import merge_adapter
    from optima_agents.models.gguf_export import export_gguf
    from optima_agents.models.gguf_lora import export_lora_gguf
    from optima_agents.models.gguf_store import shipped_gguf, template_spec

    template = shipped_gguf(template_spec(base_dir))
    config = json.loads((base_dir / "config.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        merge_s = median_seconds(lambda: merge_adapter(base_dir, adapter_dir, out / "merged"), repeats=repeats,
                                 min_time_s=0.0)
        export_s = median_seconds(lambda: export_gguf(out / "merged", out / "m.f16.gguf", "f16", template=template),
                                  repeats=repeats, min_time_s=0.0)
        lora_s = median_seconds(lambda: export_lora_gguf(adapter_dir, out / "l.gguf", base_config=config),
                                repeats=repeats, min_time_s=0.0)
    return {"merge_s": round(merge_s, 2), "export_f16_s": round(export_s, 2),
            "merged_total_s": round(merge_s + export_s, 2), "lora_convert_s": round(lora_s, 2)}


def generate(policy: Any, requests: Sequence[Any]) -> tuple[float, list[Any]]:
    """(seconds, actions) of one batched call."""
    start = time.perf_counter()
    actions = policy.act(list(requests))
    return time.perf_counter() - start, actions


def ceiling_share(actions: Sequence[Any], seconds: float, ceiling: dict[str, Any] | None) -> float | None:
    """The fewest seconds this workload's base-model FLOPs take at the machine's measured rates,
    over the measured seconds."""
    if ceiling is None:
        return None
    from benchmarks.machine_ceiling import ceiling_rates, workload_ceiling_s

    decode_rate, prefill_rate, _ = ceiling_rates(ceiling, "float32")
    fewest = workload_ceiling_s(ceiling["forward_gflop_per_token"] * 1e9, sum(len(a.token_ids) for a in actions),
                                sum(a.prompt_tokens for a in actions), decode_rate, prefill_rate)
    return round(fewest / seconds, 3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from optima_agents.models import resolve_model
    from optima_agents.models.registry import get_model_spec
    from optima_agents.policies import SamplingParams
    from optima_agents.policies.llamacpp import LlamaCppPolicy

    spec = get_model_spec(args.adapter)
    base_dir = Path(resolve_model(spec.base))
    requests = first_turns(args.prompts)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    common = dict(sampling=sampling, batch_size=args.prompts, num_threads=args.threads)
    policies = {
        "merged-f16": LlamaCppPolicy(args.adapter, weights="f16", **common),
        "lora-over-f16": LlamaCppPolicy(spec.base, weights="f16", lora=str(spec.adapter_dir), **common),
        "lora-over-q4_1": LlamaCppPolicy(spec.base, weights="q4_1", lora=str(spec.adapter_dir), **common),
    }
    ceiling = same_cpu_ceiling()
    timings: dict[str, list[float]] = {name: [] for name in policies}
    replies: dict[str, list[Any]] = {}
    for name, policy in policies.items():
        generate(policy, requests[:2])  # warm-up
    for _ in range(args.repeats):
        for name, policy in policies.items():
            seconds, actions = generate(policy, requests)
            timings[name].append(seconds)
            replies[name] = actions
    results = {}
    for name, actions in replies.items():
        seconds = statistics.median(timings[name])
        tokens = sum(len(a.token_ids) for a in actions)
        results[name] = {"tokens_per_s": round(tokens / seconds, 1), "seconds": round(seconds, 3),
                         "every_run_s": [round(t, 3) for t in timings[name]], "generated_tokens": tokens,
                         "prompt_tokens": sum(a.prompt_tokens for a in actions),
                         "identical_to_merged": sum(a.token_ids == m.token_ids
                                                    for a, m in zip(actions, replies["merged-f16"])),
                         "ceiling_share": ceiling_share(actions, seconds, ceiling),
                         "gguf": policies[name].weights.path.name}
    for policy in policies.values():
        policy.close()
    merged = results["merged-f16"]["tokens_per_s"]
    ratios = {f"{name}_over_merged": round(r["tokens_per_s"] / merged, 3) for name, r in results.items()
              if name != "merged-f16"}
    return {"workload": {"adapter": args.adapter, "lora_rank": _rank(spec.adapter_dir), "prompts": args.prompts,
                         "max_new_tokens": args.max_new_tokens, "threads": args.threads, "repeats": args.repeats,
                         "env_kwargs": ENV_KWARGS},
            "preparation": preparation(spec.adapter_dir, base_dir, args.repeats),
            "results": results, "ratios": ratios,
            "ceiling_cpu": ceiling["cpu_kind"] if ceiling else None,
            "ceiling_file": ceiling["file"] if ceiling else None}


def _rank(adapter_dir: Path) -> int:
    return int(json.loads((adapter_dir / "adapter_config.json").read_text())["r"])


def report(payload: dict[str, Any], command: str) -> str:
    w, prep = payload["workload"], payload["preparation"]
    lines = ["# llama.cpp: serving a trained model merged, or as a GGUF LoRA over its base", "",
             f"Made by: `{command}`. `{w['adapter']}` (a rank-{w['lora_rank']} LoRA over the embedded SmolLM2-135M); "
             f"the speaker's first turn of {w['prompts']} held-out referential-game games, greedy, up to "
             f"{w['max_new_tokens']} tokens, all decoded together; {w['threads']} threads; median of {w['repeats']}, "
             f"the paths interleaved; CPU {payload['machine']['cpu_kind']}, {payload['machine']['cpus']} cores.", "",
             "| path | tokens/s (median) | every run (s) | generated tokens | greedy replies identical to merged | "
             "share of ceiling |", "|---|---|---|---|---|---|"]
    for name, r in payload["results"].items():
        share = "–" if r["ceiling_share"] is None else f"{r['ceiling_share']:.0%}"
        lines.append(f"| {name} | {r['tokens_per_s']:.1f} | {', '.join(f'{t:.2f}' for t in r['every_run_s'])} | "
                     f"{r['generated_tokens']} | {r['identical_to_merged']}/{w['prompts']} | {share} |")
    lines += ["", "Ratios (tokens/s over merged-f16): "
              + ", ".join(f"`{k}` {v:.2f}x" for k, v in payload["ratios"].items()) + ".", "",
              "Preparation per training iteration (median): merge "
              f"{prep['merge_s']:.1f} s + F16 export {prep['export_f16_s']:.1f} s = {prep['merged_total_s']:.1f} s "
              f"for the merged path; {prep['lora_convert_s']:.2f} s to convert the adapter for the LoRA path (its F16 "
              "base is exported once).", "",
              "Share of ceiling: the base model's linear-layer FLOPs of every prompt and generated token at this "
              f"machine's measured matmul rates (`{payload.get('ceiling_file') or 'machine_ceiling.json'}`), over the measured seconds; the LoRA "
              "path's extra products are not counted as work, so they show as a lower share."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", default=ADAPTER, help="A registered adapter model.")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="Folder for the results (default benchmarks/results).")
    args = parser.parse_args(argv)
    payload = run(args)
    command = invocation("llamacpp_lora.py", argv)
    payload["command"] = command
    path = write_result("llamacpp_lora", payload, folder=args.out)
    write_report(path.with_suffix(".md"), report(json.loads(path.read_text()), command))
    print(path.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
